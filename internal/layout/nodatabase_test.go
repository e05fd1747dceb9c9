package layout

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// backends are the backends' subtrees; drivers, their database drivers.
var (
	backends = []string{module + "/storage/bolt", module + "/storage/postgres"}
	drivers  = []string{"go.etcd.io/bbolt", "github.com/jackc/pgx"}
)

// isDatabase reports whether an import path is a database driver or a
// backend's subtree.
func isDatabase(path string) bool {
	for _, p := range append(backends[:len(backends):len(backends)], drivers...) {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// Ensure no production code outside a backend's subtree
// (storage/bolt/..., storage/postgres/...) imports a database driver or a
// backend, but the one assembly (internal/daemon), which chooses the
// store, and writerd bench's raw-store baselines
// (cmd/writerd/bench_baseline.go), which measure bbolt itself: every
// other package, and every other file of cmd/writerd, builds without a
// database, so that a backend is one folder, one constructor in the
// conformance suite and one case in the assembly (docs/DESIGN.md section
// 2). Tests may import a backend (bolttest damages a file on purpose,
// pgtest starts a server).
func TestImports_NoDatabase(t *testing.T) {
	// Tab-separated, so that an empty field (a package with no GoFiles or
	// no Deps) stays in its place, and a directory may hold spaces.
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \",\"}}\t{{join .Deps \",\"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var checked []string
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if len(f) != 4 {
			t.Fatalf("go list printed %q, want 4 tab-separated fields", line)
		}
		pkg, dir, files, deps := f[0], f[1], strings.Split(f[2], ","), strings.Split(f[3], ",")
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		switch {
		case isDatabase(pkg):
			// A backend links no other's: a build on PostgreSQL alone
			// links no bbolt.
			for i, b := range backends {
				if pkg != b && !strings.HasPrefix(pkg, b+"/") {
					continue
				}
				for _, dep := range deps {
					for j, other := range backends {
						if j != i && (dep == other || strings.HasPrefix(dep, other+"/") || strings.HasPrefix(dep, drivers[j])) {
							t.Errorf("%s, of one backend, depends on %s, of another", rel, dep)
						}
					}
				}
			}
			continue
		case rel == "internal/daemon":
			continue // the one assembly
		case rel == "cmd/writerd":
			// It links the assembly; its own files import no database
			// but the baselines.
			for _, name := range files {
				if name == "bench_baseline.go" {
					continue
				}
				for _, imp := range fileImports(t, filepath.Join(dir, name)) {
					if isDatabase(imp) {
						t.Errorf("cmd/writerd/%s imports %s: choose and open stores in internal/daemon", name, imp)
					}
				}
			}
			checked = append(checked, rel+" (but bench_baseline.go)")
			continue
		}
		for _, dep := range deps {
			if isDatabase(dep) {
				t.Errorf("%s depends on %s", rel, dep)
			}
		}
		checked = append(checked, rel)
	}
	slices.Sort(checked)
	if len(checked) < 10 || !slices.Contains(checked, "httpapi") || !slices.Contains(checked, "pipeline") {
		t.Fatalf("checked %v: not every package", checked)
	}
	t.Logf("without a database: %s", strings.Join(checked, ", "))
}

// fileImports returns the import paths of a Go file.
func fileImports(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		out = append(out, p)
	}
	return out
}
