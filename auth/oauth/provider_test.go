package oauth_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/auth/oauth"
	"github.com/writerd/writerd/auth/oauth/oauthtest"
	"github.com/writerd/writerd/pipeline"
)

const audience = "http://127.0.0.1:7070/mcp"

// startProvider runs a Provider of one issuer, "corp", until the test
// ends, and waits for it to find the issuer.
func startProvider(t testing.TB, is *oauthtest.Issuer, change func(*oauth.Config)) *oauth.Provider {
	t.Helper()
	cfg := oauth.Config{Issuers: []oauth.Issuer{{Name: "corp", URL: is.URL}}, Audience: audience}
	if change != nil {
		change(&cfg)
	}
	p, err := oauth.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitReady(t, p)
	return p
}

func waitReady(t testing.TB, p *oauth.Provider) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !p.Ready(); {
		if time.Now().After(deadline) {
			t.Fatal("the provider did not find its issuer in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// refusal is the kind and status of a Check's error, failing the test on
// any other error.
func refusal(t *testing.T, err error) (auth.Reason, int) {
	t.Helper()
	var ref *auth.Refusal
	if !errors.As(err, &ref) {
		t.Fatalf("Check: %v, want an *auth.Refusal", err)
	}
	return ref.Reason, ref.Status
}

// TestCheck_Tokens: each good token is its issuer's NAME:sub with the
// scopes mapped; each bad one is refused with its kind and status, and
// the error says nothing but the kind.
func TestCheck_Tokens(t *testing.T) {
	is := oauthtest.Start(t)
	other := oauthtest.Start(t) // another provider's keys
	p := startProvider(t, is, nil)
	now := time.Now()
	good := func() jwt.MapClaims { return is.Claims(audience, "alice", "writerd:read writerd:write", time.Hour) }
	with := func(change func(jwt.MapClaims)) jwt.MapClaims { c := good(); change(c); return c }

	tampered := func() string { // the payload of a token signed for bob, under alice's signature
		a := strings.Split(is.Sign("RS256", good()), ".")
		b := strings.Split(is.Sign("RS256", with(func(c jwt.MapClaims) { c["sub"] = "bob"; c["scope"] = "writerd:audit" })), ".")
		return a[0] + "." + b[1] + "." + a[2]
	}
	flipped := func() string {
		tok := is.Sign("ES256", good())
		last := tok[len(tok)-2]
		repl := byte('A')
		if last == 'A' {
			repl = 'B'
		}
		return tok[:len(tok)-2] + string(repl) + tok[len(tok)-1:]
	}
	none := func() string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodNone, good()).SignedString(jwt.UnsafeAllowNoneSignatureType)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	hmac := func() string { // HS256, keyed with the public key an attacker can fetch
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, good())
		tok.Header["kid"] = is.Kid("RS256")
		s, err := tok.SignedString(is.PublicKeyPEM("RS256"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	ok := []struct {
		name   string
		token  string
		scopes pipeline.Scope
	}{
		{"RS256", is.Sign("RS256", good()), pipeline.ScopeRead | pipeline.ScopeWrite},
		{"ES256", is.Sign("ES256", good()), pipeline.ScopeRead | pipeline.ScopeWrite},
		{"EdDSA", is.Sign("EdDSA", good()), pipeline.ScopeRead | pipeline.ScopeWrite},
		{"audit alone", is.Sign("RS256", with(func(c jwt.MapClaims) { c["scope"] = "openid writerd:audit" })), pipeline.ScopeAudit},
		{"aud a list", is.Sign("RS256", with(func(c jwt.MapClaims) { c["aud"] = []string{"https://other.example", audience} })), pipeline.ScopeRead | pipeline.ScopeWrite},
		{"aud with a trailing slash", is.Sign("RS256", with(func(c jwt.MapClaims) { c["aud"] = audience + "/" })), pipeline.ScopeRead | pipeline.ScopeWrite},
		{"expired within the leeway", is.Sign("RS256", with(func(c jwt.MapClaims) { c["exp"] = now.Add(-10 * time.Second).Unix() })), pipeline.ScopeRead | pipeline.ScopeWrite},
		{"nbf within the leeway", is.Sign("RS256", with(func(c jwt.MapClaims) { c["nbf"] = now.Add(10 * time.Second).Unix() })), pipeline.ScopeRead | pipeline.ScopeWrite},
		{"no nbf", is.Sign("RS256", with(func(c jwt.MapClaims) { delete(c, "nbf") })), pipeline.ScopeRead | pipeline.ScopeWrite},
	}
	for _, tc := range ok {
		t.Run("ok/"+tc.name, func(t *testing.T) {
			c, err := p.Check(t.Context(), tc.token)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if c.Principal != "corp:alice" || c.Scopes != tc.scopes {
				t.Errorf("caller %q %v, want corp:alice %v", c.Principal, c.Scopes, tc.scopes)
			}
		})
	}

	bad := []struct {
		name   string
		token  string
		kind   auth.Reason
		status int
	}{
		{"expired", is.Sign("RS256", with(func(c jwt.MapClaims) { c["exp"] = now.Add(-2 * time.Minute).Unix() })), oauth.KindExpired, 401},
		{"not yet valid", is.Sign("RS256", with(func(c jwt.MapClaims) { c["nbf"] = now.Add(5 * time.Minute).Unix() })), oauth.KindNotYetValid, 401},
		{"issued in the future", is.Sign("RS256", with(func(c jwt.MapClaims) { c["iat"] = now.Add(5 * time.Minute).Unix() })), oauth.KindNotYetValid, 401},
		{"no exp", is.Sign("RS256", with(func(c jwt.MapClaims) { delete(c, "exp") })), oauth.KindMissingClaim, 401},
		{"exp a string", is.Sign("RS256", with(func(c jwt.MapClaims) { c["exp"] = "tomorrow" })), oauth.KindMissingClaim, 401},
		{"wrong audience", is.Sign("RS256", with(func(c jwt.MapClaims) { c["aud"] = "http://127.0.0.1:7070/other" })), oauth.KindBadAudience, 401},
		{"audience of another port", is.Sign("RS256", with(func(c jwt.MapClaims) { c["aud"] = "http://127.0.0.1:7071/mcp" })), oauth.KindBadAudience, 401},
		{"no audience", is.Sign("RS256", with(func(c jwt.MapClaims) { delete(c, "aud") })), oauth.KindBadAudience, 401},
		{"wrong issuer", is.Sign("RS256", with(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" })), oauth.KindUnknownIssuer, 401},
		{"no issuer", is.Sign("RS256", with(func(c jwt.MapClaims) { delete(c, "iss") })), oauth.KindUnknownIssuer, 401},
		{"another provider's key under our iss", other.Sign("RS256", with(func(c jwt.MapClaims) { c["iss"] = is.URL })), oauth.KindUnknownKey, 401},
		{"our kid, another provider's key", other.SignKid("RS256", is.Kid("RS256"), with(func(c jwt.MapClaims) { c["iss"] = is.URL })), oauth.KindBadSignature, 401},
		{"tampered payload", tampered(), oauth.KindBadSignature, 401},
		{"tampered signature", flipped(), oauth.KindBadSignature, 401},
		{"alg none", none(), oauth.KindBadAlgorithm, 401},
		{"HS256 with the public key", hmac(), oauth.KindBadAlgorithm, 401},
		{"unknown kid", is.SignKid("RS256", "no-such-kid", good()), oauth.KindUnknownKey, 401},
		{"no mapped scope", is.Sign("RS256", with(func(c jwt.MapClaims) { c["scope"] = "openid profile writerd:reader" })), oauth.KindInsufficientScope, 403},
		{"no scope claim", is.Sign("RS256", with(func(c jwt.MapClaims) { delete(c, "scope") })), oauth.KindInsufficientScope, 403},
		{"sub with a space", is.Sign("RS256", with(func(c jwt.MapClaims) { c["sub"] = "alice smith" })), oauth.KindBadPrincipal, 401},
		{"sub too long", is.Sign("RS256", with(func(c jwt.MapClaims) { c["sub"] = strings.Repeat("a", 124) })), oauth.KindBadPrincipal, 401},
		{"sub not ASCII", is.Sign("RS256", with(func(c jwt.MapClaims) { c["sub"] = "ålice" })), oauth.KindBadPrincipal, 401},
		{"no sub", is.Sign("RS256", with(func(c jwt.MapClaims) { delete(c, "sub") })), oauth.KindBadPrincipal, 401},
		{"sub a number", is.Sign("RS256", with(func(c jwt.MapClaims) { c["sub"] = 42 })), oauth.KindBadPrincipal, 401},
		{"not a JWT", "abc.def", oauth.KindMalformed, 401},
		{"three dots of nothing", "..", oauth.KindMalformed, 401},
		{"too long", is.Sign("RS256", with(func(c jwt.MapClaims) { c["pad"] = strings.Repeat("x", oauth.MaxToken) })), oauth.KindMalformed, 401},
	}
	for _, tc := range bad {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			c, err := p.Check(t.Context(), tc.token)
			if err == nil {
				t.Fatalf("Check took it as %q", c.Principal)
			}
			kind, status := refusal(t, err)
			if kind != tc.kind || status != tc.status {
				t.Errorf("refused %s %d, want %s %d", kind, status, tc.kind, tc.status)
			}
			if err.Error() != string(kind) || c != (pipeline.Caller{}) {
				t.Errorf("error %q, caller %+v: want the kind alone and no caller", err, c)
			}
		})
	}
	// At the leeway's edge: 31 s late is refused, 29 s is taken.
	for _, tc := range []struct {
		late time.Duration
		ok   bool
	}{{29 * time.Second, true}, {31 * time.Second, false}} {
		_, err := p.Check(t.Context(), is.Sign("RS256", with(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-tc.late).Unix() })))
		if (err == nil) != tc.ok {
			t.Errorf("expired %v ago: error %v, want taken %v", tc.late, err, tc.ok)
		}
	}
	// At the principal's edge: 128 bytes in all is taken, 129 refused.
	for n, want := range map[int]bool{128 - len("corp:"): true, 129 - len("corp:"): false} {
		_, err := p.Check(t.Context(), is.Sign("RS256", with(func(c jwt.MapClaims) { c["sub"] = strings.Repeat("s", n) })))
		if (err == nil) != want {
			t.Errorf("sub of %d bytes: error %v, want taken %v", n, err, want)
		}
	}
}

// TestCheck_TypeHeader: RFC 9068's at+jwt, JWT and none are taken; a typ
// of another kind is refused.
func TestCheck_TypeHeader(t *testing.T) {
	is := oauthtest.Start(t)
	p := startProvider(t, is, nil)
	for typ, want := range map[any]bool{"at+jwt": true, "application/at+jwt": true, "JWT": true, nil: true, "dpop+jwt": false, "logout+jwt": false} {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, is.Claims(audience, "alice", "writerd:read", time.Hour))
		tok.Header["kid"] = is.Kid("RS256")
		if typ == nil {
			delete(tok.Header, "typ")
		} else {
			tok.Header["typ"] = typ
		}
		s, err := tok.SignedString(is.SigningKey("RS256"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Check(t.Context(), s)
		if (err == nil) != want {
			t.Errorf("typ %v: error %v, want taken %v", typ, err, want)
		}
		if !want {
			if kind, _ := refusal(t, err); kind != oauth.KindBadType {
				t.Errorf("typ %v refused %s, want %s", typ, kind, oauth.KindBadType)
			}
		}
	}
}

// TestCheck_AlsoAccepted: an aud of the accepted values is taken, as
// given and no other way.
func TestCheck_AlsoAccepted(t *testing.T) {
	is := oauthtest.Start(t)
	p := startProvider(t, is, func(c *oauth.Config) { c.AlsoAccepted = []string{"6f1c2a9e-0000-4000-8000-000000000001"} })
	for aud, want := range map[string]bool{"6f1c2a9e-0000-4000-8000-000000000001": true, "6f1c2a9e-0000-4000-8000-000000000001/": false,
		"6F1C2A9E-0000-4000-8000-000000000001": false, audience: true} {
		_, err := p.Check(t.Context(), is.Sign("RS256", is.Claims(aud, "alice", "writerd:read", time.Hour)))
		if (err == nil) != want {
			t.Errorf("aud %q: %v, want taken %v", aud, err, want)
		}
	}
}

// TestCheck_ConfiguredClaims: the principal from client_id, the scopes
// from a list under scp, by configured names.
func TestCheck_ConfiguredClaims(t *testing.T) {
	is := oauthtest.Start(t)
	p := startProvider(t, is, func(c *oauth.Config) {
		c.PrincipalClaim, c.ScopeClaim = "client_id", "scp"
		c.Scopes = map[pipeline.Scope]string{pipeline.ScopeWrite: "Records.Write", pipeline.ScopeAdmin: "Backups"}
	})
	claims := is.Claims(audience, "alice", "", time.Hour)
	claims["client_id"], claims["scp"] = "nightly-job", []string{"Records.Write", "Backups", "writerd:read"}
	c, err := p.Check(t.Context(), is.Sign("EdDSA", claims))
	if err != nil {
		t.Fatal(err)
	}
	if c.Principal != "corp:nightly-job" || c.Scopes != pipeline.ScopeWrite|pipeline.ScopeAdmin {
		t.Errorf("caller %q %v, want corp:nightly-job write,admin", c.Principal, auth.FormatScopes(c.Scopes))
	}
	claims["scp"] = "Records.Write" // a string is split on spaces, as scope is
	if c, err = p.Check(t.Context(), is.Sign("EdDSA", claims)); err != nil || c.Scopes != pipeline.ScopeWrite {
		t.Errorf("scp as a string: %v %v", auth.FormatScopes(c.Scopes), err)
	}
	claims["scp"] = []string{"writerd:write"}
	_, err = p.Check(t.Context(), is.Sign("EdDSA", claims))
	var ref *auth.Refusal
	if !errors.As(err, &ref) || ref.Status != http.StatusForbidden || ref.Scope != "Records.Write Backups" {
		t.Errorf("no mapped scope: %v %+v, want 403 naming Records.Write Backups", err, ref)
	}
}

// TestKeyRotation: after the issuer rotates, a token of the new key is
// taken after one fetch of the JWK Set; the old key's tokens still work
// while it is published. A flood of made-up kids costs one fetch in all
// (RefreshEvery is a minute here), each refused at once.
func TestKeyRotation(t *testing.T) {
	is := oauthtest.Start(t)
	p := startProvider(t, is, func(c *oauth.Config) { c.RefreshEvery = time.Minute })
	claims := is.Claims(audience, "alice", "writerd:write", time.Hour)
	old := is.Sign("ES256", claims)
	if _, err := p.Check(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	base := is.JWKSFetches()
	is.Rotate("ES256")
	fresh := is.Sign("ES256", claims)
	if _, err := p.Check(t.Context(), fresh); err != nil {
		t.Fatalf("a token of the rotated key: %v", err)
	}
	if got := is.JWKSFetches() - base; got != 1 {
		t.Errorf("the rotated key took %d fetches of the JWK Set, want 1", got)
	}
	for range 3 {
		if _, err := p.Check(t.Context(), fresh); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Check(t.Context(), old); err != nil {
		t.Errorf("a token of the old key, still published: %v", err)
	}

	// A flood at a provider whose limiter is fresh: the first made-up kid
	// fetches the set once; every other is refused without a fetch.
	p = startProvider(t, is, func(c *oauth.Config) { c.RefreshEvery = time.Minute })
	base = is.JWKSFetches()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Go(func() {
			kid := "made-up-" + strings.Repeat("x", i%7) + time.Now().Format(time.RFC3339Nano)
			_, err := p.Check(context.Background(), is.SignKid("RS256", kid, claims))
			if kind, _ := refusal(t, err); kind != oauth.KindUnknownKey {
				t.Errorf("a made-up kid: %s, want %s", kind, oauth.KindUnknownKey)
			}
		})
	}
	wg.Wait()
	if got := is.JWKSFetches() - base; got != 1 {
		t.Errorf("400 made-up kids made %d fetches of the JWK Set, want 1", got)
	}
	t.Logf("400 made-up kids: %d fetches, refused in %v", is.JWKSFetches()-base, time.Since(start))
	if _, err := p.Check(t.Context(), fresh); err != nil {
		t.Errorf("a good token after the flood: %v", err)
	}
}

// TestIssuerUnreachable: while the issuer cannot be reached, its tokens
// are answered 503; once it can, they are taken, without a restart.
func TestIssuerUnreachable(t *testing.T) {
	is := oauthtest.Start(t)
	is.SetDown(true)
	p, err := oauth.New(oauth.Config{Issuers: []oauth.Issuer{{Name: "corp", URL: is.URL}}, Audience: audience})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	tok := is.Sign("RS256", is.Claims(audience, "alice", "writerd:read", time.Hour))
	time.Sleep(50 * time.Millisecond)
	_, err = p.Check(t.Context(), tok)
	if kind, status := refusal(t, err); kind != oauth.KindIssuerUnreachable || status != http.StatusServiceUnavailable {
		t.Errorf("issuer down: %s %d, want %s 503", kind, status, oauth.KindIssuerUnreachable)
	}
	is.SetDown(false)
	waitReady(t, p)
	if _, err := p.Check(t.Context(), tok); err != nil {
		t.Errorf("issuer back: %v", err)
	}
}

// TestConfig: what New refuses, and the metadata's paths and URL.
func TestConfig(t *testing.T) {
	is := []oauth.Issuer{{Name: "corp", URL: "https://login.example.com/tenant/v2.0"}}
	for name, cfg := range map[string]oauth.Config{
		"no issuer":           {Audience: "https://w.example.com/mcp"},
		"name with a colon":   {Issuers: []oauth.Issuer{{Name: "co:rp", URL: "https://a.example"}}, Audience: "https://w.example.com/mcp"},
		"name in capitals":    {Issuers: []oauth.Issuer{{Name: "Corp", URL: "https://a.example"}}, Audience: "https://w.example.com/mcp"},
		"name twice":          {Issuers: []oauth.Issuer{{Name: "a", URL: "https://a.example"}, {Name: "a", URL: "https://b.example"}}, Audience: "https://w.example.com/mcp"},
		"http issuer":         {Issuers: []oauth.Issuer{{Name: "a", URL: "http://a.example"}}, Audience: "https://w.example.com/mcp"},
		"no audience":         {Issuers: is},
		"audience with query": {Issuers: is, Audience: "https://w.example.com/mcp?x=1"},
		"scope with a space":  {Issuers: is, Audience: "https://w.example.com/mcp", Scopes: map[pipeline.Scope]string{pipeline.ScopeRead: "a b"}},
		"one value two scopes": {Issuers: is, Audience: "https://w.example.com/mcp",
			Scopes: map[pipeline.Scope]string{pipeline.ScopeRead: "x", pipeline.ScopeWrite: "x"}},
	} {
		if _, err := oauth.New(cfg); !errors.Is(err, oauth.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	p, err := oauth.New(oauth.Config{Issuers: is, Audience: "https://w.example.com:8443/mcp"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.MetadataURL(), "https://w.example.com:8443/.well-known/oauth-protected-resource/mcp"; got != want {
		t.Errorf("MetadataURL %q, want %q", got, want)
	}
	if got := strings.Join(p.MetadataPaths(), " "); got != "/.well-known/oauth-protected-resource/mcp /.well-known/oauth-protected-resource" {
		t.Errorf("MetadataPaths %q", got)
	}
	m := p.Metadata()
	if m.Resource != "https://w.example.com:8443/mcp" || strings.Join(m.AuthorizationServers, " ") != is[0].URL ||
		strings.Join(m.ScopesSupported, " ") != "writerd:read writerd:write writerd:audit" || strings.Join(m.BearerMethodsSupported, " ") != "header" {
		t.Errorf("metadata %+v", m)
	}
	root, _ := oauth.New(oauth.Config{Issuers: is, Audience: "https://w.example.com/"})
	if got := root.MetadataURL(); got != "https://w.example.com/.well-known/oauth-protected-resource" {
		t.Errorf("MetadataURL of a root audience %q", got)
	}
}
