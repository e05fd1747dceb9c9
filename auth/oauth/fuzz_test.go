package oauth_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/auth/oauth"
	"github.com/writerd/writerd/auth/oauth/oauthtest"
)

// FuzzCheck: whatever a bearer credential holds, Check answers a caller
// or an *auth.Refusal of one of the kinds, never panics, and its error
// text is the kind alone.
func FuzzCheck(f *testing.F) {
	is := oauthtest.Start(f)
	good := is.Sign("ES256", is.Claims(audience, "alice", "writerd:read", time.Hour))
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add(strings.Replace(good, ".", "..", 1))
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add("e30.e30.e30")
	f.Add("")
	p := startProvider(f, is, nil)
	f.Fuzz(func(t *testing.T, token string) {
		_, err := p.Check(t.Context(), token)
		if err == nil {
			return
		}
		var ref *auth.Refusal
		if !errors.As(err, &ref) {
			t.Fatalf("Check: %v, want an *auth.Refusal", err)
		}
		known := false
		for _, k := range oauth.Kinds {
			known = known || ref.Reason == k
		}
		if !known || err.Error() != string(ref.Reason) {
			t.Fatalf("refusal %q of kind %q", err, ref.Reason)
		}
	})
}
