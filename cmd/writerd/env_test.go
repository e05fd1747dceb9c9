package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// The key directory of every daemon and command a test runs. A daemon
// keeps its audit signing key, and the last checkpoint it signed, in
// $XDG_CONFIG_HOME/writerd/audit-keys/ (else ~/.config/...), never in
// the real one of whoever runs the tests: every process a test starts
// gets XDG_CONFIG_HOME of the test's own (testEnv), one per top-level
// test, so that its subtests and the copies of its stores, which keep
// their log's origin, find their keys as the daemon that made them does.
// A store of a machine of its own (a fork) carries its own (testStore's
// Config).

// configRoot holds the tests' configuration homes; TestMain makes it, and
// sets XDG_CONFIG_HOME for the test process itself to a directory in it,
// so that a process started without testEnv still finds none of the
// user's.
var configRoot string

var configHomes = struct {
	sync.Mutex
	dirs map[string]string
}{dirs: map[string]string{}}

// testConfigHome returns the XDG_CONFIG_HOME of the top-level test t
// belongs to, made on first use.
func testConfigHome(t testing.TB) string {
	t.Helper()
	top, _, _ := strings.Cut(t.Name(), "/")
	configHomes.Lock()
	defer configHomes.Unlock()
	if d, ok := configHomes.dirs[top]; ok {
		return d
	}
	d, err := os.MkdirTemp(configRoot, strings.NewReplacer(string(filepath.Separator), "_", "*", "_").Replace(top)+"-")
	if err != nil {
		t.Fatal(err)
	}
	configHomes.dirs[top] = d
	return d
}

// testEnv is the environment of a process a test starts: the test's own,
// with XDG_CONFIG_HOME of the test's own, and extra (a later entry wins).
func testEnv(t testing.TB, extra ...string) []string {
	t.Helper()
	return append(append(os.Environ(), "XDG_CONFIG_HOME="+testConfigHome(t)), extra...)
}

// configHome is the XDG_CONFIG_HOME of the daemons and commands on s: its
// own, for a store of a machine of its own, else the test's.
func (s testStore) configHome(t testing.TB) string {
	if s.Config != "" {
		return s.Config
	}
	return testConfigHome(t)
}

// env is testEnv for a process on s.
func (s testStore) env(t testing.TB, extra ...string) []string {
	t.Helper()
	return testEnv(t, append([]string{"XDG_CONFIG_HOME=" + s.configHome(t)}, extra...)...)
}

// keyDir is the key directory of the daemons on s.
func (s testStore) keyDir(t testing.TB) string {
	return filepath.Join(s.configHome(t), "writerd", "audit-keys")
}

// mustForkStore copies the store of a stopped daemon onto a machine of
// its own: its data and its configuration home, with the log's key and
// the record of the last checkpoint signed. A daemon that goes on from the
// copy forks the log under the same key (two logs of one origin), and
// keeps its own record, as a second machine holding the key would.
func mustForkStore(t testing.TB, s testStore) testStore {
	t.Helper()
	c := mustCopyStore(t, s)
	c.Config = t.TempDir()
	from := s.configHome(t)
	err := filepath.WalkDir(from, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		info, err := e.Info()
		if err != nil {
			return err
		}
		to := filepath.Join(c.Config, rel)
		if e.IsDir() {
			return os.MkdirAll(to, info.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, info.Mode().Perm()) // a key file stays 0600
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mustCopyKeyFile copies a key file alone into a directory of its own, as
// the key carried to another machine, without the record of what it
// signed that the daemon keeps beside it.
func mustCopyKeyFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return to
}

// clearCommandEnv unsets, in the test process and so in every process a
// test starts, each variable that sets a flag of a writerd command
// (WRITERD_DATA, WRITERD_TOKENS, WRITERD_STORE, …) and WRITERD_TOKEN, the
// token the client commands present: a newcomer who followed the README
// has some of them exported, and each would reach the daemons and commands
// the tests run (WRITERD_TOKENS beside --insecure-no-auth is refused,
// WRITERD_DATA wins over the default the test checks), so that the tests
// failed, and a package that fails is never cached. The tests' own
// variables (WRITERD_TEST_*, WRITERD_LITEWITNESS, WRITERD_CHROMIUM,
// WRITERD_TRIALS, WRITERD_BENCH*) name no flag and are kept.
func clearCommandEnv() []string {
	names := map[string]bool{"WRITERD_TOKEN": true}
	add := func(fs *flagSet) {
		fs.VisitAll(func(f *flag.Flag) { names[envName(f.Name)] = true })
	}
	for name, cmd := range commands(nil, io.Discard, io.Discard) {
		add(cmd.flags())
		switch name {
		case "audit":
			for _, sub := range (&AuditCommand{Stdout: io.Discard, Stderr: io.Discard}).commands() {
				add(sub.flags())
			}
		case "outcome":
			for _, sub := range (&OutcomeCommand{Stdout: io.Discard, Stderr: io.Discard}).commands() {
				add(sub.flags())
			}
		case "token":
			tc := &TokenCommand{Stdout: io.Discard, Stderr: io.Discard}
			for sub, s := range tokenCommands {
				fs := newFlagSet("writerd token "+sub, s.usage, io.Discard, io.Discard)
				tc.define(fs, s.name, s.new, s.list)
				add(fs)
			}
		}
	}
	var cleared []string
	for name := range names {
		if _, ok := os.LookupEnv(name); ok && !strings.HasPrefix(name, "WRITERD_TEST_") {
			os.Unsetenv(name)
			cleared = append(cleared, name)
		}
	}
	sort.Strings(cleared)
	return cleared
}
