package bolt_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	bbolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/storage/bolt"
)

var native = binary.NativeEndian

// layout is where a filled database keeps its pages.
type layout struct {
	path     string
	pageSize int64
	hwm      int64  // pages in use
	root     uint64 // the domain bucket's root page: a branch page
	leaf     uint64 // a leaf page under it
	txids    [2]uint64
}

// mustFill writes n keys with 200-byte values into the domain bucket of a
// new database in dir, one transaction each (enough for a branch page over
// several leaves), closes it, and returns where its pages are.
func mustFill(t testing.TB, dir string, n int) layout {
	t.Helper()
	db, err := bolt.Open(dir, initDomain)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := db.Update(ctx, put(fmt.Sprintf("key-%04d", i), strings.Repeat("v", 200))); err != nil {
			t.Fatal(err)
		}
	}
	l := layout{path: filepath.Join(dir, bolt.FileName), pageSize: int64(db.Bolt().Info().PageSize)}
	err = db.Bolt().View(func(tx *bbolt.Tx) error {
		l.hwm = tx.Size() / l.pageSize
		l.root = uint64(tx.Bucket(domain).Root())
		if info, err := tx.Page(int(l.root)); err != nil || info.Type != "branch" {
			t.Fatalf("the domain bucket's root is %+v (%v), want a branch page", info, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	b := mustRead(t, l.path)
	l.leaf = native.Uint64(b[int64(l.root)*l.pageSize+16+8:]) // the first child of the root
	for i := range l.txids {
		l.txids[i] = native.Uint64(b[int64(i)*l.pageSize+16+48:])
	}
	return l
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// patch writes b at off in the file.
func (l layout) patch(t testing.TB, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(l.path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func (l layout) page(id uint64) int64 { return int64(id) * l.pageSize }

func u16(v uint16) []byte { return native.AppendUint16(nil, v) }
func u32(v uint32) []byte { return native.AppendUint32(nil, v) }
func u64(v uint64) []byte { return native.AppendUint64(nil, v) }

// newerMeta is the meta page bbolt uses: the one with the higher txid.
func (l layout) newerMeta() int64 {
	if l.txids[1] > l.txids[0] {
		return 1
	}
	return 0
}

// Ensure Open refuses a damaged file before bbolt maps it, with one
// sentence naming the damage and the file as <data>/writerd.db, instead
// of faulting (SIGBUS, SIGSEGV) in bbolt, and changes nothing in the file.
func TestOpen_RefusesDamage(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t testing.TB, l layout)
		want   string
	}{
		{"truncated below the high-water mark", func(t testing.TB, l layout) {
			os.Truncate(l.path, (l.hwm-1)*l.pageSize)
		}, "the file is shorter than its meta page says (truncated?)"},
		{"truncated by one byte below it", func(t testing.TB, l layout) {
			os.Truncate(l.path, l.hwm*l.pageSize-1)
		}, "the file is shorter than its meta page says (truncated?)"},
		{"truncated into the meta pages", func(t testing.TB, l layout) {
			os.Truncate(l.path, l.pageSize+100)
		}, "the file is shorter than its two meta pages (truncated?)"},
		{"both meta pages", func(t testing.TB, l layout) {
			l.patch(t, 16, u32(0xdeadbeef))
			l.patch(t, l.pageSize+16+56, u64(1)) // the second's checksum
		}, "neither meta page is valid"},
		{"a meta page pointing past the data", func(t testing.TB, l layout) {
			// Both meta pages name a root at the high-water mark, with
			// checksums that match: only the bounds show the damage.
			b := mustRead(t, l.path)
			for i := range int64(2) {
				m := b[i*l.pageSize+16 : i*l.pageSize+16+64]
				native.PutUint64(m[16:], uint64(l.hwm))
				native.PutUint64(m[56:], fnv64a(m[:56]))
				l.patch(t, i*l.pageSize+16, m)
			}
		}, "the meta page points outside the data it describes"},
		{"a branch page's type", func(t testing.TB, l layout) {
			l.patch(t, l.page(l.root)+8, u16(0x40))
		}, "is neither a branch nor a leaf page (flags 0x40)"},
		{"a branch page's child past the end", func(t testing.TB, l layout) {
			l.patch(t, l.page(l.root)+16+8, u64(1<<40))
		}, "names page 1099511627776, outside the data"},
		{"a branch page's key offset", func(t testing.TB, l layout) {
			l.patch(t, l.page(l.root)+16, u32(0x7fffffff))
		}, "the key of element 0 lies outside the page"},
		{"a leaf page's element count", func(t testing.TB, l layout) {
			l.patch(t, l.page(l.leaf)+10, u16(0xffff))
		}, "holds more elements than fit in it"},
		{"a leaf page's value size", func(t testing.TB, l layout) {
			l.patch(t, l.page(l.leaf)+16+12, u32(1<<30))
		}, "the key or value of element 0 lies outside the page"},
		{"a page carrying another's id", func(t testing.TB, l layout) {
			l.patch(t, l.page(l.leaf), u64(l.leaf+1))
		}, "carries the id of page"},
		{"a page named twice", func(t testing.TB, l layout) {
			b := mustRead(t, l.path)
			second := b[l.page(l.root)+16+16+8 : l.page(l.root)+16+16+16]
			l.patch(t, l.page(l.root)+16+8, second)
		}, "which another page names too"},
		{"keys out of order", func(t testing.TB, l layout) {
			// Every page is well formed; only bbolt's own check sees it.
			b := mustRead(t, l.path)
			e := l.page(l.leaf) + 16 + 16 // the second element
			pos := native.Uint32(b[e+4:])
			l.patch(t, e+int64(pos), []byte{0})
		}, "bbolt's consistency check finds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "zzPATHMARKERzz")
			l := mustFill(t, dir, 100)
			tt.damage(t, l)
			before := mustRead(t, l.path)
			db, err := bolt.Open(dir, initDomain)
			if err == nil {
				db.Close()
				t.Fatal("Open accepted the damaged file")
			}
			var de *bolt.DamagedError
			if !errors.As(err, &de) || !errors.Is(err, bolt.ErrDamaged) {
				t.Fatalf("Open: %T %v, want a *DamagedError", err, err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "<data>/writerd.db is damaged: ") || !strings.Contains(msg, tt.want) {
				t.Errorf("Open: %q, want <data>/writerd.db is damaged: …%s…", msg, tt.want)
			}
			if strings.Contains(msg, "zzPATHMARKERzz") || strings.Count(msg, "\n") != 0 {
				t.Errorf("Open: %q, want one line without the path", msg)
			}
			if !bytes.Equal(before, mustRead(t, l.path)) {
				t.Error("a refused Open changed the file")
			}
			if db, err := bolt.OpenReadOnly(dir); err == nil {
				db.Close()
				if !strings.Contains(tt.want, "consistency") {
					t.Error("OpenReadOnly accepted the damaged file")
				}
			}
		})
	}
}

// fnv64a is the checksum of a meta page.
func fnv64a(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// Ensure a database with exactly one bad meta page opens on the other
// (as bbolt does) with a warning naming the page, and that the older one
// being bad loses nothing.
func TestOpen_OneMetaPageBad(t *testing.T) {
	dir := t.TempDir()
	l := mustFill(t, dir, 100)
	older := 1 - l.newerMeta()
	l.patch(t, older*l.pageSize+16+56, u64(0)) // its checksum
	db := MustOpen(t, dir)
	want := fmt.Sprintf("meta page %d fails its checksum; bbolt uses the other one, which may lack the last write", older)
	if w := db.Warnings(); len(w) != 1 || w[0] != want {
		t.Errorf("Warnings = %q, want [%q]", w, want)
	}
	if got := MustGet(t, db, "key-0099"); len(got) != 200 {
		t.Errorf("the last write is gone: %q", got)
	}
}

// Ensure a new, empty file is a new database to Open, and no database to
// OpenReadOnly.
func TestOpen_EmptyFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, bolt.FileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if db, err := bolt.OpenReadOnly(dir); !errors.Is(err, bolt.ErrDamaged) {
		if db != nil {
			db.Close()
		}
		t.Fatalf("OpenReadOnly of an empty file: %v, want damaged", err)
	}
	db := MustOpen(t, dir)
	if err := db.Update(ctx, put("k", "v")); err != nil {
		t.Fatal(err)
	}
}

// Ensure OpenReadOnly creates nothing: a missing directory or file is
// ErrNoDatabase, and stays missing.
func TestOpenReadOnly_CreatesNothing(t *testing.T) {
	parent := t.TempDir()
	for _, dir := range []string{filepath.Join(parent, "missing"), parent} {
		if db, err := bolt.OpenReadOnly(dir); !errors.Is(err, bolt.ErrNoDatabase) {
			if db != nil {
				db.Close()
			}
			t.Fatalf("OpenReadOnly(%s): %v, want ErrNoDatabase", filepath.Base(dir), err)
		}
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Fatalf("OpenReadOnly created %v", entries)
	}
}

// Ensure OpenReadOnly of a database another Open holds fails with
// ErrLocked at once, and that readers share the file.
func TestOpenReadOnly_Locked(t *testing.T) {
	dir := t.TempDir()
	db := MustOpen(t, dir)
	if r, err := bolt.OpenReadOnly(dir); !errors.Is(err, bolt.ErrLocked) {
		if r != nil {
			r.Close()
		}
		t.Fatalf("OpenReadOnly of a held database: %v, want ErrLocked", err)
	}
	db.Close()
	a, err := bolt.OpenReadOnly(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := bolt.OpenReadOnly(dir)
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	b.Close()
	if w, err := bolt.Open(dir); !errors.Is(err, bolt.ErrLocked) {
		if w != nil {
			w.Close()
		}
		t.Fatalf("Open while a reader holds the file: %v, want ErrLocked", err)
	}
}

// Ensure an error opening the data directory names it as <data>, never by
// its path, and still unwraps to the system's error.
func TestOpen_ErrorsNameNoPath(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "zzPATHMARKERzz")
	if err := os.WriteFile(parent, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{parent, filepath.Join(parent, "data")} {
		db, err := bolt.Open(dir)
		if err == nil {
			db.Close()
			t.Fatal("Open succeeded on a file")
		}
		if msg := err.Error(); strings.Contains(msg, "zzPATHMARKERzz") || !strings.Contains(msg, "<data>") {
			t.Errorf("Open(%s): %q, want <data> instead of the path", filepath.Base(dir), msg)
		}
		if !errors.Is(err, syscall.ENOTDIR) {
			t.Errorf("Open(%s): %v does not unwrap to the system's error", filepath.Base(dir), err)
		}
	}
}

// Ensure the size check is at its edge: a file cut to exactly the pages
// its meta page says are in use opens with every write, one byte less is
// refused (TestOpen_RefusesDamage).
func TestOpen_TruncatedToItsData(t *testing.T) {
	dir := t.TempDir()
	l := mustFill(t, dir, 100)
	if err := os.Truncate(l.path, l.hwm*l.pageSize); err != nil {
		t.Fatal(err)
	}
	db := MustOpen(t, dir)
	if got := MustGet(t, db, "key-0099"); len(got) != 200 {
		t.Errorf("the last write is gone: %q", got)
	}
	if err := db.Update(ctx, put("after", "v")); err != nil {
		t.Fatalf("a write after the cut: %v", err)
	}
}
