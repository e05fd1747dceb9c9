package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"
)

// tilesEvents is how many events the tiles test writes: 39 full entry
// bundles and a partial one of 16, in the default run; fewer with -short.
func tilesEvents() int {
	if testing.Short() {
		return 2*256 + 16
	}
	return 10_000
}

// tilesArgs keep the daemon from signing on its own: the test signs when
// it has written what it wants covered (POST /v1/audit/checkpoint).
var tilesArgs = []string{"--checkpoint-every", "1000000000", "--checkpoint-interval", "1h"}

// mustWriteEvents writes n audit events over the direct API, from 16
// writers at once so that the store's group commit batches them: a
// project, n-2 records in it, and one delete_records of 200 of them, the
// event with the longest list of targets a tool makes. Keys and names
// start with prefix.
func mustWriteEvents(t testing.TB, d *httpDaemon, token, prefix string, n int) {
	t.Helper()
	project := mustWrite(t, d, token, "create_project", prefix+"-project", `{"name":"`+prefix+`"}`, "")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	records := n - 2
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed error
	)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				body := fmt.Sprintf(`{"project_id":%q,"title":"record %d"}`, project, i)
				req, _ := http.NewRequest("POST", d.url+"/v1/tools/create_record", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-record-%08d", prefix, i))
				resp, err := client.Do(req)
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("create_record %d: %d %s", i, resp.StatusCode, b)
					}
				}
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
				}
			}
		})
	}
	for i := range records {
		next <- i
	}
	close(next)
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	r := d.API(token, "delete_records", prefix+"-delete", `{"project_id":"`+project+`","filter":{},"confirm":true}`)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"deleted":200`) {
		t.Fatalf("delete_records: %d %s", r.status, r.body)
	}
}

// mustSignNow has the daemon sign a checkpoint of its log, which must
// then be of size events.
func mustSignNow(t testing.TB, d *httpDaemon, token string, size int) {
	t.Helper()
	r := d.Do("POST", "/v1/audit/checkpoint", "", "Authorization", "Bearer "+token)
	if lines := strings.Split(r.body, "\n"); r.status != http.StatusOK || len(lines) < 3 || lines[1] != fmt.Sprint(size) {
		t.Fatalf("sign a checkpoint of %d events: %d %s", size, r.status, r.body)
	}
}

// mustVerifier returns the log's verifier key, as the daemon serves it.
func mustVerifier(t testing.TB, d *httpDaemon, token string) note.Verifier {
	t.Helper()
	r := d.Do("GET", "/v1/audit/key", "", "Authorization", "Bearer "+token)
	v, err := note.NewVerifier(strings.TrimSpace(r.body))
	if r.status != http.StatusOK || err != nil {
		t.Fatalf("the verifier key: %d %s %v", r.status, r.body, err)
	}
	return v
}

// mustLeaves returns each event's canonical bytes, the leaves of the
// tree, from the daemon's export: its lines after the header.
func mustLeaves(t testing.TB, d *httpDaemon, token string) [][]byte {
	t.Helper()
	r := d.Do("GET", "/v1/audit/export?from=1", "", "Authorization", "Bearer "+token)
	lines := bytes.Split([]byte(strings.TrimSuffix(r.body, "\n")), []byte("\n"))
	if r.status != http.StatusOK || len(lines) < 2 {
		t.Fatalf("the export: %d %.200s", r.status, r.body)
	}
	return lines[1:]
}

// mustReadTiles reads a log with torchwood alone, as a client that knows
// nothing of writerd: the checkpoint from tr, verified with note.Open and
// the log's key, then every entry of its tree through torchwood's Client,
// each authenticated against the checkpoint's root.
func mustReadTiles(t testing.TB, tr torchwood.TileReader, key note.Verifier) (torchwood.Checkpoint, [][]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	signed, err := tr.ReadEndpoint(ctx, "checkpoint")
	if err != nil {
		t.Fatalf("the checkpoint: %v", err)
	}
	n, err := note.Open(signed, note.VerifierList(key))
	if err != nil {
		t.Fatalf("the checkpoint does not verify with the log's key: %v", err)
	}
	cp, err := torchwood.ParseCheckpoint(n.Text)
	if err != nil || cp.Origin != key.Name() {
		t.Fatalf("the checkpoint %q: %v", n.Text, err)
	}
	c, err := torchwood.NewClient(tr)
	if err != nil {
		t.Fatal(err)
	}
	var entries [][]byte
	for i, e := range c.AllEntries(ctx, cp.Tree, 0) {
		if i != int64(len(entries)) {
			t.Fatalf("entry %d came after %d entries", i, len(entries))
		}
		entries = append(entries, bytes.Clone(e))
	}
	if err := c.Err(); err != nil {
		t.Fatalf("read the entries: %v", err)
	}
	return cp, entries
}

// mustBeLeaves checks that entries are the log's leaves, in order: each
// the event's canonical bytes, its seq its place; and that the one
// delete_records event holds its 200 targets.
func mustBeLeaves(t testing.TB, what string, entries, leaves [][]byte) {
	t.Helper()
	if len(entries) != len(leaves) {
		t.Fatalf("%s: %d entries, want %d", what, len(entries), len(leaves))
	}
	deletes := 0
	for i, e := range entries {
		if !bytes.Equal(e, leaves[i]) {
			t.Fatalf("%s: entry %d is %.100s, want %.100s", what, i, e, leaves[i])
		}
		var ev struct {
			Seq     int
			Tool    string
			Targets []json.RawMessage
		}
		if err := json.Unmarshal(e, &ev); err != nil || ev.Seq != i+1 {
			t.Fatalf("%s: entry %d holds seq %d (%v)", what, i, ev.Seq, err)
		}
		if ev.Tool == "delete_records" {
			deletes++
			if len(ev.Targets) != 200 {
				t.Fatalf("%s: the delete_records event has %d targets, want 200", what, len(ev.Targets))
			}
		}
	}
	if deletes == 0 {
		t.Fatalf("%s: no delete_records event among the entries", what)
	}
}

// tileFetcher is torchwood's fetcher of a daemon's tlog paths, sending
// token unless it is empty.
func tileFetcher(t testing.TB, d *httpDaemon, token string) *torchwood.TileFetcher {
	t.Helper()
	var opts []torchwood.TileFetcherOption
	if token != "" {
		opts = append(opts, torchwood.WithHTTPClient(&http.Client{Transport: bearer{token}}))
	}
	f, err := torchwood.NewTileFetcher(d.url+"/v1/audit/tlog/", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// tileFS is torchwood's reader of a published directory.
func tileFS(t testing.TB, dir string) *torchwood.TileFS {
	t.Helper()
	f, err := torchwood.NewTileFS(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// fileID is what tells a file rewritten from one left alone.
type fileID struct {
	ino   uint64
	mtime time.Time
}

// fullTiles returns the full tiles under dir/tile (those without .p/):
// each one's inode and modification time.
func fullTiles(t testing.TB, dir string) map[string]fileID {
	t.Helper()
	out := map[string]fileID{}
	err := filepath.WalkDir(filepath.Join(dir, "tile"), func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || strings.Contains(path, ".p"+string(filepath.Separator)) {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		out[path] = fileID{fi.Sys().(*syscall.Stat_t).Ino, fi.ModTime()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Ensure a generic client reads the whole log, authenticated against the
// signed checkpoint, with torchwood alone (issue 14, shown-point 1): over
// the daemon's /v1/audit/tlog/ paths with a token, and from a directory
// writerd audit publish wrote, after 10,000 events (39 full entry bundles
// and a partial one of 16); every entry is the event's canonical bytes,
// in order. A full tile is immutable for caches; the tlog paths want a
// token with the audit scope. A second publish after more events rewrites
// no full tile and the directory still reads whole; a publish from the
// store itself writes the same tiles.
func TestTiles_TorchwoodReadsAll(t *testing.T) { eachStore(t, testTilesTorchwoodReadsAll) }

func testTilesTorchwoodReadsAll(t *testing.T, kind storeKind) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // every daemon and CLI run below inherits it
	n := tilesEvents()
	tok := mustAuditTokens(t)
	s := kind.make(t)
	d := MustStartHTTP(t, httpConfig{store: s, tokens: tok.file, args: tilesArgs})
	start := time.Now()
	mustWriteEvents(t, d, tok.agent, "a", n)
	t.Logf("%s: %d events written in %v", kind.name, n, time.Since(start).Round(time.Millisecond))
	mustSignNow(t, d, tok.auditor, n)
	key := mustVerifier(t, d, tok.auditor)
	leaves := mustLeaves(t, d, tok.auditor)

	start = time.Now()
	cp, entries := mustReadTiles(t, tileFetcher(t, d, tok.auditor), key)
	t.Logf("%s: read %d entries over HTTP in %v", kind.name, len(entries), time.Since(start).Round(time.Millisecond))
	if cp.N != int64(n) {
		t.Fatalf("the tlog checkpoint signs %d events, want %d", cp.N, n)
	}
	mustBeLeaves(t, "over HTTP", entries, leaves)

	full, partial := "tile/entries/000", fmt.Sprintf("tile/entries/%03d.p/%d", n/256, n%256)
	for path, want := range map[string]string{full: "private, max-age=31536000, immutable", "tile/0/000": "private, max-age=31536000, immutable", partial: "private, max-age=60"} {
		r := d.Do("GET", "/v1/audit/tlog/"+path, "", "Authorization", "Bearer "+tok.auditor)
		if r.status != 200 || r.header.Get("Cache-Control") != want {
			t.Errorf("%s: %d, Cache-Control %q, want 200, %q", path, r.status, r.header.Get("Cache-Control"), want)
		}
	}
	if r := d.Do("GET", fmt.Sprintf("/v1/audit/tlog/tile/entries/%03d.p/%d", n/256, n%256+1), "", "Authorization", "Bearer "+tok.auditor); r.status != 404 || r.errorCode() != "NOT_FOUND" {
		t.Errorf("a bundle one entry past the checkpoint: %d %s, want NOT_FOUND", r.status, r.body)
	}
	for _, path := range []string{"checkpoint", full} {
		if r := d.Do("GET", "/v1/audit/tlog/"+path, ""); r.status != 401 {
			t.Errorf("%s without a token: %d, want 401", path, r.status)
		}
		if r := d.Do("GET", "/v1/audit/tlog/"+path, "", "Authorization", "Bearer "+tok.agent); r.status != 403 || r.errorCode() != "PERMISSION_DENIED" {
			t.Errorf("%s with a token without the audit scope: %d %s, want 403", path, r.status, r.body)
		}
	}

	// Publish, read the directory with torchwood.
	dir := filepath.Join(t.TempDir(), "published")
	env := []string{"WRITERD_TOKEN=" + tok.auditor}
	start = time.Now()
	if r := mustAudit(t, env, "publish", "--server", d.url, "--dir", dir); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("published the tree of %d events (0 before)", n)) {
		t.Fatalf("publish: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("%s: published in %v", kind.name, time.Since(start).Round(time.Millisecond))
	_, entries = mustReadTiles(t, tileFS(t, dir), key)
	mustBeLeaves(t, "from the published directory", entries, leaves)
	before := fullTiles(t, dir)
	if want := 2 * (n / 256); len(before) != want { // hash tiles and bundles of level 0
		t.Fatalf("%d full tiles published, want %d", len(before), want)
	}

	// More events, published again: the full tiles are left alone.
	mustWriteEvents(t, d, tok.agent, "b", 300)
	mustSignNow(t, d, tok.auditor, n+300)
	time.Sleep(10 * time.Millisecond) // a rewrite would show in the mtime
	if r := mustAudit(t, env, "publish", "--server", d.url, "--dir", dir); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("published the tree of %d events (%d before)", n+300, n)) {
		t.Fatalf("publish again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	after := fullTiles(t, dir)
	for path, id := range before {
		if after[path] != id {
			t.Errorf("%s was rewritten: %+v, then %+v", path, id, after[path])
		}
	}
	if len(after) <= len(before) && (n+300)/256 > n/256 {
		t.Errorf("%d full tiles after the second publish, %d before: the tile filled since is missing", len(after), len(before))
	}
	leaves = mustLeaves(t, d, tok.auditor)
	_, entries = mustReadTiles(t, tileFS(t, dir), key)
	mustBeLeaves(t, "from the directory published twice", entries, leaves)

	// From the store: the same tiles; and the directory is up to date.
	if code := d.Stop(); code != 0 {
		t.Fatalf("the daemon exited %d", code)
	}
	local := filepath.Join(t.TempDir(), "local")
	if r := mustAudit(t, nil, append([]string{"publish", "--dir", local}, s.auditFlags()...)...); r.code != 0 {
		t.Fatalf("publish from the store: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	err := filepath.WalkDir(local, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(local, path)
		a, _ := os.ReadFile(path)
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s published from the store differs from the daemon's: %v", rel, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := mustAudit(t, nil, append([]string{"publish", "--dir", dir}, s.auditFlags()...)...); r.code != 0 || !strings.Contains(r.stdout, "is up to date") {
		t.Fatalf("publish of an unchanged log: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Ensure --audit-public serves exactly the tlog paths without a token
// (their caches public), which torchwood reads whole, and writerd audit
// publish with the log's key copies; every other path still wants one.
func TestTiles_AuditPublic(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	tok := mustAuditTokens(t)
	d := MustStartHTTP(t, httpConfig{tokens: tok.file, args: append([]string{"--audit-public"}, tilesArgs...)})
	mustWriteEvents(t, d, tok.agent, "a", 300)
	mustSignNow(t, d, tok.auditor, 300)
	key := mustVerifier(t, d, tok.auditor)
	leaves := mustLeaves(t, d, tok.auditor)
	_, entries := mustReadTiles(t, tileFetcher(t, d, ""), key)
	mustBeLeaves(t, "without a token", entries, leaves)
	for path, want := range map[string]string{"tile/0/000": "public, max-age=31536000, immutable", "tile/entries/001.p/44": "public, max-age=60", "checkpoint": "no-store"} {
		if r := d.Do("GET", "/v1/audit/tlog/"+path, ""); r.status != 200 || r.header.Get("Cache-Control") != want {
			t.Errorf("%s without a token: %d, Cache-Control %q, want 200, %q", path, r.status, r.header.Get("Cache-Control"), want)
		}
	}
	for _, path := range []string{"/v1/audit/events", "/v1/audit/events/1", "/v1/audit/checkpoint", "/v1/audit/checkpoints", "/v1/audit/key", "/v1/audit/export", "/v1/audit/proof/consistency?old=1&new=2"} {
		if r := d.Do("GET", path, ""); r.status != 401 {
			t.Errorf("%s without a token, the tlog public: %d, want 401", path, r.status)
		}
	}
	if r := d.Do("POST", "/v1/audit/checkpoint", ""); r.status != 401 {
		t.Errorf("sign now without a token: %d, want 401", r.status)
	}
	if r := d.Do("POST", "/v1/tools/create_project", `{"name":"x"}`, "Idempotency-Key", "k-public-1"); r.status != 401 {
		t.Errorf("a write without a token: %d, want 401", r.status)
	}
	vkey := filepath.Join(t.TempDir(), "writerd.vkey")
	if err := os.WriteFile(vkey, []byte(strings.TrimSpace(d.Do("GET", "/v1/audit/key", "", "Authorization", "Bearer "+tok.auditor).body)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "published")
	if r := mustAudit(t, []string{"WRITERD_TOKEN="}, "publish", "--server", d.url, "--key", vkey, "--dir", dir); r.code != 0 {
		t.Fatalf("publish without a token from a public log: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	_, entries = mustReadTiles(t, tileFS(t, dir), key)
	mustBeLeaves(t, "published without a token", entries, leaves)
	if r := mustRun(t, "serve", "--stdio", "--audit-public"); r.code != 2 || !strings.Contains(r.stderr, "--audit-public serves the audit log's tiles over HTTP, so it needs --addr") {
		t.Errorf("serve --stdio --audit-public: exit %d\n%s", r.code, r.stderr)
	}
}

// Ensure publish refuses, with one sentence, a directory that holds
// another log's checkpoint (another key), or one of a log signed with the
// same key that this log does not extend (a fork, of the same size or
// larger), and leaves it as it is.
func TestPublish_RefusesAnotherLog(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	keyFile := filepath.Join(t.TempDir(), "shared", "audit-signing.key")
	publish := func(s testStore, dir string) ran {
		t.Helper()
		return mustAudit(t, nil, "publish", "--data", s.Dir, "--audit-key", keyFile, "--dir", dir)
	}
	// Two logs signed with one key: a fork, to a witness.
	a := mustAuditLog(t, testStore{Dir: t.TempDir()}, "a", "--audit-key", keyFile)
	// The key copied alone: beside keyFile, the daemon of a remembers
	// what it signed, and would refuse to sign another log.
	bKey := mustCopyKeyFile(t, keyFile)
	b := mustAuditLog(t, testStore{Dir: t.TempDir()}, "b", "--audit-key", bKey)
	other := mustAuditLog(t, testStore{Dir: t.TempDir()}, "c") // its own key

	dir := filepath.Join(t.TempDir(), "published")
	if r := publish(a, dir); r.code != 0 {
		t.Fatalf("publish a: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	snapshot := func() map[string]string {
		out := map[string]string{}
		filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				b, _ := os.ReadFile(path)
				out[path] = string(b)
			}
			return err
		})
		return out
	}
	was := snapshot()
	for _, c := range []struct {
		name string
		run  func() ran
		want string
	}{
		{"a fork signed with the same key", func() ran { return publish(b, dir) }, "that the log's latest checkpoint, of 12, does not extend: the log was forked or rewritten since it was published; it was left as it is"},
		// The fork grown past the published tree: only the tree of the
		// directory's size in it shows the fork.
		{"a larger fork signed with the same key", func() ran {
			mustAuditLog(t, b, "b2", "--audit-key", bKey)
			return publish(b, dir)
		}, "holds a checkpoint of 12 events that the log's latest checkpoint, of 24, does not extend: the log was forked or rewritten since it was published; it was left as it is"},
		{"another log", func() ran {
			return mustAudit(t, nil, "publish", "--data", other.Dir, "--dir", dir)
		}, "that the log's key"},
	} {
		r := c.run()
		t.Logf("%s: %s", c.name, strings.TrimSpace(r.stderr))
		if r.code != 1 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s: exit %d\n%s%s, want exit 1 and one line saying %q", c.name, r.code, r.stdout, r.stderr, c.want)
		}
		if now := snapshot(); fmt.Sprint(now) != fmt.Sprint(was) {
			t.Errorf("%s: the directory changed", c.name)
		}
	}
	// A run cut short before its checkpoint: the next finds the tiles
	// there, checks them and writes the checkpoint; a tile there that
	// differs is another log's, refused.
	cp := filepath.Join(dir, "checkpoint")
	os.Remove(cp)
	if r := publish(a, dir); r.code != 0 || !strings.Contains(r.stdout, "0 tiles written, 2 already there") {
		t.Errorf("publish over a run cut short: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if now := snapshot(); fmt.Sprint(now) != fmt.Sprint(was) {
		t.Errorf("publish over a run cut short wrote another directory")
	}
	os.Remove(cp)
	bundle := filepath.Join(dir, "tile", "entries", "000.p", "12")
	if err := os.WriteFile(bundle, []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := publish(a, dir); r.code != 1 || !strings.Contains(r.stderr, "holds a tile tile/entries/000.p/12 that differs from the log's") {
		t.Errorf("publish over an edited tile: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(cp); err == nil {
		t.Errorf("publish over an edited tile wrote a checkpoint")
	}
	if r := mustAudit(t, nil, "publish", "--data", a.Dir); r.code != 2 || !strings.Contains(r.stderr, "--dir is required") {
		t.Errorf("publish without --dir: exit %d\n%s", r.code, r.stderr)
	}
}
