package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
)

// Ensure the secret an upstreams file names by reference reaches only
// the stdio child's configured environment: it is in no /metrics scrape
// (during the calls and after), no answer and no log line, nor in the
// child's argv; and the child's environment is exactly its block's env,
// nothing of writerd's own, though writerd's holds WRITERD_TOKEN and
// PGPASSWORD.
func TestUpstream_SecretOnlyInTheChildsEnv(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the child's /proc/PID/cmdline and environ")
	}
	t.Parallel() // its own processes and directories; mostly waiting on them
	const ownToken, ownPassword = "zz-writerd-own-token-41c2", "zz-writerd-own-pgpassword-93be"
	f := newFakeUpstream(t, upstreamtest.Switches{Keys: "argument", KeyArg: "request_key"})
	tok := mustAuditTokens(t)
	d := MustStartHTTP(t, httpConfig{tokens: tok.file,
		args: []string{"--upstreams", f.file(t, "keys = \"argument\"\nkey_argument = \"request_key\""), "--log-level", "debug"},
		env:  []string{"WRITERD_TEST_TRACKER_SECRET=" + upstreamSecret, "WRITERD_TOKEN=" + ownToken, "PGPASSWORD=" + ownPassword},
	})
	var seen strings.Builder // every answer and scrape
	for i := range 3 {
		r := d.API(tok.agent, "tracker_create_ticket", "secret-key-"+strconv.Itoa(i), `{"title":"Printer jam","priority":"high"}`)
		if r.status != 200 {
			t.Fatalf("call %d: %d %s", i, r.status, r.body)
		}
		seen.WriteString(r.body)
		seen.WriteString(d.Do("GET", "/metrics", "").body)
	}
	seen.WriteString(d.Do("GET", "/readyz", "").body)
	if es := f.entries(t); len(es) != 3 {
		t.Fatalf("%d executions, want 3", len(es))
	}

	child := childOf(t, d.cmd.Process.Pid, filepath.Base(f.bin))
	argv, err := os.ReadFile("/proc/" + strconv.Itoa(child) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(child) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(strings.TrimSuffix(string(environ), "\x00"), "\x00")
	if want := []string{"TRACKER_TOKEN=" + upstreamSecret}; !slices.Equal(env, want) {
		t.Errorf("the child's environment holds %d entries; want exactly its block's env, TRACKER_TOKEN", len(env))
		for _, e := range env {
			name, _, _ := strings.Cut(e, "=")
			t.Logf("  %s", name) // names only: the values may be secrets
		}
	}
	d.Stop()
	for what, text := range map[string]string{
		"the answers, /metrics and /readyz": seen.String(), "the log": d.stderr.String(), "the child's argv": string(bytes.ReplaceAll(argv, []byte{0}, []byte{' '})),
	} {
		for _, secret := range []string{upstreamSecret, ownToken, ownPassword} {
			if strings.Contains(text, secret) {
				t.Errorf("%s hold a secret (%.8s…)", what, secret)
			}
		}
	}
}

// childOf returns the pid of the one child of parent whose command name
// is comm (as /proc/PID/stat writes it, cut at 15 bytes).
func childOf(t *testing.T, parent int, comm string) int {
	t.Helper()
	if len(comm) > 15 {
		comm = comm[:15]
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var found []int
	for _, e := range dirs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		open, shut := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || shut < open {
			continue
		}
		fields := strings.Fields(string(b[shut+1:]))
		if len(fields) < 2 || string(b[open+1:shut]) != comm || fields[1] != strconv.Itoa(parent) {
			continue
		}
		found = append(found, pid)
	}
	if len(found) != 1 {
		t.Fatalf("writerd (pid %d) has %d children named %s, want 1", parent, len(found), comm)
	}
	return found[0]
}
