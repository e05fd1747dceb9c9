package oauth

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/pipeline"
)

// The kinds a token is refused with (auth.Reason values), as the package
// documentation lists them.
const (
	KindMalformed         auth.Reason = "malformed"
	KindUnknownIssuer     auth.Reason = "unknown_issuer"
	KindIssuerUnreachable auth.Reason = "issuer_unreachable"
	KindBadAlgorithm      auth.Reason = "bad_algorithm"
	KindBadType           auth.Reason = "bad_type"
	KindUnknownKey        auth.Reason = "unknown_key"
	KindBadSignature      auth.Reason = "bad_signature"
	KindExpired           auth.Reason = "expired"
	KindNotYetValid       auth.Reason = "not_yet_valid"
	KindMissingClaim      auth.Reason = "missing_claim"
	KindBadAudience       auth.Reason = "bad_audience"
	KindBadPrincipal      auth.Reason = "bad_principal"
	KindInsufficientScope auth.Reason = "insufficient_scope"
)

// Kinds lists every kind, for the metrics and the tests.
var Kinds = []auth.Reason{KindMalformed, KindUnknownIssuer, KindIssuerUnreachable, KindBadAlgorithm, KindBadType,
	KindUnknownKey, KindBadSignature, KindExpired, KindNotYetValid, KindMissingClaim, KindBadAudience,
	KindBadPrincipal, KindInsufficientScope}

// Algorithms are the signature algorithms taken.
var Algorithms = []string{"RS256", "ES256", "EdDSA"}

// types are the typ headers taken ("" is none).
var types = []string{"", "JWT", "at+jwt", "application/at+jwt"}

// Provider checks access tokens from the configured issuers
// (auth.Checker) and serves the protected resource metadata. Run must run
// for tokens to be taken: until it found an issuer, that issuer's tokens
// are answered 503.
type Provider struct {
	cfg     Config
	issuers []*issuer
	parser  *jwt.Parser
	run     sync.Once
	// grantNames are the named scopes of cfg.Grants, sorted.
	grantNames []string
}

// New checks cfg and returns its Provider; nothing is fetched before Run.
func New(cfg Config) (*Provider, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.Grants = maps.Clone(cfg.Grants)
	p := &Provider{cfg: cfg, grantNames: slices.Sorted(maps.Keys(cfg.Grants))}
	for _, is := range cfg.Issuers {
		p.issuers = append(p.issuers, &issuer{Issuer: is})
	}
	p.parser = p.newParser()
	return p, nil
}

// newParser is the JWT parser of tokens, requiring iss among opts.
func (p *Provider) newParser(opts ...jwt.ParserOption) *jwt.Parser {
	return jwt.NewParser(append([]jwt.ParserOption{jwt.WithValidMethods(Algorithms), jwt.WithLeeway(p.cfg.Leeway),
		jwt.WithIssuedAt(), jwt.WithExpirationRequired(), jwt.WithTimeFunc(p.cfg.Now)}, opts...)...)
}

// Run discovers every issuer and keeps its keys until ctx ends; it
// returns when ctx ends. A second Run does nothing.
func (p *Provider) Run(ctx context.Context) {
	p.run.Do(func() {
		var wg sync.WaitGroup
		for _, is := range p.issuers {
			wg.Go(func() { p.runIssuer(ctx, is) })
		}
		wg.Wait()
		<-ctx.Done()
	})
}

// Ready reports whether every issuer was found.
func (p *Provider) Ready() bool {
	for _, is := range p.issuers {
		if is.keys.Load() == nil {
			return false
		}
	}
	return true
}

func refuse(kind auth.Reason) error {
	return &auth.Refusal{Status: http.StatusUnauthorized, Reason: kind}
}

func unavailable() error {
	return &auth.Refusal{Status: http.StatusServiceUnavailable, Reason: KindIssuerUnreachable}
}

// Check returns the caller an access token stands for, or an
// *auth.Refusal of one of the kinds; nothing of the token is kept or
// returned.
func (p *Provider) Check(ctx context.Context, token string) (pipeline.Caller, error) {
	if len(token) > MaxToken {
		return pipeline.Caller{}, refuse(KindMalformed)
	}
	var unverified jwt.MapClaims
	head, _, err := p.parser.ParseUnverified(token, &unverified)
	if err != nil {
		if errors.Is(err, jwt.ErrTokenUnverifiable) { // an alg jwt does not know
			return pipeline.Caller{}, refuse(KindBadAlgorithm)
		}
		return pipeline.Caller{}, refuse(KindMalformed)
	}
	if _, ok := head.Header["crit"]; ok {
		// crit names extensions the recipient must understand (RFC 7515
		// section 4.1.11); writerd understands none.
		return pipeline.Caller{}, refuse(KindMalformed)
	}
	iss, _ := unverified["iss"].(string)
	is, k := p.issuerOf(iss)
	switch {
	case is == nil:
		return pipeline.Caller{}, refuse(KindUnknownIssuer)
	case k == nil:
		return pipeline.Caller{}, unavailable()
	}
	var claims jwt.MapClaims
	tok, err := k.parser.ParseWithClaims(token, &claims, k.known.KeyfuncCtx(ctx))
	if errors.Is(err, jwkset.ErrKeyNotFound) && k.unknownKid.AllowN(p.cfg.Now(), 1) {
		// An unknown kid, and the period's fetch not yet spent: fetch
		// the set and look again. Spent, it is refused at once.
		claims = nil
		tok, err = k.parser.ParseWithClaims(token, &claims, k.fetch.KeyfuncCtx(ctx))
	}
	if err != nil {
		if tok != nil && tok.Method != nil && !slices.Contains(Algorithms, tok.Method.Alg()) {
			return pipeline.Caller{}, refuse(KindBadAlgorithm)
		}
		kind := kindOf(err)
		if kind == KindUnknownKey && is.jwksDown.Load() {
			return pipeline.Caller{}, unavailable()
		}
		return pipeline.Caller{}, refuse(kind)
	}
	if typ, _ := tok.Header["typ"].(string); !slices.Contains(types, typ) {
		return pipeline.Caller{}, refuse(KindBadType)
	}
	aud, err := claims.GetAudience()
	if err != nil || !(oauthex.MatchesResource(aud, p.cfg.Audience) || slices.ContainsFunc(aud, func(a string) bool { return slices.Contains(p.cfg.AlsoAccepted, a) })) {
		return pipeline.Caller{}, refuse(KindBadAudience)
	}
	sub, _ := claims[p.cfg.PrincipalClaim].(string)
	principal := is.Name + ":" + sub
	if sub == "" || !pipeline.ValidPrincipal(principal) {
		return pipeline.Caller{}, refuse(KindBadPrincipal)
	}
	scopes, grants := p.scopes(claims[p.cfg.ScopeClaim])
	if scopes == 0 {
		return pipeline.Caller{}, &auth.Refusal{Status: http.StatusForbidden, Reason: KindInsufficientScope, Scope: strings.Join(p.ScopeValues(), " ")}
	}
	return pipeline.Caller{Principal: principal, Scopes: scopes, Grants: grants}, nil
}

