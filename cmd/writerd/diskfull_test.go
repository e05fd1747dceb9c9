//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/writerd/writerd/storage/bolt"
)

// mustMountTmpfs mounts a tmpfs of size bytes on a new directory and
// returns it, or skips the test with one line where it cannot. The
// test's end unmounts it.
func mustMountTmpfs(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("filling a disk needs a tmpfs of the test's own, and mounting one needs root; CI runs as root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("writerd-test", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount the tmpfs: %v", err)
		}
	})
	return dir
}

// mustFill writes a file at path until the file system has no room left.
func mustFill(t testing.TB, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, chunk := range []int{1 << 20, 64 << 10, 4 << 10, 512} {
		b := make([]byte, chunk)
		for {
			if _, err := f.Write(b); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
}

// mustRetryAfter asserts a 503 with Retry-After, a whole number of
// seconds (RFC 9110, section 10.2.3).
func mustRetryAfter(t testing.TB, what string, r reply) {
	t.Helper()
	if r.status != 503 {
		t.Fatalf("%s: %d %s, want 503", what, r.status, r.body)
	}
	if n, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || n < 1 {
		t.Fatalf("%s: 503 with Retry-After %q, want a number of seconds", what, r.header.Get("Retry-After"))
	}
}

// Ensure a full disk is transient and /readyz tells the truth about it:
// once a write is refused for want of space (503 UNAVAILABLE, retry
// same_key, with Retry-After), /readyz answers 503 with Retry-After, and
// keeps answering so while the disk stays full; once space is freed it
// answers 200 again although no client wrote meanwhile (its probe needs
// new space, as a write does); the refused call, sent again with the
// same key, then succeeds. Every acknowledged write is there, the refused
// one once, and writerd check and writerd audit verify pass. The disk is
// a tmpfs of 8 MiB.
func TestDiskFull_ReadyzAndRetryAfter(t *testing.T) {
	mnt := mustMountTmpfs(t, 8<<20)
	tokens := mustAuditTokens(t)
	ts := testStore{Dir: filepath.Join(mnt, "data")}
	// No checkpoint comes due while it runs: every commit is a write's or
	// a probe's.
	d := MustStartHTTP(t, httpConfig{store: ts, tokens: tokens.file, args: []string{"--checkpoint-interval", "1h"}})
	create := func(key string) reply {
		return d.API(tokens.agent, "create_project", key,
			fmt.Sprintf(`{"name":%q,"description":%q}`, key, strings.Repeat("d", 2000)))
	}
	var acked []string
	for i := range 5 {
		key := fmt.Sprintf("before-%04d", i)
		if r := create(key); r.status != 201 {
			t.Fatalf("%s: %d %s", key, r.status, r.body)
		}
		acked = append(acked, key)
	}
	if r := d.Do("GET", "/readyz", ""); r.status != 200 {
		t.Fatalf("/readyz before the disk fills: %d %s", r.status, r.body)
	}

	filler := filepath.Join(mnt, "filler")
	mustFill(t, filler)
	var refused string
	var r reply
	for i := 0; i < 1000 && refused == ""; i++ {
		key := fmt.Sprintf("full-%04d", i)
		switch r = create(key); r.status {
		case 201:
			acked = append(acked, key)
		case 503:
			refused = key
		default:
			t.Fatalf("%s on a full disk: %d %s", key, r.status, r.body)
		}
	}
	if refused == "" {
		t.Fatal("no write was refused on a full disk")
	}
	var e envelope
	json.Unmarshal([]byte(r.body), &e)
	if e.Error.Code != "UNAVAILABLE" || e.Error.Retry != "same_key" || e.Error.Message != bolt.FullMessage {
		t.Fatalf("the refused write: %s; want UNAVAILABLE, same_key, %q", r.body, bolt.FullMessage)
	}
	mustRetryAfter(t, "the refused write", r)
	for range 2 { // the probe finds no room, again and again
		mustRetryAfter(t, "/readyz on a full disk", d.Do("GET", "/readyz", ""))
	}

	// Space returns; no client writes, and /readyz finds it.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for d.Do("GET", "/readyz", "").status != 200 {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("/readyz still not ready 5s after space returned:\n%s", d.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("refused after %d writes on the full disk; ready again %v after space returned", len(acked)-5, time.Since(start))
	// The probe that found room ended the full state, although no write
	// committed: the next probe proves the store takes commits again by
	// committing (an empty transaction, counted as a commit), where on a
	// full disk it only reserved room, and a disk that then failed to
	// sync would go unnoticed until a write.
	commits := metric(t, d, "writerd_store_commit_duration_seconds_count")
	if r := d.Do("GET", "/readyz", ""); r.status != 200 {
		t.Fatalf("/readyz after space returned: %d %s", r.status, r.body)
	}
	if after := metric(t, d, "writerd_store_commit_duration_seconds_count"); after != commits+1 {
		t.Errorf("commits %v after a probe once space returned, want %v: the full state outlived the probe that found room", after, commits+1)
	}
	if r := create(refused); r.status != 201 {
		t.Fatalf("the refused write, sent again with its key once space returned: %d %s", r.status, r.body)
	}
	acked = append(acked, refused)
	if code := d.Stop(); code != 0 {
		t.Errorf("serve exited %d\n%s", code, d.stderr)
	}

	s := MustOpenStore(t, ts)
	for _, key := range acked {
		if n := len(s.eventsFor(key)); n != 1 || s.record("agent", key) == nil {
			t.Errorf("acknowledged write %s: %d audit events, record %v", key, n, s.record("agent", key) != nil)
		}
	}
	if n := s.projects(); n != len(acked) {
		t.Errorf("%d projects, want the %d acknowledged", n, len(acked))
	}
	s.s.Close()
	mustVerifyPasses(t, ts.auditFlags()...)
	// writerd check runs as the daemon's cleanup does (MustStartHTTP).
}
