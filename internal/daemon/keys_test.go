package daemon

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/internal/logtest"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/bolttest"
)

// TestMain keeps every daemon of these tests out of the configuration of
// whoever runs them: a test gives its own KeyDir, and one that did not
// would find XDG_CONFIG_HOME here, a directory of the run's own.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "writerd-daemon-test-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CONFIG_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// mustOpenDaemon opens a daemon on the data directory data with the key
// directory keys, and closes it when the test ends.
func mustOpenDaemon(t *testing.T, data, keys string, log *logtest.Buffer) *Daemon {
	t.Helper()
	d, err := openDaemon(data, keys, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func openDaemon(data, keys string, log *logtest.Buffer) (*Daemon, error) {
	cfg := Config{Store: StoreConfig{Data: data}, KeyDir: keys}
	if log != nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(log, nil))
	}
	return Open(ctx, cfg)
}

// files returns the names of the files in dir.
func files(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// Ensure a fresh install makes its key in the key directory, by its new
// origin, which the store records: the directory 0700, the file 0600,
// and nothing but the database in the data directory; opened again, the
// daemon finds the same key by the origin.
func TestOpen_FreshInstallPutsTheKeyInTheKeyDirectory(t *testing.T) {
	data, keys := t.TempDir(), filepath.Join(t.TempDir(), "writerd", "audit-keys")
	d := mustOpenDaemon(t, data, keys, nil)
	origin := d.Origin()
	if !strings.HasPrefix(origin, "writerd/") {
		t.Fatalf("origin %q", origin)
	}
	path := auditlog.KeyPath(keys, origin)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file %s: %v, %v", path, fi, err)
	}
	if fi, err := os.Stat(keys); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the key directory: %v, %v", fi, err)
	}
	if got, ok := auditlog.OriginOfKeyPath(path); !ok || got != origin {
		t.Errorf("the key file's name gives %q, %v; want %s", got, ok, origin)
	}
	if got := files(t, data); !slices.Equal(got, []string{"writerd.db"}) {
		t.Errorf("the data directory holds %v, want the database alone", got)
	}
	if recorded, err := StoreOrigin(ctx, d.Store); err != nil || recorded != origin {
		t.Errorf("the store records %q, %v; want %s", recorded, err, origin)
	}
	d.Close()
	again := mustOpenDaemon(t, data, keys, nil)
	if again.Origin() != origin || again.Key.VerifierKey != d.Key.VerifierKey {
		t.Errorf("opened again, the key is %s, want %s", again.Key.VerifierKey, d.Key.VerifierKey)
	}
	if got := files(t, keys); len(got) != 1 {
		t.Errorf("the key directory holds %v, want one key", got)
	}
}

// mustOldInstall makes the data directory of an earlier writerd: events
// and a checkpoint signed with <data>/audit-signing.key, and no origin
// recorded in the file.
func mustOldInstall(t *testing.T) (data string, key *auditlog.Key) {
	t.Helper()
	data = t.TempDir()
	key, err := auditlog.LoadKey(filepath.Join(data, auditlog.LegacyKeyFile), "writerd/0123456789abcdef", true)
	if err != nil {
		t.Fatal(err)
	}
	s, err := open(ctx, StoreConfig{Data: data})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(ctx, func(tx pipeline.Tx[handlers.Store]) error {
		log := tx.Audit()
		for i := range 3 {
			e := &auditlog.Event{Time: time.Now(), Principal: "p", Transport: "go", Tool: "t", IdempotencyKey: strings.Repeat("k", i+8), Digest: "ab", Outcome: auditlog.OK}
			if err := log.Append(e); err != nil {
				return err
			}
		}
		root, err := auditlog.TreeHash(log, 3)
		if err != nil {
			return err
		}
		signed, err := auditlog.Checkpoint{Origin: key.Signer.Name(), Size: 3, Root: root}.Sign(key.Signer)
		if err != nil {
			return err
		}
		return log.PutCheckpoint(3, signed)
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	bolttest.Update(t, data, func(tx bolttest.Tx) error { return tx.DeleteBucket([]byte("writerd_meta")) })
	return data, key
}

// Ensure an old install keeps its key in the data directory, with one
// warning that says why to move it and exactly where, naming the data
// directory only as <data>; no key is made in the key directory; and once
// the key is moved there, it is found there, without the warning.
func TestOpen_OldInstallKeepsItsKeyAndWarns(t *testing.T) {
	data, key := mustOldInstall(t)
	keys := filepath.Join(t.TempDir(), "audit-keys")
	var log logtest.Buffer
	d := mustOpenDaemon(t, data, keys, &log)
	if d.Key.VerifierKey != key.VerifierKey {
		t.Fatalf("the daemon signs with %s, want the old key %s", d.Key.VerifierKey, key.VerifierKey)
	}
	dest := auditlog.KeyPath(keys, key.Signer.Name())
	want := "whoever can rewrite the database can re-sign it with that key; move <data>/audit-signing.key to " + dest
	if n := strings.Count(log.String(), want); n != 1 || !strings.Contains(log.String(), `"level":"WARN"`) {
		t.Errorf("the log holds %d warnings %q:\n%s", n, want, log.String())
	}
	if strings.Contains(log.String(), data) {
		t.Errorf("the log names the data directory:\n%s", log.String())
	}
	if _, err := os.Stat(keys); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a key directory was made: %v", err)
	}
	if recorded, _ := StoreOrigin(ctx, d.Store); recorded != key.Signer.Name() {
		t.Errorf("the store records %q, want the old key's origin", recorded)
	}
	d.Close()

	// As the warning says.
	if err := os.MkdirAll(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(data, auditlog.LegacyKeyFile), dest); err != nil {
		t.Fatal(err)
	}
	var after logtest.Buffer
	moved := mustOpenDaemon(t, data, keys, &after)
	if moved.Key.VerifierKey != key.VerifierKey || strings.Contains(after.String(), "data directory") {
		t.Errorf("after the move: key %s, log:\n%s", moved.Key.VerifierKey, after.String())
	}
}

// Ensure a store whose recorded origin has no key anywhere is refused with
// one sentence naming where the daemon looked (the key directory's file,
// and the data directory's only as <data>), making no key; and a key file
// --audit-key names that is another log's is refused too.
func TestOpen_RefusesAStoreWithoutItsKey(t *testing.T) {
	data, keys := t.TempDir(), t.TempDir()
	d := mustOpenDaemon(t, data, keys, nil)
	origin := d.Origin()
	d.Close()
	path := auditlog.KeyPath(keys, origin)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_, err := openDaemon(data, keys, nil)
	var ke *KeyError
	want := "the store's audit log (" + origin + ") has no signing key here: there is none in " + path + " nor in <data>/audit-signing.key; put that log's key back, or give its file with --audit-key"
	if !errors.As(err, &ke) || err.Error() != want {
		t.Fatalf("Open = %v, want the KeyError %q", err, want)
	}
	if got := files(t, keys); len(got) != 0 {
		t.Errorf("a key was made: %v", got)
	}

	other := filepath.Join(t.TempDir(), "other.key")
	if _, err := auditlog.LoadKey(other, "writerd/another-log", true); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, Config{Store: StoreConfig{Data: data}, KeyFile: other})
	if !errors.As(err, &ke) || !strings.Contains(err.Error(), "signs the log writerd/another-log, but the store's audit log is "+origin) {
		t.Fatalf("Open with another log's --audit-key = %v", err)
	}
}

