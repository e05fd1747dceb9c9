package oauth_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/writerd/writerd/auth/oauth"
	"github.com/writerd/writerd/auth/oauth/oauthtest"
	"github.com/writerd/writerd/internal/logtest"
)

// padded is set, a JSON document, grown with spaces to n bytes.
func padded(t *testing.T, set []byte, n int) []byte {
	t.Helper()
	set = bytes.TrimSpace(set)
	if len(set) > n {
		t.Fatalf("the set is %d bytes already", len(set))
	}
	return append(set[:len(set)-1:len(set)-1], append(bytes.Repeat([]byte(" "), n-len(set)), '}')...)
}

// TestJWKS_SizeCap: a JWK Set of MaxJWKS bytes is taken; one byte more is
// refused as a set that cannot be fetched (its tokens 503, and the log
// says why), as the metadata is, and never read whole.
func TestJWKS_SizeCap(t *testing.T) {
	for _, tc := range []struct {
		size int
		ok   bool
	}{{oauth.MaxJWKS, true}, {oauth.MaxJWKS + 1, false}} {
		is := oauthtest.Start(t)
		is.SetJWKS(padded(t, is.JWKS(), tc.size))
		var log logtest.Buffer
		p := startProvider(t, is, func(c *oauth.Config) { c.Logger = slog.New(slog.NewTextHandler(&log, nil)) })
		_, err := p.Check(t.Context(), is.Sign("RS256", is.Claims(audience, "alice", "writerd:read", time.Hour)))
		if tc.ok {
			if err != nil {
				t.Errorf("a set of %d bytes: %v, want taken", tc.size, err)
			}
			continue
		}
		if kind, status := refusal(t, err); kind != oauth.KindIssuerUnreachable || status != http.StatusServiceUnavailable {
			t.Errorf("a set of %d bytes: %s %d, want %s 503", tc.size, kind, status, oauth.KindIssuerUnreachable)
		}
		if !strings.Contains(log.String(), "larger than 1 MiB") {
			t.Errorf("the log does not say the set is too large:\n%s", log.String())
		}
	}
}

// TestCheck_Crit: a JWS whose crit names an extension is refused
// (RFC 7515 section 4.1.11: writerd understands none), though its
// signature is good.
func TestCheck_Crit(t *testing.T) {
	is := oauthtest.Start(t)
	p := startProvider(t, is, nil)
	for name, crit := range map[string]any{"an extension": []string{"exp-policy"}, "an empty list": []string{}, "not a list": "exp-policy"} {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, is.Claims(audience, "alice", "writerd:read", time.Hour))
		tok.Header["kid"] = is.Kid("RS256")
		tok.Header["crit"] = crit
		tok.Header["exp-policy"] = "strict"
		s, err := tok.SignedString(is.SigningKey("RS256"))
		if err != nil {
			t.Fatal(err)
		}
		c, err := p.Check(t.Context(), s)
		if err == nil {
			t.Errorf("crit %s: taken as %q", name, c.Principal)
			continue
		}
		if kind, _ := refusal(t, err); kind != oauth.KindMalformed {
			t.Errorf("crit %s: %s, want %s", name, kind, oauth.KindMalformed)
		}
	}
}

