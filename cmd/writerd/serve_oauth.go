package main

import (
	"strings"
	"time"

	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/auth/oauth"
	"github.com/writerd/writerd/pipeline"
)

// serveOAuthUsage is the part of serve's usage about OAuth.
const serveOAuthUsage = `With --oauth-issuer NAME=URL (repeatable) and --oauth-audience URI, the
HTTP server is also an OAuth 2.1 resource server (the MCP authorization
spec): it takes JWT access tokens that the issuer URL signs for URI, the
canonical URI of this server's /mcp (https://writerd.example.com/mcp),
and publishes /.well-known/oauth-protected-resource naming the issuers,
which OAuth clients (ChatGPT and Claude.ai connectors) discover from the
401. A token's principal is NAME, a colon and its --oauth-principal-claim
(default sub; client_id for machine clients); its scopes come from
--oauth-scope-claim (default scope; scp for Okta and Entra ID), mapped by
--oauth-scopes (default read=writerd:read,write=writerd:write,
audit=writerd:audit; admin=VALUE grants backups, and NAME=VALUE the
scope NAME of an upstream, which its tools need besides read or write;
the flag replaces the default, so name read and write too). A token of a key the
issuer's key set lacks fetches the set again, at most once every
--oauth-key-refresh (10s): a key the issuer rotated in works at once, and
a flood of made-up keys costs the issuer one fetch a period. With --tokens too,
writerd tokens (wrd_…) are checked against the file and any other bearer
token as an access token; the file's names may then hold no colon. An
issuer that cannot be reached is retried, its tokens answered 503 until
it is found. Without --oauth-issuer no OAuth metadata is served at all.

`

// oauthFlags are serve's OAuth flags, as given.
type oauthFlags struct {
	issuers        listFlag // NAME=URL
	audience       string
	principalClaim string
	scopeClaim     string
	scopes         string
	keyRefresh     time.Duration
	alsoAccepted   listFlag
}

func (o *oauthFlags) define(fs *flagSet) {
	fs.Var(&o.issuers, "oauth-issuer", "take access tokens of the OAuth issuer `NAME=URL` (NAME labels its principals, NAME:subject); repeatable")
	fs.StringVar(&o.audience, "oauth-audience", "", "the canonical `URI` of this server's /mcp, which access tokens must name in aud")
	fs.Var(&o.alsoAccepted, "oauth-accept-audience", "also take access tokens whose aud is `VALUE` (Entra ID: the API's application ID); repeatable")
	fs.StringVar(&o.principalClaim, "oauth-principal-claim", oauth.DefaultPrincipalClaim, "the access token `claim` a principal is made of, after the issuer's name")
	fs.StringVar(&o.scopeClaim, "oauth-scope-claim", oauth.DefaultScopeClaim, "the access token `claim` holding its scopes, a space-separated string or a list")
	fs.StringVar(&o.scopes, "oauth-scopes", defaultOAuthScopes, "the scope values that grant writerd's scopes and upstreams' scopes, `SCOPE=VALUE,…`: SCOPE read, write, audit, admin or an upstream's scope")
	fs.DurationVar(&o.keyRefresh, "oauth-key-refresh", oauth.DefaultRefreshEvery, "the shortest time between two fetches of an issuer's keys for a token of a key it does not know, a `duration`")
	fs.takes("oauth-key-refresh", "a duration such as 10s")
	fs.defaults["oauth-key-refresh"] = shortDuration(oauth.DefaultRefreshEvery)
}

// defaultOAuthScopes is --oauth-scopes's default, oauth.DefaultScopes.
const defaultOAuthScopes = "read=writerd:read,write=writerd:write,audit=writerd:audit"

// on reports whether any OAuth flag was given.
func (o *oauthFlags) on() bool { return len(o.issuers) > 0 }

// config parses the flags into a Provider's configuration. Its sentences
// repeat no value but issuer names.
func (o *oauthFlags) config(fs *flagSet) (*oauth.Config, error) {
	if !o.on() {
		for name, set := range map[string]bool{"oauth-audience": o.audience != "",
			"oauth-principal-claim": o.principalClaim != oauth.DefaultPrincipalClaim,
			"oauth-scope-claim":     o.scopeClaim != oauth.DefaultScopeClaim, "oauth-scopes": o.scopes != defaultOAuthScopes,
			"oauth-key-refresh": o.keyRefresh != oauth.DefaultRefreshEvery, "oauth-accept-audience": len(o.alsoAccepted) > 0} {
			if set {
				return nil, fs.fail("%s configures OAuth, which needs %s NAME=URL", fs.label(name), fs.label("oauth-issuer"))
			}
		}
		return nil, nil
	}
	if o.keyRefresh <= 0 {
		return nil, fs.fail("%s takes a positive duration such as 10s", fs.label("oauth-key-refresh"))
	}
	cfg := &oauth.Config{Audience: o.audience, PrincipalClaim: o.principalClaim, ScopeClaim: o.scopeClaim,
		Scopes: map[pipeline.Scope]string{}, RefreshEvery: o.keyRefresh, AlsoAccepted: o.alsoAccepted}
	var given []string
	for _, v := range o.issuers {
		given = append(given, strings.Fields(v)...)
	}
	for i, v := range given {
		name, u, ok := strings.Cut(v, "=")
		if !ok || !oauth.ValidName(name) {
			return nil, fs.fail("%s (%d of %d) takes NAME=URL, NAME 1 to 32 lowercase letters, digits and dashes beginning with a letter", fs.label("oauth-issuer"), i+1, len(given))
		}
		cfg.Issuers = append(cfg.Issuers, oauth.Issuer{Name: name, URL: u})
	}
	if o.audience == "" {
		return nil, fs.fail("%s needs %s URI: the canonical URI of this server's /mcp, such as https://writerd.example.com/mcp", fs.label("oauth-issuer"), fs.label("oauth-audience"))
	}
	if o.principalClaim == "" || o.scopeClaim == "" {
		return nil, fs.fail("%s and %s take a claim name", fs.label("oauth-principal-claim"), fs.label("oauth-scope-claim"))
	}
	for pair := range strings.SplitSeq(o.scopes, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		s, err := auth.ParseScopes(name)
		if !ok || value == "" || err != nil && !pipeline.ValidScopeName(name) {
			return nil, fs.fail("%s takes SCOPE=VALUE pairs separated by commas, SCOPE one of read, write, audit and admin or an upstream's scope (1 to 64 lower-case letters, digits, _, :, . and -, beginning with a letter), such as read=writerd:read,write=writerd:write,tracker=writerd:tracker", fs.label("oauth-scopes"))
		}
		if err != nil { // a named scope
			if _, dup := cfg.Grants[name]; dup {
				return nil, fs.fail("%s names %s twice", fs.label("oauth-scopes"), name)
			}
			if cfg.Grants == nil {
				cfg.Grants = map[string]string{}
			}
			cfg.Grants[name] = value
			continue
		}
		if _, dup := cfg.Scopes[s]; dup {
			return nil, fs.fail("%s names %s twice", fs.label("oauth-scopes"), name)
		}
		cfg.Scopes[s] = value
	}
	if _, err := oauth.New(*cfg); err != nil {
		return nil, fs.fail("%s", strings.TrimPrefix(err.Error(), oauth.ErrConfig.Error()+": "))
	}
	return cfg, nil
}
