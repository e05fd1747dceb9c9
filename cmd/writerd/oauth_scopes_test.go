package main

import (
	"bytes"
	"io"
	"maps"
	"strings"
	"testing"

	"github.com/writerd/writerd/pipeline"
)

// oauthConfigOf parses serve's OAuth flags as serve does and returns the
// configuration, or the usage error's line.
func oauthConfigOf(t *testing.T, args ...string) (scopes map[pipeline.Scope]string, grants map[string]string, refused string) {
	t.Helper()
	var stderr bytes.Buffer
	fs := newFlagSet("writerd serve", "", io.Discard, &stderr)
	var o oauthFlags
	o.define(fs)
	base := []string{"--oauth-issuer", "corp=https://login.example.com", "--oauth-audience", "https://w.example.com/mcp"}
	if err := fs.parse(append(base, args...)); err != nil {
		t.Fatalf("parse: %v", err)
	}
	cfg, err := o.config(fs)
	if err != nil {
		line, _, _ := strings.Cut(stderr.String(), "\n")
		return nil, nil, line
	}
	return cfg.Scopes, cfg.Grants, ""
}

// TestOAuthFlags_NamedScopes: --oauth-scopes takes NAME=VALUE for an
// upstream's scope beside SCOPE=VALUE for writerd's own, the name by the
// upstreams file's rule; a bad name, a name twice, a value twice and
// named scopes alone are refused, each with a sentence that repeats no
// value.
func TestOAuthFlags_NamedScopes(t *testing.T) {
	scopes, grants, refused := oauthConfigOf(t, "--oauth-scopes", "read=writerd:read, write=writerd:write,tracker=writerd:tracker,billing:eu=acme.billing")
	if refused != "" {
		t.Fatal(refused)
	}
	if want := map[pipeline.Scope]string{pipeline.ScopeRead: "writerd:read", pipeline.ScopeWrite: "writerd:write"}; !maps.Equal(scopes, want) {
		t.Errorf("scopes %v, want %v", scopes, want)
	}
	if want := map[string]string{"tracker": "writerd:tracker", "billing:eu": "acme.billing"}; !maps.Equal(grants, want) {
		t.Errorf("grants %v, want %v", grants, want)
	}
	if _, grants, _ := oauthConfigOf(t); grants != nil {
		t.Errorf("the default maps named scopes %v", grants)
	}
	for args, want := range map[string]string{
		"write=writerd:write,Tracker=secret-value":  "writerd serve: --oauth-scopes takes SCOPE=VALUE pairs separated by commas, SCOPE one of read, write, audit and admin or an upstream's scope (1 to 64 lower-case letters, digits, _, :, . and -, beginning with a letter), such as read=writerd:read,write=writerd:write,tracker=writerd:tracker",
		"write=writerd:write,tracker=":              "writerd serve: --oauth-scopes takes SCOPE=VALUE pairs",
		"write=writerd:write,tracker=a,tracker=b":   "writerd serve: --oauth-scopes names tracker twice",
		"write=writerd:write,tracker=writerd:write": `writerd serve: the scope value "writerd:write" grants two scopes`,
		"tracker=writerd:tracker":                   "writerd serve: no scope is mapped",
	} {
		_, _, refused := oauthConfigOf(t, "--oauth-scopes", args)
		if !strings.HasPrefix(refused, want) || strings.Contains(refused, "secret-value") {
			t.Errorf("--oauth-scopes %s: %q, want %q", args, refused, want)
		}
	}
}
