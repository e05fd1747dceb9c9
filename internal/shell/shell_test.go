package shell_test

import (
	"os/exec"
	"testing"

	"github.com/writerd/writerd/internal/shell"
)

// Ensure a quoted argument reads back, through a real shell, as the one
// argument it was: spaces, quotes, globs, expansions, non-ASCII and the
// empty string included; and that safe arguments are left as they are.
func TestQuote_ReadsBackInAShell(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	for _, s := range []string{"", "plain", "/a/b-c_d.e:f=g+h@i%j,k", "two words", "it's", `"$HOME"`, "*", "a;b", "$(id)", "`id`", "naïve", "tab\there", "new\nline", `back\slash`} {
		q := shell.Quote(s)
		out, err := exec.Command(sh, "-c", `printf %s `+q).Output()
		if err != nil || string(out) != s {
			t.Errorf("Quote(%q) = %s, which sh reads as %q (%v)", s, q, out, err)
		}
	}
	for _, s := range []string{"plain", "https://127.0.0.1:7393/v1", "--since=2026-12-01T00:00:00Z"} {
		if q := shell.Quote(s); q != s {
			t.Errorf("Quote(%q) = %s, want it as it is", s, q)
		}
	}
}