// issuerOf finds the issuer whose tokens carry iss, and its keys if it
// was discovered.
func (p *Provider) issuerOf(iss string) (*issuer, *keys) {
	if iss == "" {
		return nil, nil
	}
	for _, is := range p.issuers {
		if k := is.keys.Load(); k != nil {
			if k.iss == iss {
				return is, k
			}
		} else if sameIssuer(is.URL, iss) {
			return is, nil
		}
	}
	return nil, nil
}

// kindOf maps a jwt error to its kind.
func kindOf(err error) auth.Reason {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return KindExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return KindNotYetValid
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return KindUnknownIssuer
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing), errors.Is(err, jwt.ErrInvalidType):
		return KindMissingClaim
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return KindUnknownKey
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return KindBadSignature
	}
	return KindMalformed
}

// scopes maps a scope claim, a space-separated string or a list of
// strings, to writerd's scopes and the named scopes (Caller.Grants: space
// separated, in the order of their names).
func (p *Provider) scopes(claim any) (pipeline.Scope, string) {
	var values []string
	switch c := claim.(type) {
	case string:
		values = strings.Fields(c)
	case []any:
		for _, v := range c {
			if s, ok := v.(string); ok {
				values = append(values, s)
			}
		}
	}
	var granted pipeline.Scope
	for s, name := range p.cfg.Scopes {
		if slices.Contains(values, name) {
			granted |= s
		}
	}
	var grants []string
	for _, name := range p.grantNames {
		if slices.Contains(values, p.cfg.Grants[name]) {
			grants = append(grants, name)
		}
	}
	return granted, strings.Join(grants, " ")
}

// ScopeValues are the scope values that grant writerd's scopes, in the
// order read, write, audit, admin: what a token granting none of them is
// told to get. The named scopes' values are not among them (they only add
// to these); the metadata lists them too.
func (p *Provider) ScopeValues() []string {
	var vs []string
	for _, s := range scopeOrder {
		if v, ok := p.cfg.Scopes[s]; ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// scopesSupported are the metadata's scopes_supported: the values of
// writerd's scopes, then those of the named scopes, in their names' order,
// so that a client asks for an upstream's scope too.
func (p *Provider) scopesSupported() []string {
	vs := p.ScopeValues()
	for _, name := range p.grantNames {
		vs = append(vs, p.cfg.Grants[name])
	}
	return vs
}

// Issuers are the configured issuers.
func (p *Provider) Issuers() []Issuer { return p.cfg.Issuers }

// MetadataPath is the well-known path of the protected resource
// metadata: /.well-known/oauth-protected-resource, followed by the
// audience's path (RFC 9728 section 3.1).
const MetadataPath = "/.well-known/oauth-protected-resource"

// MetadataPaths are the paths the metadata is served at: the path
// derived from the audience, and the bare well-known path for clients
// that look there first.
func (p *Provider) MetadataPaths() []string {
	if _, path := p.audience(); path != "" {
		return []string{MetadataPath + path, MetadataPath}
	}
	return []string{MetadataPath}
}

// MetadataURL is the absolute URL of the metadata that 401 challenges
// name (resource_metadata): on the audience's scheme and host, never the
// request's Host.
func (p *Provider) MetadataURL() string {
	origin, path := p.audience()
	return origin + MetadataPath + path
}

// audience splits the audience into its origin and its path without a
// trailing slash; New checked that it parses.
func (p *Provider) audience() (origin, path string) {
	u, _ := url.Parse(p.cfg.Audience)
	return u.Scheme + "://" + u.Host, strings.TrimSuffix(u.EscapedPath(), "/")
}

// Metadata is the protected resource metadata (RFC 9728 section 2).
func (p *Provider) Metadata() *oauthex.ProtectedResourceMetadata {
	m := &oauthex.ProtectedResourceMetadata{
		Resource:               p.cfg.Audience,
		ScopesSupported:        p.scopesSupported(),
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "writerd",
	}
	for _, is := range p.cfg.Issuers {
		m.AuthorizationServers = append(m.AuthorizationServers, is.URL)
	}
	return m
}
