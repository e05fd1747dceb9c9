package pipeline_test

import (
	"strings"
	"testing"

	"github.com/writerd/writerd/pipeline"
)

// Ensure ValidScopeName takes the names the upstreams file, the tokens
// file and --oauth-scopes share, and refuses writerd's own and any other
// form.
func TestValidScopeName(t *testing.T) {
	for name, want := range map[string]bool{
		"tracker": true, "billing:eu": true, "crm.write": true, "a": true, "a-b_c:d.e9": true,
		"t" + strings.Repeat("x", 63): true, "t" + strings.Repeat("x", 64): false,
		"": false, "read": false, "write": false, "audit": false, "admin": false,
		"Tracker": false, "9lives": false, "_x": false, "a b": false, "a,b": false, "trä": false, "a/b": false,
	} {
		if got := pipeline.ValidScopeName(name); got != want {
			t.Errorf("ValidScopeName(%q) = %v, want %v", name, got, want)
		}
	}
}
