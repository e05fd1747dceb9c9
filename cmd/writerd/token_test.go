package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/pipeline"
)

// The first line of each token usage text.
const (
	tokenUsageLine       = "usage: writerd token new|list|revoke --tokens FILE [flags]"
	tokenNewUsageLine    = "usage: writerd token new --tokens FILE --name NAME [--scopes read,write]"
	tokenListUsageLine   = "usage: writerd token list --tokens FILE [-o table|json]"
	tokenRevokeUsageLine = "usage: writerd token revoke --tokens FILE --name NAME"
)

var tokenRE = regexp.MustCompile(`^wrd_[A-Za-z0-9_-]{43}\n$`)

// mustRunToken runs writerd token with args, which must succeed, and returns
// what it printed.
func mustRunToken(t testing.TB, env []string, args ...string) ran {
	t.Helper()
	r := mustRunWith(t, runConfig{env: env}, append([]string{"token"}, args...)...)
	if r.code != 0 {
		t.Fatalf("writerd token %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
	}
	return r
}

// Ensure token new prints a token once on stdout, stores only its hash in
// a 0600 file, and list shows it; revoke removes it from the list.
func TestToken_NewListRevoke(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config", "tokens.json")

	r := mustRunToken(t, nil, "new", "--tokens", file, "--name", "claude-code")
	if !tokenRE.MatchString(r.stdout) {
		t.Fatalf("stdout %q, want one token and a newline", r.stdout)
	}
	token := strings.TrimSpace(r.stdout)
	if !strings.Contains(r.stderr, "Store it now") || strings.Contains(r.stderr, token) {
		t.Errorf("stderr %q: want the line telling to store the token, without it", r.stderr)
	}
	audit := mustRunToken(t, nil, "new", "--tokens", file, "--name", "auditor", "--scopes", "audit,read")
	other := strings.TrimSpace(audit.stdout)

	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("tokens file mode %04o, want 0600", m)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{token, other} {
		if strings.Contains(string(b), tok) || strings.Contains(string(b), tok[4:20]) {
			t.Fatalf("the tokens file holds a token:\n%s", b)
		}
	}

	list := mustRunToken(t, nil, "list", "--tokens", file)
	lines := strings.Split(strings.TrimSuffix(list.stdout, "\n"), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^NAME +SCOPES +CREATED$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^claude-code +read,write +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^auditor +read,audit +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).MatchString(lines[2]) {
		t.Errorf("token list:\n%s", list.stdout)
	}
	if strings.Index(lines[0], "SCOPES") != strings.Index(lines[1], "read") || strings.Index(lines[1], "20") != strings.Index(lines[2], "20") {
		t.Errorf("token list columns are not aligned:\n%s", list.stdout)
	}
	if strings.Contains(list.stdout, "sha256") || regexp.MustCompile(`[0-9a-f]{64}`).MatchString(list.stdout) {
		t.Errorf("token list shows a hash:\n%s", list.stdout)
	}

	r = mustRunToken(t, nil, "revoke", "--tokens", file, "--name", "claude-code")
	if r.stdout != "" || !strings.Contains(r.stderr, "SIGHUP") {
		t.Errorf("revoke printed stdout %q, stderr %q", r.stdout, r.stderr)
	}
	list = mustRunToken(t, nil, "list", "--tokens", file)
	if strings.Contains(list.stdout, "claude-code") || !strings.Contains(list.stdout, "auditor") {
		t.Errorf("token list after revoking claude-code:\n%s", list.stdout)
	}
}

// Ensure a name the file holds, in any case, is refused with exit 1 and
// the file left as it was; a revoke of a name it lacks is exit 1 too.
func TestToken_DuplicateNameRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens.json")
	mustRunToken(t, nil, "new", "--tokens", file, "--name", "ci-agent")
	before, _ := os.ReadFile(file)
	for _, name := range []string{"ci-agent", "CI-AGENT"} {
		r := mustRun(t, "token", "new", "--tokens", file, "--name", name)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "exists already") {
			t.Errorf("token new --name %s over ci-agent: exit %d, stdout %q, stderr %q", name, r.code, r.stdout, r.stderr)
		}
	}
	if after, _ := os.ReadFile(file); string(after) != string(before) {
		t.Error("a refused token new changed the file")
	}
	r := mustRun(t, "token", "revoke", "--tokens", file, "--name", "nobody")
	if r.code != 1 || r.stderr != "writerd: no token is named \"nobody\"; writerd token list shows the names\n" {
		t.Errorf("revoke of an unknown name: exit %d, stderr %q", r.code, r.stderr)
	}
	missing := filepath.Join(t.TempDir(), "none", "tokens.json")
	for _, args := range [][]string{{"list", "--tokens", missing}, {"revoke", "--tokens", missing, "--name", "a"}} {
		r := mustRun(t, append([]string{"token"}, args...)...)
		if r.code != 1 || r.stderr != "writerd: there is no tokens file: writerd token new makes it\n" {
			t.Errorf("token %s on a missing file: exit %d, stderr %q", args[0], r.code, r.stderr)
		}
	}
	if _, err := os.Stat(filepath.Dir(missing)); err == nil {
		t.Error("list or revoke on a missing file made its directory")
	}
}

