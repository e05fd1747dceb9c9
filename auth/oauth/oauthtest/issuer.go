// Package oauthtest runs an OpenID provider on a loopback port for the
// tests of writerd's OAuth resource server: OpenID discovery, a JWK Set
// with an RSA, an EC P-256 and an Ed25519 key, access tokens signed with
// github.com/golang-jwt/jwt/v5, key rotation, an outage switch, and the
// authorization code flow with PKCE (S256) that approves every request
// at once, so that an OAuth client can go through it without a browser.
//
// It is a test fixture, not an authorization server: it authenticates no
// one and keeps its codes in memory.
package oauthtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// Issuer is a running test provider.
type Issuer struct {
	// URL is the issuer identifier: the server's base URL.
	URL string
	// Subject is the sub of the tokens the authorization code flow issues.
	Subject string

	srv *httptest.Server

	mu      sync.Mutex
	keys    map[string]*key // by kid: every key the JWK Set publishes
	current map[string]string
	codes   map[string]grant
	serial  int

	down    atomic.Bool
	fetches atomic.Int64

	// Faults a test sets (under mu): the issuer the metadata names, the
	// bytes served as the JWK Set, an edit of each published JWK.
	metaIssuer string
	rawJWKS    []byte
	editJWK    func(*jwkset.JWKMarshal)
}

type key struct {
	alg  string
	priv crypto.Signer
}

// grant is an authorization code's request.
type grant struct {
	clientID, redirectURI, challenge, scope, resource string
}

// Start runs an Issuer until the test ends.
func Start(t testing.TB) *Issuer {
	t.Helper()
	is := &Issuer{Subject: "alice", keys: map[string]*key{}, current: map[string]string{}, codes: map[string]grant{}}
	for _, alg := range []string{"RS256", "ES256", "EdDSA"} {
		is.Rotate(alg)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", is.metadata)
	mux.HandleFunc("GET /jwks", is.jwks)
	mux.HandleFunc("GET /authorize", is.authorize)
	mux.HandleFunc("POST /token", is.token)
	// URL is set before the server serves: a request may arrive at once
	// (another test's client on a reused port), and the handlers read it.
	is.srv = httptest.NewUnstartedServer(mux)
	is.URL = "http://" + is.srv.Listener.Addr().String()
	is.srv.Start()
	t.Cleanup(is.srv.Close)
	return is
}

// Rotate makes a new key for alg, publishes it and signs with it from now
// on; the old key stays published until Retire. It returns the new kid.
func (is *Issuer) Rotate(alg string) string {
	var priv crypto.Signer
	var err error
	switch alg {
	case "RS256":
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case "ES256":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "EdDSA":
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		panic("oauthtest: no such algorithm " + alg)
	}
	if err != nil {
		panic(err)
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	is.serial++
	// A random part keeps two test issuers' kids apart.
	kid := fmt.Sprintf("%s-%s-%d", strings.ToLower(alg), rand.Text()[:6], is.serial)
	is.keys[kid] = &key{alg: alg, priv: priv}
	is.current[alg] = kid
	return kid
}

// Retire stops publishing every key of alg but the current one.
func (is *Issuer) Retire(alg string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	for kid, k := range is.keys {
		if k.alg == alg && kid != is.current[alg] {
			delete(is.keys, kid)
		}
	}
}

// Kid is the kid alg signs with now.
func (is *Issuer) Kid(alg string) string {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.current[alg]
}

// PublicKeyPEM is alg's current public key in PEM, as an attacker would
// find it, to sign an HS256 token with.
func (is *Issuer) PublicKeyPEM(alg string) []byte {
	is.mu.Lock()
	k := is.keys[is.current[alg]]
	is.mu.Unlock()
	der, err := x509.MarshalPKIXPublicKey(k.priv.Public())
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// SigningKey is alg's current private key, to sign a token of a form
// Sign does not make.
func (is *Issuer) SigningKey(alg string) crypto.Signer {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.keys[is.current[alg]].priv
}

// SetDown makes every endpoint answer 503 (down) or serve again.
func (is *Issuer) SetDown(down bool) { is.down.Store(down) }

// SetMetadataIssuer makes the metadata name iss as its issuer ("" is the
// issuer's own URL): a mix-up, where one issuer's metadata claims
// another's identity.
func (is *Issuer) SetMetadataIssuer(iss string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.metaIssuer = iss
}

// SetJWKS serves raw as the JWK Set in place of the issuer's keys (nil
// serves the keys again).
func (is *Issuer) SetJWKS(raw []byte) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.rawJWKS = raw
}

// JWKS is the JWK Set the issuer publishes, as served.
func (is *Issuer) JWKS() []byte {
	is.mu.Lock()
	defer is.mu.Unlock()
	b, err := json.Marshal(is.set())
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

// EditJWKs changes each published JWK before it is served (nil serves
// them as made): a key without alg, with a use or key_ops of its own.
func (is *Issuer) EditJWKs(edit func(*jwkset.JWKMarshal)) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.editJWK = edit
}

// JWKSFetches counts the fetches of the JWK Set so far.
func (is *Issuer) JWKSFetches() int { return int(is.fetches.Load()) }

// Claims are an access token's claims for aud: iss, sub, aud, scope, iat,
// nbf and exp (now + ttl), and a jti; change any before signing.
func (is *Issuer) Claims(aud, sub, scope string, ttl time.Duration) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"iss": is.URL, "sub": sub, "aud": aud, "scope": scope, "client_id": "test-client",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(ttl).Unix(), "jti": rand.Text()}
}

