package atomicfile_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/writerd/writerd/internal/atomicfile"
)

// leftovers returns the names in dir other than the ones given.
func leftovers(t *testing.T, dir string, keep ...string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
outer:
	for _, e := range entries {
		for _, k := range keep {
			if e.Name() == k {
				continue outer
			}
		}
		out = append(out, e.Name())
	}
	return out
}

// Ensure WriteFile replaces a file whole, with the mode asked, and leaves
// nothing else in its directory.
func TestWriteFile_ReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	if err := os.WriteFile(path, []byte("old content, longer than the new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.WriteFile(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "new" {
		t.Fatalf("read %q, %v; want %q", b, err, "new")
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", info.Mode(), err)
	}
	if l := leftovers(t, dir, "state"); len(l) != 0 {
		t.Fatalf("left %v beside the file", l)
	}
}

// Ensure an aborted file leaves the old one as it was and no temporary
// file, and that Abort after Commit changes nothing.
func TestAbort_LeavesTheOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "export")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := atomicfile.New(path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("half of the new"); err != nil {
		t.Fatal(err)
	}
	f.Abort()
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("after Abort the file holds %q, want the old", b)
	}
	if l := leftovers(t, dir, "export"); len(l) != 0 {
		t.Fatalf("Abort left %v", l)
	}

	f, err = atomicfile.New(path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("new")
	if err := f.Close(); err != nil { // checked before it replaces anything
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("after Close the file holds %q, want the old until Commit", b)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	f.Abort()
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Fatalf("after Commit and Abort the file holds %q, want the new", b)
	}
	if err := f.Commit(); err == nil {
		t.Fatal("a second Commit succeeded")
	}
}

// Ensure a rename that fails removes the temporary file, leaves the
// target alone and says which step failed.
func TestCommit_FailedRenameLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "target")
	if err := os.Mkdir(path, 0o755); err != nil { // a directory cannot be renamed over
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "inside"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := atomicfile.WriteFile(path, []byte("x"), 0o644)
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Op != "rename" || pe.Path != path {
		t.Fatalf("err = %v, want a rename PathError naming the target", err)
	}
	if l := leftovers(t, dir, "target"); len(l) != 0 {
		t.Fatalf("a failed rename left %v", l)
	}
}

// Ensure a file in a directory that does not exist is refused at
// creation, naming the target, not the temporary file.
func TestNew_MissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such")
	_, err := atomicfile.New(path, 0o600)
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Op != "create" || pe.Path != path || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want a create PathError naming %s", err, path)
	}
}