// Ensure a store that holds events but whose recorded origin (and every
// checkpoint it could be taken from) was removed gets no new key: a new
// one would sign a rewritten log as a log of its own, past the checkpoint
// remembered beside the old key. The refusal is one sentence, nothing is
// made in the key directory, and the log's own key given with --audit-key
// opens it again.
func TestOpen_RefusesEventsWithoutTheirOrigin(t *testing.T) {
	data, keys := t.TempDir(), t.TempDir()
	d := mustOpenDaemon(t, data, keys, nil)
	origin := d.Origin()
	err := d.Store.Update(ctx, func(tx pipeline.Tx[handlers.Store]) error {
		return tx.Audit().Append(&auditlog.Event{Time: time.Now(), Principal: "p", Transport: "go", Tool: "t", IdempotencyKey: "key-00000001", Digest: "ab", Outcome: auditlog.OK})
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Checkpointer().Sign(ctx); err != nil {
		t.Fatal(err)
	}
	d.Close()
	bolttest.Update(t, data, func(tx bolttest.Tx) error {
		if err := tx.DeleteBucket([]byte("writerd_meta")); err != nil {
			return err
		}
		return tx.Checkpoints().Delete(bolttest.SeqKey(1))
	})
	before := files(t, keys)
	_, err = openDaemon(data, keys, nil)
	var ke *KeyError
	want := "the store holds 1 audit event but records no log origin, so the log's signing key cannot be found (was its origin removed?); no new key is made for events already there: give that log's key file with --audit-key"
	if !errors.As(err, &ke) || err.Error() != want {
		t.Fatalf("Open = %v, want the KeyError %q", err, want)
	}
	if got := files(t, keys); !slices.Equal(got, before) {
		t.Errorf("the key directory went from %v to %v", before, got)
	}
	again, err := Open(ctx, Config{Store: StoreConfig{Data: data}, KeyFile: auditlog.KeyPath(keys, origin)})
	if err != nil {
		t.Fatalf("Open with the log's own key: %v", err)
	}
	again.Close()
}

// Ensure a daemon on a store another process holds finds the log's key as
// the store opens, in the background: none while it waits, the log's own
// once the holder lets go, and its checkpointer signs with it.
func TestOpen_HeldStoreFindsItsKeyAsItOpens(t *testing.T) {
	data, keys := t.TempDir(), t.TempDir()
	first := mustOpenDaemon(t, data, keys, nil)
	want := first.Key.VerifierKey
	first.Close()
	release := mustHold(t, data)
	d := mustOpenDaemon(t, data, keys, nil)
	if d.Store.IsOpen() || d.SigningKey() != nil || d.Origin() != "" {
		t.Fatalf("while held: open %v, key %v", d.Store.IsOpen(), d.SigningKey())
	}
	release()
	select {
	case <-d.Store.Opened():
	case <-time.After(10 * time.Second):
		t.Fatal("the store did not open after the holder closed it")
	}
	if d.Store.Err() != nil || d.SigningKey() == nil || d.SigningKey().VerifierKey != want {
		t.Fatalf("after the holder closed: %v, key %v; want %s", d.Store.Err(), d.SigningKey(), want)
	}
	err := d.Store.Update(ctx, func(tx pipeline.Tx[handlers.Store]) error {
		return tx.Audit().Append(&auditlog.Event{Time: time.Now(), Principal: "p", Transport: "go", Tool: "t", Digest: "ab", Outcome: auditlog.OK})
	})
	if err != nil {
		t.Fatal(err)
	}
	if signed, err := d.Checkpointer().Sign(ctx); err != nil || !signed {
		t.Fatalf("Sign = %v, %v", signed, err)
	}
	if err := d.Ready(ctx); err != nil {
		t.Errorf("not ready: %v", err)
	}
}
