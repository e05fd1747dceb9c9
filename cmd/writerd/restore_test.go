package main

import (
	"fmt"
	"strings"
	"testing"
)

// forkWords are the words that name a copy served beside its original,
// at start-up and in writerd check.
const forkWords = "it is a fork of one log under one key (a backup or copy served beside its original"

// mustStdioWrites starts a daemon on s over stdio, creates one project
// for each key, and stops it, which signs the last checkpoint.
func mustStdioWrites(t *testing.T, s testStore, keys ...string) {
	t.Helper()
	d := mustStartWith(t, daemonConfig{store: s})
	for _, k := range keys {
		mustSucceed(t, d.Call("create_project", fmt.Sprintf(`{"idempotency_key":%q,"name":%q}`, k, k)))
	}
	d.Stop()
}

// Ensure a copy of a data directory served beside its original, which
// then signs past it, is named for what it is, a fork of one log under one
// key, rather than as events missing: the untouched original refuses to
// start saying so, and writerd check on it says so too (while writerd
// audit verify, which knows no record of what was signed, passes).
func TestFork_CopyServedBesideItsOriginal(t *testing.T) {
	orig := testStore{Dir: t.TempDir()}
	mustStdioWrites(t, orig, "fork-key-0001", "fork-key-0002", "fork-key-0003") // signs 3 at the stop
	cp := mustCopyStore(t, orig)                                                // one machine, one key directory
	mustStdioWrites(t, cp, "fork-key-0004", "fork-key-0005")                    // signs 5 at the stop

	mustVerifyPasses(t, orig.auditFlags()...)
	r := mustRunWith(t, runConfig{env: orig.env(t)}, append([]string{"serve", "--stdio"}, orig.serveFlags()...)...)
	mustNotFault(t, r.stderr)
	if r.code != 1 || !strings.Contains(r.stderr, "behind the checkpoint signed last for its origin") || !strings.Contains(r.stderr, forkWords) ||
		!strings.Contains(r.stderr, "writerd restore") || strings.Contains(r.stderr, "run writerd audit verify") {
		t.Errorf("serve on the original: exit %d, want 1 naming the fork:\n%s", r.code, r.stderr)
	}
	t.Logf("serve: %s", strings.TrimSpace(r.stderr))
	c := mustRunWith(t, runConfig{env: orig.env(t)}, append([]string{"check"}, orig.auditFlags()...)...)
	if c.code != 1 || !strings.Contains(c.stdout, forkWords) {
		t.Errorf("check on the original: exit %d, want 1 naming the fork:\n%s%s", c.code, c.stdout, c.stderr)
	}
	t.Logf("check: %s", strings.TrimSpace(c.stdout))
	mustCheck(t, cp) // the copy is the log its record signed
}
