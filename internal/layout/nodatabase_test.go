package layout

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// backends are the backends' subtrees; drivers, their database drivers,
// in the same order.
var (
	backends = []string{"storage/bolt", "storage/postgres"}
	drivers  = []string{"go.etcd.io/bbolt", "github.com/jackc/pgx"}
)

// isDatabase reports whether an import path is a database driver or a
// backend's subtree.
func isDatabase(path string) bool {
	rel := strings.TrimPrefix(path, module+"/")
	for i := range backends {
		if within(rel, backends[i]) || within(path, drivers[i]) {
			return true
		}
	}
	return false
}

// mayOpenStores are the packages that may link a database: the one
// assembly, which chooses the store, and writerd bench, whose raw-store
// baselines measure bbolt itself.
var mayOpenStores = []string{"internal/daemon", "internal/bench"}

// Ensure no production code outside a backend's subtree imports a
// database driver or a backend, but the one assembly (internal/daemon)
// and writerd bench's raw-store baselines (internal/bench): every other
// package builds without a database, and cmd/writerd links one only
// through them, so that a backend is one folder, one constructor in the
// conformance suite and one case in the assembly (docs/DESIGN.md section
// 2). A backend links no other's: a build on PostgreSQL alone links no
// bbolt. Tests may import a backend (bolttest damages a file on purpose,
// pgtest starts a server).
func TestNoDatabase(t *testing.T) {
	var checked []string
	for _, p := range list(t) {
		switch {
		case isDatabase(module + "/" + p.path):
			for i, b := range backends {
				if !within(p.path, b) {
					continue
				}
				for _, dep := range p.deps {
					for j, other := range backends {
						if j != i && (within(dep, module+"/"+other) || within(dep, drivers[j])) {
							t.Errorf("%s, of one backend, depends on %s, of another", p.path, dep)
						}
					}
				}
			}
			continue
		case slices.Contains(mayOpenStores, p.path):
			continue
		case p.path == "cmd/writerd":
			// It links the assembly; its own files import no database.
			for _, name := range p.files {
				for _, imp := range fileImports(t, filepath.Join(p.dir, name)) {
					if isDatabase(imp) {
						t.Errorf("cmd/writerd/%s imports %s: choose and open stores in internal/daemon", name, imp)
					}
				}
			}
		default:
			for _, dep := range p.deps {
				if isDatabase(dep) {
					t.Errorf("%s depends on %s", p.path, dep)
				}
			}
		}
		checked = append(checked, p.path)
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
