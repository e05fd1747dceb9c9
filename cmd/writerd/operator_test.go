package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/pipeline"
)

// Ensure a second HTTP daemon on a held data directory tells its callers
// what to do without advising them to start an HTTP daemon, which it is:
// a directory of its own, or the writerd that holds the store.
func TestServe_HeldStoreOverHTTP(t *testing.T) {
	first := MustStartHTTP(t, httpConfig{})
	token := mustToken(t, first.tokens, "agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	second := MustStartHTTP(t, httpConfig{dir: first.dir, tokens: first.tokens})
	r := second.API(token, "create_project", "held-key-1", `{"name":"held"}`)
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(r.body), &e); err != nil || r.status != 503 || e.Error.Code != "UNAVAILABLE" {
		t.Fatalf("a call to the second daemon: %d %s", r.status, r.body)
	}
	if strings.Contains(e.Error.Message, "serve --addr") || !strings.Contains(e.Error.Message, "its own --data directory") ||
		!strings.Contains(e.Error.Message, "the writerd that holds the store") {
		t.Errorf("the held store's sentence advises %q; want its own --data directory or the writerd that holds the store, and no serve --addr", e.Error.Message)
	}
	first.Stop() // before the second's end checks the store
}

// Ensure serve logs the line an operator waits for, "listening on ADDR"
// with the pid, and with --pid-file writes the pid to the file while it
// serves and removes it at exit; a pid file that cannot be written stops
// the start, naming the path given.
func TestServe_ListeningLineAndPIDFile(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "serve.pid")
	d := MustStartHTTP(t, httpConfig{args: []string{"--pid-file", pidFile}})
	var pid string
	for deadline := time.Now().Add(30 * time.Second); pid == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, line := range strings.Split(d.stderr.String(), "\n") {
			var l struct {
				Level, Msg, Addr string
				PID              int
			}
			if json.Unmarshal([]byte(line), &l) == nil && strings.HasPrefix(l.Msg, "listening on ") {
				if l.Level != "INFO" || l.Msg != "listening on "+strings.TrimPrefix(d.url, "http://") || l.PID != d.cmd.Process.Pid {
					t.Fatalf("the listening line: %s; want INFO, listening on %s, pid %d", line, d.url, d.cmd.Process.Pid)
				}
				pid = strconv.Itoa(l.PID)
			}
		}
	}
	if pid == "" {
		t.Fatalf("no listening line:\n%s", d.stderr)
	}
	if got := strings.TrimSpace(mustReadFile(t, pidFile)); got != pid {
		t.Errorf("the pid file holds %q, want %s", got, pid)
	}
	d.Stop()
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Errorf("the pid file is left after exit: %v", err)
	}

	missing := filepath.Join(t.TempDir(), "no-such-dir", "serve.pid")
	r := mustRun(t, "serve", "--addr", "127.0.0.1:0", "--insecure-no-auth", "--data", filepath.Join(t.TempDir(), "data"), "--pid-file", missing)
	if r.code != 1 || !strings.Contains(r.stderr, "cannot write the pid file "+missing+": ") {
		t.Errorf("a pid file in a missing directory: exit %d, stderr %q; want 1 and the path", r.code, r.stderr)
	}
}

// Ensure an error at start-up that the operator must act on names the
// data directory they gave, or the default that was used: the storage
// error says <data>, and the command says what <data> is.
func TestServe_StartupErrorNamesTheDataDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(file, "data") // a directory under a file cannot be made
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, ".local"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"serve --data", []string{"serve", "--stdio", "--data", data}, nil, "(<data> is " + data + ", the --data given)"},
		{"serve WRITERD_DATA", []string{"serve", "--stdio"}, []string{"WRITERD_DATA=" + data}, "(<data> is " + data + ", from WRITERD_DATA)"},
		{"serve's default", []string{"serve", "--stdio"}, []string{"HOME=" + home, "XDG_DATA_HOME="}, "(<data> is " + filepath.Join(home, ".local", "share", "writerd") + ", the default data directory)"},
		{"check --data", []string{"check", "--data", data}, nil, "(<data> is " + data + ", the --data given)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRunWith(t, runConfig{env: tt.env}, tt.args...)
			if r.code != 1 || !strings.Contains(r.stderr, "<data>") || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", r.code, r.stderr, tt.want)
			}
		})
	}
}

// Ensure serve without a tokens file, given WRITERD_TOKEN (the client's
// token, one letter from WRITERD_TOKENS), says which variable is set.
func TestServe_TokenVariableHint(t *testing.T) {
	r := mustRunWith(t, runConfig{env: []string{"WRITERD_TOKEN=wrd_x"}}, "serve", "--addr", "127.0.0.1:0")
	mustFollowUsage(t, r, 2, serveUsageLine,
		"writerd serve: the HTTP server needs --tokens FILE (make one with writerd token new), --oauth-issuer NAME=URL, or --insecure-no-auth on a loopback address; WRITERD_TOKEN is set, but it is the token a client presents (writerd audit, backup, bench): the daemon's tokens file is WRITERD_TOKENS, with an S",
		serveUsageLine)
	r = mustRun(t, "serve", "--addr", "127.0.0.1:0")
	if strings.Contains(r.stderr, "WRITERD_TOKEN") {
		t.Errorf("without WRITERD_TOKEN set, the sentence names it: %q", r.stderr)
	}
}