// Ensure the tokens file comes from WRITERD_TOKENS when --tokens is not
// given, and a path starting with ~/ is the home directory's.
func TestToken_FromEnvironment(t *testing.T) {
	home := t.TempDir()
	env := []string{"HOME=" + home, "WRITERD_TOKENS=~/writerd/tokens.json"}
	mustRunToken(t, env, "new", "--name", "from-env", "--scopes", "read")
	if _, err := os.Stat(filepath.Join(home, "writerd", "tokens.json")); err != nil {
		t.Fatalf("the tokens file is not where WRITERD_TOKENS says: %v", err)
	}
	if r := mustRunToken(t, env, "list"); !strings.Contains(r.stdout, "from-env") {
		t.Errorf("token list with WRITERD_TOKENS:\n%s", r.stdout)
	}
	// A flag wins over the environment.
	other := filepath.Join(t.TempDir(), "tokens.json")
	mustRunToken(t, env, "new", "--tokens", other, "--name", "from-flag")
	if r := mustRunToken(t, env, "list"); strings.Contains(r.stdout, "from-flag") {
		t.Errorf("--tokens did not win over WRITERD_TOKENS:\n%s", r.stdout)
	}
}

// Ensure token's help goes to stdout with exit 0, and each usage error
// prints one sentence and the right usage, once, to stderr with exit 2,
// leaving no file behind.
func TestToken_HelpAndUsageErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens.json")
	tests := []struct {
		name   string
		args   []string
		env    []string
		code   int
		usage  string
		stderr string
	}{
		{"help token", []string{"help", "token"}, nil, 0, tokenUsageLine, ""},
		{"token -h", []string{"token", "-h"}, nil, 0, tokenUsageLine, ""},
		{"token help", []string{"token", "help"}, nil, 0, tokenUsageLine, ""},
		{"token help new", []string{"token", "help", "new"}, nil, 0, tokenNewUsageLine, ""},
		{"token new -h", []string{"token", "new", "-h"}, nil, 0, tokenNewUsageLine, ""},
		{"token list --help", []string{"token", "list", "--help"}, nil, 0, tokenListUsageLine, ""},
		{"token revoke -h", []string{"token", "revoke", "-h"}, nil, 0, tokenRevokeUsageLine, ""},

		{"no command", []string{"token"}, nil, 2, tokenUsageLine, "writerd token: no command given: new, list or revoke"},
		{"unknown command", []string{"token", "add"}, nil, 2, tokenUsageLine, `writerd token: unknown command "add": new, list or revoke`},
		{"flags first", []string{"token", "--tokens", file, "new"}, nil, 2, tokenUsageLine, "writerd token: the command comes first: writerd token new|list|revoke [flags]"},
		{"no tokens file", []string{"token", "list"}, nil, 2, tokenListUsageLine, "writerd token list: --tokens is required: the tokens file, such as ~/.config/writerd/tokens.json"},
		{"relative tokens file", []string{"token", "list", "--tokens", "tokens.json"}, nil, 2, tokenListUsageLine, "writerd token list: --tokens takes an absolute path, such as /etc/writerd/tokens.json or ~/.config/writerd/tokens.json, not a relative one"},
		{"relative from the environment", []string{"token", "list"}, []string{"WRITERD_TOKENS=tokens.json"}, 2, tokenListUsageLine, "writerd token list: WRITERD_TOKENS takes an absolute path, such as /etc/writerd/tokens.json or ~/.config/writerd/tokens.json, not a relative one"},
		{"no name", []string{"token", "new", "--tokens", file}, nil, 2, tokenNewUsageLine, "writerd token new: --name is required: the token's name, such as ci-agent"},
		{"a name with a space", []string{"token", "new", "--tokens", file, "--name", "ci agent"}, nil, 2, tokenNewUsageLine, "writerd token new: --name takes 1 to 128 printable ASCII characters without spaces"},
		{"a bad scope", []string{"token", "new", "--tokens", file, "--name", "a", "--scopes", "read,Root"}, nil, 2, tokenNewUsageLine, "writerd token new: --scopes takes at least one of read, write, audit and admin, and any upstreams' scopes (each 1 to 64 lower-case letters, digits, _, :, . and -, beginning with a letter), separated by commas, such as read,write or write,tracker"},
		{"an upstream's scope alone", []string{"token", "new", "--tokens", file, "--name", "a", "--scopes", "tracker"}, nil, 2, tokenNewUsageLine, "writerd token new: --scopes takes at least one of read, write, audit and admin, and any upstreams' scopes (each 1 to 64 lower-case letters, digits, _, :, . and -, beginning with a letter), separated by commas, such as read,write or write,tracker"},
		{"no scope", []string{"token", "new", "--tokens", file, "--name", "a", "--scopes", ""}, nil, 2, tokenNewUsageLine, "writerd token new: --scopes takes at least one of read, write, audit and admin, and any upstreams' scopes (each 1 to 64 lower-case letters, digits, _, :, . and -, beginning with a letter), separated by commas, such as read,write or write,tracker"},
		{"a bad scope from the environment", []string{"token", "new", "--tokens", file, "--name", "a"}, []string{"WRITERD_SCOPES=all"}, 2, tokenNewUsageLine, "writerd token new: WRITERD_SCOPES takes at least one of read, write, audit and admin, and any upstreams' scopes (each 1 to 64 lower-case letters, digits, _, :, . and -, beginning with a letter), separated by commas, such as read,write or write,tracker"},
		{"scopes on list", []string{"token", "list", "--tokens", file, "--scopes", "read"}, nil, 2, tokenListUsageLine, "writerd token list: unknown flag -scopes"},
		{"revoke without a name", []string{"token", "revoke", "--tokens", file}, nil, 2, tokenRevokeUsageLine, "writerd token revoke: --name is required: the token's name, such as ci-agent"},
		{"an argument", []string{"token", "revoke", "--tokens", file, "ci-agent"}, nil, 2, tokenRevokeUsageLine, `writerd token revoke: unexpected argument "ci-agent"`},
	}
	usages := []string{mainUsageLine, tokenUsageLine, tokenNewUsageLine, tokenListUsageLine, tokenRevokeUsageLine}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRunWith(t, runConfig{env: tt.env}, tt.args...)
			mustFollowUsage(t, r, tt.code, tt.usage, tt.stderr, usages...)
			if _, err := os.Stat(file); err == nil {
				t.Fatal("a usage error made the tokens file")
			}
		})
	}
}

