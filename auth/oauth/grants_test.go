package oauth_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/auth/oauth"
	"github.com/writerd/writerd/auth/oauth/oauthtest"
	"github.com/writerd/writerd/pipeline"
)

// TestCheck_NamedScopes: a scope value mapped to a named scope (an
// upstream's own) puts its name in the caller's Grants, in the order of
// the names, beside writerd's scopes; a token with named scopes alone is
// refused insufficient_scope, told only writerd's scopes' values; the
// metadata offers the named scopes' values too.
func TestCheck_NamedScopes(t *testing.T) {
	is := oauthtest.Start(t)
	p := startProvider(t, is, func(c *oauth.Config) {
		c.Grants = map[string]string{"tracker": "writerd:tracker", "billing": "acme.billing"}
	})
	for scope, want := range map[string]pipeline.Caller{
		"writerd:write writerd:tracker":             {Principal: "corp:alice", Scopes: pipeline.ScopeWrite, Grants: "tracker"},
		"writerd:tracker writerd:read acme.billing": {Principal: "corp:alice", Scopes: pipeline.ScopeRead, Grants: "billing tracker"},
		"writerd:write tracker billing":             {Principal: "corp:alice", Scopes: pipeline.ScopeWrite},
		"writerd:write":                             {Principal: "corp:alice", Scopes: pipeline.ScopeWrite},
	} {
		c, err := p.Check(t.Context(), is.Sign("RS256", is.Claims(audience, "alice", scope, time.Hour)))
		if err != nil || c != want {
			t.Errorf("scope %q: %+v, %v; want %+v", scope, c, err, want)
		}
	}
	// A list under the claim works alike.
	claims := is.Claims(audience, "alice", "", time.Hour)
	claims["scope"] = []string{"writerd:write", "acme.billing"}
	if c, err := p.Check(t.Context(), is.Sign("RS256", claims)); err != nil || c.Grants != "billing" || !c.Holds("billing") {
		t.Errorf("scope as a list: %+v, %v", c, err)
	}
	_, err := p.Check(t.Context(), is.Sign("RS256", is.Claims(audience, "alice", "writerd:tracker acme.billing", time.Hour)))
	var ref *auth.Refusal
	if !errors.As(err, &ref) || ref.Status != http.StatusForbidden || ref.Reason != oauth.KindInsufficientScope || ref.Scope != "writerd:read writerd:write writerd:audit" {
		t.Errorf("named scopes alone: %v %+v, want 403 insufficient_scope naming writerd's scopes' values", err, ref)
	}
	if got := strings.Join(p.Metadata().ScopesSupported, " "); got != "writerd:read writerd:write writerd:audit acme.billing writerd:tracker" {
		t.Errorf("scopes_supported %q", got)
	}
	if got := strings.Join(p.ScopeValues(), " "); got != "writerd:read writerd:write writerd:audit" {
		t.Errorf("ScopeValues %q", got)
	}
}

// TestConfig_NamedScopes: what New refuses of the named scopes: a name
// that pipeline.ValidScopeName refuses (writerd's own among them), a value
// that is not a scope token, and a value that also grants another scope.
func TestConfig_NamedScopes(t *testing.T) {
	is := []oauth.Issuer{{Name: "corp", URL: "https://login.example.com"}}
	for name, grants := range map[string]map[string]string{
		"writerd's own name":    {"write": "x"},
		"a name in capitals":    {"Tracker": "x"},
		"an empty name":         {"": "x"},
		"a value with a space":  {"tracker": "a b"},
		"an empty value":        {"tracker": ""},
		"a value of writerd's":  {"tracker": "writerd:write"},
		"one value, two scopes": {"tracker": "x", "billing": "x"},
	} {
		_, err := oauth.New(oauth.Config{Issuers: is, Audience: "https://w.example.com/mcp", Grants: grants})
		if !errors.Is(err, oauth.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	if _, err := oauth.New(oauth.Config{Issuers: is, Audience: "https://w.example.com/mcp", Grants: map[string]string{"tracker": "writerd:tracker"}}); err != nil {
		t.Errorf("a good named scope: %v", err)
	}
}