// Ensure a relative path is refused with examples of its kind: a file
// for a file's flag, a directory for a directory's.
func TestCLI_PathExamplesPerFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--addr", "127.0.0.1:0", "--tokens", "tokens.json"}, "writerd serve: --tokens takes an absolute path, such as /etc/writerd/tokens.json or ~/.config/writerd/tokens.json, not a relative one"},
		{[]string{"token", "list", "--tokens", "tokens.json"}, "writerd token list: --tokens takes an absolute path, such as /etc/writerd/tokens.json or ~/.config/writerd/tokens.json, not a relative one"},
		{[]string{"serve", "--stdio", "--audit-key", "k"}, "writerd serve: --audit-key takes an absolute path, such as /etc/writerd/audit-signing.key or ~/.config/writerd/audit-signing.key, not a relative one"},
		{[]string{"serve", "--stdio", "--data", "d"}, "writerd serve: --data takes an absolute path, such as /var/lib/writerd or ~/writerd, not a relative one"},
		{[]string{"serve", "--stdio", "--pid-file", "p"}, "writerd serve: --pid-file takes an absolute path, such as /run/writerd/serve.pid or ~/writerd-demo/serve.pid, not a relative one"},
	} {
		r := mustRun(t, tt.args...)
		if first, _, _ := strings.Cut(r.stderr, "\n"); r.code != 2 || first != tt.want {
			t.Errorf("writerd %v: exit %d, stderr %q; want 2 and %q", tt.args, r.code, r.stderr, tt.want)
		}
	}
}

// Ensure token new -o FILE writes the token to a new file of mode 0600
// and not to stdout; an existing FILE is refused before a token is made.
func TestToken_NewToFile(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	out := filepath.Join(dir, "keys", "agent.token")
	r := mustRunToken(t, nil, "new", "--tokens", tokens, "--name", "agent", "-o", out)
	if r.stdout != "" || !strings.Contains(r.stderr, "It is in "+out+" (mode 0600)") {
		t.Errorf("stdout %q, stderr %q; want nothing on stdout and the file named", r.stdout, r.stderr)
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || !tokenRE.MatchString(mustReadFile(t, out)) {
		t.Errorf("the token's file: mode %04o, %q; want 0600 and one token", fi.Mode().Perm(), mustReadFile(t, out))
	}
	before := mustReadFile(t, tokens)
	r = mustRunWith(t, runConfig{}, "token", "new", "--tokens", tokens, "--name", "other", "-o", out)
	if r.code != 1 || !strings.Contains(r.stderr, "exists already") || mustReadFile(t, tokens) != before {
		t.Errorf("-o an existing file: exit %d, stderr %q, tokens file changed %v; want 1, refused, unchanged", r.code, r.stderr, mustReadFile(t, tokens) != before)
	}
	// A name taken: no token made, and no file left.
	other := filepath.Join(dir, "other.token")
	r = mustRunWith(t, runConfig{}, "token", "new", "--tokens", tokens, "--name", "AGENT", "-o", other)
	if _, err := os.Stat(other); r.code != 1 || !os.IsNotExist(err) {
		t.Errorf("a taken name with -o: exit %d, file %v; want 1 and no file", r.code, err)
	}
}

// Ensure docs/OAUTH.md's block for trying OAuth locally runs as written,
// on a port of the test's own, with the development build the tests
// already made in place of its go build line: the dev issuer's token
// writes through a daemon that trusts it, as the principal dev:alice.
func TestOAuth_LocalBlock(t *testing.T) {
	work := t.TempDir()
	home := filepath.Join(work, "home")
	demo := filepath.Join(home, "writerd-demo")
	if err := os.MkdirAll(demo, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(testBinary, filepath.Join(demo, "writerd-dev")); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + freePort(t)
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	for _, line := range strings.Split(docBlock(t, "docs/OAUTH.md", "## Trying OAuth locally"), "\n") {
		if strings.HasPrefix(line, "go build ") {
			continue // the test's build of the same tag
		}
		script.WriteString(strings.ReplaceAll(line, "127.0.0.1:7070", addr) + "\n")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := readmeShell(ctx, work, home, script.String())
	out, err := cmd.CombinedOutput()
	killGroup(cmd)
	if err != nil || !strings.Contains(string(out), `"name":"from-oauth"`) || !strings.Contains(string(out), `"authorization_servers"`) {
		t.Fatalf("the block: %v\n%s\n%s", err, out, mustReadFile(t, filepath.Join(demo, "oauth.log")))
	}
	if log := mustReadFile(t, filepath.Join(demo, "oauth.log")); !strings.Contains(log, `"principal":"dev:alice"`) {
		t.Errorf("the write's log line lacks the principal dev:alice:\n%s", log)
	}
}