// Sign signs claims with alg's current key, with typ at+jwt.
func (is *Issuer) Sign(alg string, claims jwt.MapClaims) string {
	return is.SignKid(alg, is.Kid(alg), claims)
}

// SignKid signs claims with alg's current key but names kid in the
// header: an unknown kid, or a rotated one.
func (is *Issuer) SignKid(alg, kid string, claims jwt.MapClaims) string {
	is.mu.Lock()
	k := is.keys[is.current[alg]]
	is.mu.Unlock()
	tok := jwt.NewWithClaims(jwt.GetSigningMethod(alg), claims)
	tok.Header["kid"] = kid
	tok.Header["typ"] = "at+jwt"
	s, err := tok.SignedString(k.priv)
	if err != nil {
		panic(err)
	}
	return s
}

func (is *Issuer) unavailable(w http.ResponseWriter) bool {
	if is.down.Load() {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return true
	}
	return false
}

func (is *Issuer) metadata(w http.ResponseWriter, r *http.Request) {
	if is.unavailable(w) {
		return
	}
	is.mu.Lock()
	iss := is.metaIssuer
	is.mu.Unlock()
	if iss == "" {
		iss = is.URL
	}
	writeJSON(w, map[string]any{
		"issuer":                                iss,
		"authorization_endpoint":                is.URL + "/authorize",
		"token_endpoint":                        is.URL + "/token",
		"jwks_uri":                              is.URL + "/jwks",
		"response_types_supported":              []string{"code"},
		"grant_types_supported":                 []string{"authorization_code"},
		"code_challenge_methods_supported":      []string{"S256"},
		"token_endpoint_auth_methods_supported": []string{"none"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
	})
}

func (is *Issuer) jwks(w http.ResponseWriter, r *http.Request) {
	is.fetches.Add(1)
	if is.unavailable(w) {
		return
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.rawJWKS != nil {
		w.Header().Set("Content-Type", "application/json")
		w.Write(is.rawJWKS)
		return
	}
	writeJSON(w, is.set())
}

// set is the published JWK Set; mu is held.
func (is *Issuer) set() jwkset.JWKSMarshal {
	var set jwkset.JWKSMarshal
	for kid, k := range is.keys {
		j, err := jwkset.NewJWKFromKey(k.priv.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{
			KID: kid, ALG: jwkset.ALG(k.alg), USE: jwkset.UseSig}})
		if err != nil {
			panic(err)
		}
		m := j.Marshal()
		if is.editJWK != nil {
			is.editJWK(&m)
		}
		set.Keys = append(set.Keys, m)
	}
	return set
}

// authorize approves every request: it redirects to redirect_uri with a
// code bound to the request's client, redirect URI, PKCE challenge,
// scope and resource.
func (is *Issuer) authorize(w http.ResponseWriter, r *http.Request) {
	if is.unavailable(w) {
		return
	}
	q := r.URL.Query()
	redirect, err := url.Parse(q.Get("redirect_uri"))
	if err != nil || q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" {
		http.Error(w, "bad authorization request", http.StatusBadRequest)
		return
	}
	code := rand.Text()
	is.mu.Lock()
	is.codes[code] = grant{clientID: q.Get("client_id"), redirectURI: q.Get("redirect_uri"),
		challenge: q.Get("code_challenge"), scope: q.Get("scope"), resource: q.Get("resource")}
	is.mu.Unlock()
	rq := redirect.Query()
	rq.Set("code", code)
	if s := q.Get("state"); s != "" {
		rq.Set("state", s)
	}
	redirect.RawQuery = rq.Encode()
	http.Redirect(w, r, redirect.String(), http.StatusFound)
}

// token redeems a code once, checking its PKCE verifier, for an access
// token for the requested resource, signed RS256.
func (is *Issuer) token(w http.ResponseWriter, r *http.Request) {
	if is.unavailable(w) {
		return
	}
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "authorization_code" {
		oauthError(w, "unsupported_grant_type")
		return
	}
	code := r.PostForm.Get("code")
	is.mu.Lock()
	g, ok := is.codes[code]
	delete(is.codes, code)
	is.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	switch {
	case !ok, g.redirectURI != r.PostForm.Get("redirect_uri"), g.clientID != r.PostForm.Get("client_id"),
		base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		oauthError(w, "invalid_grant")
		return
	}
	aud := g.resource
	if res := r.PostForm.Get("resource"); res != "" {
		aud = res
	}
	claims := is.Claims(aud, is.Subject, g.scope, time.Hour)
	claims["client_id"] = g.clientID
	writeJSON(w, map[string]any{"access_token": is.Sign("RS256", claims), "token_type": "Bearer",
		"expires_in": 3600, "scope": g.scope})
}

func oauthError(w http.ResponseWriter, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]string{"error": code})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}
