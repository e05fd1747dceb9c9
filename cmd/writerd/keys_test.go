package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
)

// names returns the names of the entries of dir, none if it does not
// exist.
func names(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// keyFiles returns the key files of a key directory, by the origin each
// is named for.
func keyFiles(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range names(t, dir) {
		if origin, ok := auditlog.OriginOfKeyPath(n); ok {
			out[origin] = filepath.Join(dir, n)
		}
	}
	return out
}

// Ensure a fresh install puts its audit signing key outside the data
// directory: in $XDG_CONFIG_HOME/writerd/audit-keys/ (else
// ~/.config/writerd/audit-keys/), 0600 in a 0700 directory, named by the
// log's origin, with the record of the last checkpoint signed beside it;
// the data directory holds the database alone; writerd audit key --data
// finds that key.
func TestServe_FreshInstallPutsTheKeyOutsideTheData(t *testing.T) {
	config, data := t.TempDir(), t.TempDir()
	env := []string{"XDG_CONFIG_HOME=" + config}
	d := mustStartWith(t, daemonConfig{dir: data, env: env})
	mustSucceed(t, d.Call("create_project", `{"idempotency_key":"fresh-key-0001","name":"fresh"}`))
	d.Stop() // signs the last checkpoint
	keys := filepath.Join(config, "writerd", "audit-keys")
	found := keyFiles(t, keys)
	if len(found) != 1 {
		t.Fatalf("the key directory holds %v, want one key", names(t, keys))
	}
	var origin, path string
	for origin, path = range found {
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the key file: %v %v, want 0600", fi, err)
	}
	if fi, err := os.Stat(keys); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the key directory: %v %v, want 0700", fi, err)
	}
	if got, want := names(t, keys), []string{filepath.Base(path), filepath.Base(path) + ".last-checkpoint"}; !slices.Equal(got, want) {
		t.Errorf("the key directory holds %v, want %v", got, want)
	}
	if got := names(t, data); !slices.Equal(got, []string{"writerd.db"}) {
		t.Errorf("the data directory holds %v, want the database alone", got)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	vkey := strings.Split(strings.TrimSpace(string(b)), "\n")[1]
	if r := mustRunWith(t, runConfig{env: env}, "audit", "key", "--data", data); r.code != 0 || r.stdout != vkey+"\n" {
		t.Errorf("audit key: exit %d %q, want %q\n%s", r.code, r.stdout, vkey, r.stderr)
	}
	if !strings.HasPrefix(vkey, origin+"+") {
		t.Errorf("the key %s is not of the origin %s it is named for", vkey, origin)
	}
	if r := mustRunWith(t, runConfig{env: env}, "audit", "verify", "--data", data); r.code != 0 || !strings.Contains(r.stdout, "verified 1 event against 1 checkpoint; ") {
		t.Errorf("audit verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Without XDG_CONFIG_HOME (or with a relative one), ~/.config.
	home, data2 := t.TempDir(), t.TempDir()
	env = []string{"XDG_CONFIG_HOME=relative/config", "HOME=" + home}
	if r := mustRunWith(t, runConfig{env: env}, "serve", "--stdio", "--data", data2); r.code != 0 {
		t.Fatalf("serve: exit %d\n%s", r.code, r.stderr)
	}
	if got := keyFiles(t, filepath.Join(home, ".config", "writerd", "audit-keys")); len(got) != 1 {
		t.Errorf("~/.config/writerd/audit-keys holds %v, want one key", got)
	}
	if got := names(t, data2); !slices.Equal(got, []string{"writerd.db"}) {
		t.Errorf("the data directory holds %v, want the database alone", got)
	}
}

// Ensure an old install (a data directory with audit-signing.key and
// events signed with it) keeps its key: serve signs with it, and warns
// once at start-up why to move it and exactly where to, naming the data
// directory only as <data>; verify passes with that key; no key is made.
// Moved as the warning says, the key is found there, without a warning.
func TestServe_OldInstallKeepsItsKeyAndWarns(t *testing.T) {
	now := time.Now()
	s := mustSeedLog(t, boltStores, now, []seeded{
		{3 * time.Hour, "create_widget", "alice", "ok", "", "k-old-00001", nil},
		{2 * time.Hour, "create_widget", "alice", "ok", "", "k-old-00002", nil},
		{1 * time.Hour, "create_widget", "bob", "ok", "", "k-old-00003", nil},
	}, 2)
	legacy := filepath.Join(s.Dir, auditKeyFile)
	old, err := auditlog.LoadKey(legacy, "", false)
	if err != nil {
		t.Fatal(err)
	}
	config := t.TempDir()
	env := []string{"XDG_CONFIG_HOME=" + config}
	keys := filepath.Join(config, "writerd", "audit-keys")
	dest := auditlog.KeyPath(keys, old.Signer.Name())

	r := mustRunWith(t, runConfig{env: env}, "serve", "--stdio", "--data", s.Dir) // signs 3 at the stop
	want := "the audit signing key lies in the data directory, beside the database: whoever can rewrite the database can re-sign it with that key; move <data>/audit-signing.key to " + dest
	if r.code != 0 || strings.Count(r.stderr, want) != 1 || strings.Count(r.stderr, `"level":"WARN"`) != 1 {
		t.Errorf("serve: exit %d, want one warning %q:\n%s", r.code, want, r.stderr)
	}
	if strings.Contains(r.stderr, s.Dir) {
		t.Errorf("the log names the data directory:\n%s", r.stderr)
	}
	if len(keyFiles(t, keys)) != 0 {
		t.Errorf("a key was made in the key directory: %v", names(t, keys))
	}
	if got := checkpointSizes(t, s); !slices.Equal(got, []uint64{2, 3}) {
		t.Errorf("checkpoints %v, want 2 and 3", got)
	}
	vkey := filepath.Join(t.TempDir(), "writerd.vkey")
	os.WriteFile(vkey, []byte(old.VerifierKey+"\n"), 0o644)
	mustVerifyPasses(t, "--data", s.Dir, "--key", vkey) // signed with the old key throughout

	if err := os.Rename(legacy, dest); err != nil { // its directory is there: the record of what it signed lies in it
		t.Fatal(err)
	}
	r = mustRunWith(t, runConfig{env: env}, "serve", "--stdio", "--data", s.Dir)
	if r.code != 0 || strings.Contains(r.stderr, `"level":"WARN"`) {
		t.Errorf("serve after the move: exit %d\n%s", r.code, r.stderr)
	}
	if r := mustRunWith(t, runConfig{env: env}, "audit", "key", "--data", s.Dir); r.stdout != old.VerifierKey+"\n" {
		t.Errorf("audit key after the move: %q %s", r.stdout, r.stderr)
	}
}

// Ensure a store whose recorded origin has no key anywhere is refused at
// start-up with one sentence naming where serve looked, the data
// directory only as <data>, and no key is made.
func TestServe_RefusesAStoreWithoutItsKey(t *testing.T) {
	config, data := t.TempDir(), t.TempDir()
	env := []string{"XDG_CONFIG_HOME=" + config}
	if r := mustRunWith(t, runConfig{env: env}, "serve", "--stdio", "--data", data); r.code != 0 {
		t.Fatalf("serve: exit %d\n%s", r.code, r.stderr)
	}
	keys := filepath.Join(config, "writerd", "audit-keys")
	var origin, path string
	for origin, path = range keyFiles(t, keys) {
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	r := mustRunWith(t, runConfig{env: env}, "serve", "--stdio", "--data", data)
	want := "writerd: serve: the store's audit log (" + origin + ") has no signing key here: there is none in " + path +
		" nor in <data>/audit-signing.key; put that log's key back, or give its file with --audit-key (<data> is " + data + ", the --data given)\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("serve: exit %d\n%s\nwant:\n%s", r.code, r.stderr, want)
	}
	if len(keyFiles(t, keys)) != 0 {
		t.Errorf("a key was made: %v", names(t, keys))
	}
}

// Ensure an HTTP daemon on a data directory another daemon holds finds
// the log's key by the origin once the store opens: before, its audit API
// reads answer 503 with the store; after, /v1/audit/key serves the key of
// the key directory's file, /readyz answers 200, and it signs with it.
func TestServe_HeldStoreFindsItsKeyAsItOpens(t *testing.T) {
	first := mustStartWith(t, daemonConfig{})
	mustSucceed(t, first.Call("create_project", `{"idempotency_key":"key-held-01","name":"held"}`))
	tok := mustAuditTokens(t)
	second := MustStartHTTP(t, httpConfig{store: first.store, tokens: tok.file})
	if r := second.Do("GET", "/v1/audit/checkpoint", "", "Authorization", "Bearer "+tok.auditor); r.status != 503 {
		t.Errorf("the audit API while held: %d %s, want 503", r.status, r.body)
	}
	first.Stop()
	for deadline := time.Now().Add(20 * time.Second); second.Do("GET", "/readyz", "").status != 200; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never answered 200:\n%s", second.stderr)
		}
	}
	found := keyFiles(t, first.store.keyDir(t))
	if len(found) != 1 {
		t.Fatalf("the key directory holds %v, want the first daemon's key", found)
	}
	if _, err := os.Stat(filepath.Join(first.dir, auditKeyFile)); err == nil {
		t.Fatal("a key in the data directory")
	}
	var want string
	for _, path := range found {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want = strings.Split(strings.TrimSpace(string(b)), "\n")[1]
	}
	if r := second.Do("GET", "/v1/audit/key", "", "Authorization", "Bearer "+tok.auditor); r.status != 200 || strings.TrimSpace(r.body) != want {
		t.Fatalf("the key once open: %d %q, want %q", r.status, r.body, want)
	}
	// It signs with it: a write, and the checkpoint of it at the stop.
	mustWrite(t, second, tok.agent, "create_project", "key-held-02", `{"name":"held-two"}`, "")
	if code := second.Stop(); code != 0 {
		t.Errorf("exit %d", code)
	}
	r := mustAudit(t, nil, "verify", "--data", first.dir, "--key", want)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "verified 2 events against 2 checkpoints; ") {
		t.Errorf("verify with the key: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