// TestJWKS_KeyUse: a key whose key_ops does not allow verify, or whose
// use is not sig, verifies nothing; one that allows it verifies.
func TestJWKS_KeyUse(t *testing.T) {
	is := oauthtest.Start(t)
	rs, es, ed := is.Kid("RS256"), is.Kid("ES256"), is.Kid("EdDSA")
	is.EditJWKs(func(m *jwkset.JWKMarshal) {
		switch m.KID {
		case rs:
			m.KEYOPS = []jwkset.KEYOPS{jwkset.KeyOpsSign}
		case es:
			m.USE = jwkset.UseEnc
		case ed:
			m.KEYOPS = []jwkset.KEYOPS{jwkset.KeyOpsVerify}
		}
	})
	p := startProvider(t, is, nil)
	claims := is.Claims(audience, "alice", "writerd:read", time.Hour)
	for alg, want := range map[string]bool{"RS256": false, "ES256": false, "EdDSA": true} {
		c, err := p.Check(t.Context(), is.Sign(alg, claims))
		if want {
			if err != nil {
				t.Errorf("%s, key_ops [verify]: %v, want taken", alg, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: taken as %q with a key that may not verify", alg, c.Principal)
			continue
		}
		if kind, _ := refusal(t, err); kind != oauth.KindUnknownKey {
			t.Errorf("%s: %s, want %s", alg, kind, oauth.KindUnknownKey)
		}
	}
}

// TestCheck_AllowedAlgorithms: the parser is given the algorithms taken
// (jwt.WithValidMethods). Against a set whose RSA key names no alg, a
// token signed PS256 or RS512 with that very key, or HS256 keyed with its
// public key, is refused bad_algorithm, though its signature is good.
func TestCheck_AllowedAlgorithms(t *testing.T) {
	is := oauthtest.Start(t)
	is.EditJWKs(func(m *jwkset.JWKMarshal) { m.ALG = "" })
	p := startProvider(t, is, nil)
	claims := is.Claims(audience, "alice", "writerd:read", time.Hour)
	sign := func(m jwt.SigningMethod, key any) string {
		tok := jwt.NewWithClaims(m, claims)
		tok.Header["kid"] = is.Kid("RS256")
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if _, err := p.Check(t.Context(), sign(jwt.SigningMethodRS256, is.SigningKey("RS256"))); err != nil {
		t.Fatalf("RS256: %v", err)
	}
	for name, tok := range map[string]string{
		"PS256":                     sign(jwt.SigningMethodPS256, is.SigningKey("RS256")),
		"RS512":                     sign(jwt.SigningMethodRS512, is.SigningKey("RS256")),
		"HS256 with the public key": sign(jwt.SigningMethodHS256, is.PublicKeyPEM("RS256")),
		"none":                      sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType),
	} {
		c, err := p.Check(t.Context(), tok)
		if err == nil {
			t.Errorf("%s: taken as %q", name, c.Principal)
			continue
		}
		if kind, _ := refusal(t, err); kind != oauth.KindBadAlgorithm {
			t.Errorf("%s: %s, want %s", name, kind, oauth.KindBadAlgorithm)
		}
	}
}

// TestDiscovery_MixUp: an issuer whose metadata names another issuer is
// never taken: it stays undiscovered (its tokens 503), the log says why,
// and a token carrying the issuer its metadata named, signed with its
// keys, is refused.
func TestDiscovery_MixUp(t *testing.T) {
	is := oauthtest.Start(t)
	other := oauthtest.Start(t)
	is.SetMetadataIssuer(other.URL)
	var log logtest.Buffer
	p, err := oauth.New(oauth.Config{Issuers: []oauth.Issuer{{Name: "corp", URL: is.URL}}, Audience: audience,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	const why = "its metadata names another issuer"
	for deadline := time.Now().Add(10 * time.Second); !p.Ready() && !strings.Contains(log.String(), why); {
		if time.Now().After(deadline) {
			t.Fatal("no discovery attempt in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if p.Ready() {
		t.Fatal("an issuer whose metadata names another issuer was taken")
	}
	claims := is.Claims(audience, "alice", "writerd:read", time.Hour)
	_, err = p.Check(t.Context(), is.Sign("RS256", claims))
	if kind, status := refusal(t, err); kind != oauth.KindIssuerUnreachable || status != http.StatusServiceUnavailable {
		t.Errorf("a token of the configured issuer: %s %d, want %s 503", kind, status, oauth.KindIssuerUnreachable)
	}
	claims["iss"] = other.URL
	c, err := p.Check(t.Context(), is.Sign("RS256", claims))
	if err == nil {
		t.Fatalf("a token naming the issuer the metadata claimed was taken as %q", c.Principal)
	}
	if kind, _ := refusal(t, err); kind != oauth.KindUnknownIssuer {
		t.Errorf("a token naming the issuer the metadata claimed: %s, want %s", kind, oauth.KindUnknownIssuer)
	}
}

// clock is a Config.Now the test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.now = t }

// TestUnknownKid_RefusedAtOnce: the unknown-kid fetch is allowed once a
// RefreshEvery by the provider's own clock, and a token met while it is
// spent is refused without a fetch, however late in the period: the
// limiter is asked, never waited on. Each step is counted in fetches of
// the set, under a clock the test moves (nothing here is timed).
func TestUnknownKid_RefusedAtOnce(t *testing.T) {
	is := oauthtest.Start(t)
	start := time.Now()
	clk := &clock{now: start}
	const every = 10 * time.Second
	p := startProvider(t, is, func(c *oauth.Config) { c.RefreshEvery, c.Now = every, clk.Now })
	claims := is.Claims(audience, "alice", "writerd:read", 2*time.Hour)
	base := is.JWKSFetches()
	for i, step := range []struct {
		at      time.Duration
		fetches int // more than base, after the step
	}{
		{0, 1},                         // the period's fetch
		{time.Second, 1},               // spent
		{every - time.Millisecond, 1},  // late in the period: still spent, refused at once
		{every, 2},                     // the next period's fetch
		{every + every/2, 2},           // spent
		{3*every - time.Nanosecond, 3}, // a period later, with one to spare
	} {
		clk.Set(start.Add(step.at))
		_, err := p.Check(t.Context(), is.SignKid("RS256", "unknown-"+string(rune('a'+i)), claims))
		if kind, _ := refusal(t, err); kind != oauth.KindUnknownKey {
			t.Errorf("step %d: %s, want %s", i, kind, oauth.KindUnknownKey)
		}
		if got := is.JWKSFetches() - base; got != step.fetches {
			t.Fatalf("an unknown kid %v into the first period: %d fetches in all, want %d", step.at, got, step.fetches)
		}
	}
	// A rotated key is found by the next period's fetch, not before.
	is.Rotate("RS256")
	fresh := is.Sign("RS256", claims)
	if _, err := p.Check(t.Context(), fresh); err == nil {
		t.Fatal("a token of a rotated key was taken while the period's fetch was spent")
	}
	clk.Set(start.Add(4 * every))
	if _, err := p.Check(t.Context(), fresh); err != nil {
		t.Fatalf("a token of a rotated key in a fresh period: %v", err)
	}
}