// Ensure token new takes an upstream's scope beside writerd's own (the
// caller's Grants once the daemon loads the file), says so, and list
// shows it after writerd's own, in the table and in JSON.
func TestToken_NamedScopes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens.json")
	r := mustRunToken(t, nil, "new", "--tokens", file, "--name", "triage", "--scopes", "write, tracker,billing:eu,tracker")
	if !strings.Contains(r.stderr, `made a token named "triage" with scopes write,tracker,billing:eu.`) {
		t.Errorf("stderr %q", r.stderr)
	}
	token := strings.TrimSpace(r.stdout)
	mustRunToken(t, nil, "new", "--tokens", file, "--name", "plain")
	tokens, err := auth.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := tokens.Verify(token); !ok || c.Grants != "tracker billing:eu" || c.Scopes != pipeline.ScopeWrite {
		t.Errorf("the token's caller %+v, %v", c, ok)
	}
	list := mustRunToken(t, nil, "list", "--tokens", file)
	if !regexp.MustCompile(`(?m)^triage +write,tracker,billing:eu +\S+$`).MatchString(list.stdout) ||
		!regexp.MustCompile(`(?m)^plain +read,write +\S+$`).MatchString(list.stdout) {
		t.Errorf("list:\n%s", list.stdout)
	}
	js := mustRunToken(t, nil, "list", "--tokens", file, "-o", "json")
	if !strings.Contains(js.stdout, `{"name":"triage","scopes":["write","tracker","billing:eu"],"created":`) ||
		!strings.Contains(js.stdout, `{"name":"plain","scopes":["read","write"],"created":`) {
		t.Errorf("list -o json: %s", js.stdout)
	}
}
