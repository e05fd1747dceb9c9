package oauth

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/writerd/writerd/internal/loopback"
	"github.com/writerd/writerd/pipeline"
)

// Issuer is an authorization server whose access tokens writerd takes.
type Issuer struct {
	// Name labels the issuer in principals (NAME:subject), logs and
	// metrics: 1 to 32 lowercase letters, digits and dashes, beginning
	// with a letter.
	Name string
	// URL is the issuer identifier, as its metadata and its tokens' iss
	// state it (a trailing slash apart).
	URL string
}

// Config configures a Provider.
type Config struct {
	Issuers []Issuer
	// Audience is the canonical URI of writerd's /mcp, such as
	// https://writerd.example.com/mcp: tokens must name it in aud, and the
	// protected resource metadata names it as the resource.
	Audience string
	// AlsoAccepted are other aud values that name writerd, compared
	// exactly: Entra ID's v2 access tokens carry the API's application
	// (client) ID, never its URI.
	AlsoAccepted []string
	// PrincipalClaim is the claim the principal is made of after the
	// issuer's name; default "sub".
	PrincipalClaim string
	// ScopeClaim is the claim the scopes are read from: a space-separated
	// string or a list of strings; default "scope".
	ScopeClaim string
	// Scopes names, for each of writerd's scopes, the scope value an
	// issuer grants it by; default DefaultScopes. A writerd scope absent
	// from the map is granted by no token.
	Scopes map[pipeline.Scope]string
	// Grants names, for each named scope (an upstream's own, which its
	// tools need besides read or write; pipeline.ValidScopeName), the
	// scope value an issuer grants it by: a token whose scope claim holds
	// the value has the name in its caller's Grants. None by default.
	Grants map[string]string
	// Leeway is the clock skew allowed on exp, nbf and iat; default
	// DefaultLeeway.
	Leeway time.Duration
	// RefreshEvery is the shortest time between two fetches of an
	// issuer's JWK Set for an unknown kid; default DefaultRefreshEvery.
	RefreshEvery time.Duration
	// HTTP fetches metadata and JWK Sets; default a client with a
	// 10-second timeout that follows no redirect from https to http.
	HTTP *http.Client
	// Logger logs discovery and refreshes; never a token.
	Logger *slog.Logger
	// Now is the clock tokens are checked by; default time.Now.
	Now func() time.Time
}

// Defaults.
const (
	DefaultPrincipalClaim = "sub"
	DefaultScopeClaim     = "scope"
	DefaultLeeway         = 30 * time.Second
	DefaultRefreshEvery   = 10 * time.Second
	// MaxToken is the longest access token taken, in bytes.
	MaxToken = 16 << 10
	// MaxJWKS is the largest JWK Set read, in bytes, as a metadata
	// document is: a larger one is a set that cannot be fetched.
	MaxJWKS = 1 << 20
)

// DefaultScopes are the scope values that grant writerd's scopes unless
// configured otherwise. admin (online backups) is granted by no access
// token unless named.
var DefaultScopes = map[pipeline.Scope]string{
	pipeline.ScopeRead:  "writerd:read",
	pipeline.ScopeWrite: "writerd:write",
	pipeline.ScopeAudit: "writerd:audit",
}

// scopeOrder is the order scopes are listed in, as package auth lists them.
var scopeOrder = []pipeline.Scope{pipeline.ScopeRead, pipeline.ScopeWrite, pipeline.ScopeAudit, pipeline.ScopeAdmin}

var nameForm = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// scopeValueForm is a scope token (RFC 6749 section 3.3).
var scopeValueForm = regexp.MustCompile(`^[\x21\x23-\x5B\x5D-\x7E]{1,128}$`)

// ErrConfig is wrapped by every error of an invalid Config.
var ErrConfig = errors.New("oauth configuration")

func configError(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
}

// ValidName reports whether name can label an issuer.
func ValidName(name string) bool { return nameForm.MatchString(name) }

// withDefaults checks c and fills in its defaults.
func (c Config) withDefaults() (Config, error) {
	if len(c.Issuers) == 0 {
		return c, configError("no issuer is configured")
	}
	seen := map[string]bool{}
	for _, is := range c.Issuers {
		if !ValidName(is.Name) {
			return c, configError("the issuer name %q is not 1 to 32 lowercase letters, digits and dashes beginning with a letter", is.Name)
		}
		if seen[is.Name] {
			return c, configError("the issuer name %q is given twice", is.Name)
		}
		seen[is.Name] = true
		if err := checkURL(is.URL); err != nil {
			return c, configError("the issuer %s: %v", is.Name, err)
		}
	}
	if err := checkURL(c.Audience); err != nil {
		return c, configError("the audience: %v", err)
	}
	for _, a := range c.AlsoAccepted {
		if a == "" || strings.ContainsAny(a, " \t\n") {
			return c, configError("an accepted audience is empty or has a space")
		}
	}
	if c.PrincipalClaim == "" {
		c.PrincipalClaim = DefaultPrincipalClaim
	}
	if c.ScopeClaim == "" {
		c.ScopeClaim = DefaultScopeClaim
	}
	if c.Scopes == nil {
		c.Scopes = DefaultScopes
	}
	if len(c.Scopes) == 0 {
		return c, configError("no scope is mapped")
	}
	values := map[string]int{}
	for _, v := range c.Scopes {
		values[v]++
	}
	for name, v := range c.Grants {
		if !pipeline.ValidScopeName(name) {
			return c, configError("the named scope %q is not 1 to 64 lower-case letters, digits, _, :, . and -, beginning with a letter, or is one of read, write, audit and admin", name)
		}
		values[v]++
	}
	for v, n := range values {
		if !scopeValueForm.MatchString(v) {
			return c, configError("the scope value %q is not a scope token (printable ASCII, no spaces, quotes or backslashes)", v)
		}
		if n > 1 {
			return c, configError("the scope value %q grants two scopes", v)
		}
	}
	if c.Leeway <= 0 {
		c.Leeway = DefaultLeeway
	}
	if c.RefreshEvery <= 0 {
		c.RefreshEvery = DefaultRefreshEvery
	}
	if c.HTTP == nil {
		c.HTTP = &http.Client{Timeout: fetchTimeout, CheckRedirect: noDowngrade}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// fetchTimeout bounds one fetch of metadata or a JWK Set.
const fetchTimeout = 10 * time.Second

// noDowngrade follows at most 5 redirects, none from https to http.
func noDowngrade(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("too many redirects")
	}
	if via[len(via)-1].URL.Scheme == "https" && req.URL.Scheme != "https" {
		return errors.New("redirect from https to http")
	}
	return nil
}

// checkURL requires an absolute https URL, or http on a loopback host,
// without a query or a fragment.
func checkURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "" || u.Opaque != "":
		return errors.New("it is not an absolute URL")
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return errors.New("it has a query, a fragment or user information")
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && loopback.Host(u.Hostname()):
		return nil
	}
	return errors.New("it is not https (http only on a loopback address)")
}

// sameIssuer compares issuer identifiers, a trailing slash apart.
func sameIssuer(a, b string) bool {
	return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/")
}
