package main

import (
	"net/http"
	"path/filepath"
	"testing"

	"github.com/writerd/writerd/pipeline"
)

// Ensure --public-url https://… reaches the console: signed in over plain
// HTTP on the daemon's loopback --addr, as a TLS proxy on the same host
// forwards, the session cookie is Secure; without the flag it is not.
func TestServe_PublicURLMakesTheCookieSecure(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	auditor := mustToken(t, tokens, "auditor", pipeline.ScopeAudit)
	for _, tc := range []struct {
		args   []string
		secure bool
	}{{nil, false}, {[]string{"--public-url", "https://writerd.example.com"}, true}} {
		d := MustStartHTTP(t, httpConfig{tokens: tokens, args: tc.args})
		cookie, r := consoleSignIn(t, d, auditor)
		cs := (&http.Response{Header: r.header}).Cookies()
		if cookie == "" || len(cs) != 1 || cs[0].Secure != tc.secure {
			t.Errorf("serve %q: sign-in %d, cookies %q; want one session cookie, Secure %v", tc.args, r.status, r.header.Values("Set-Cookie"), tc.secure)
		}
		d.Stop()
	}
}
