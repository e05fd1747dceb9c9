package layout

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/writerd/writerd"

// A layer is one row of DESIGN's table: the packages it places, and
// whether they may import anything but the standard library.
type layer struct {
	n          int
	packages   []string // paths inside the module, as the table names them
	stdlibOnly bool
}

// table places packages in layers.
type table []layer

// codeSpan is a name in backquotes, as the table writes a package.
var codeSpan = regexp.MustCompile("`([^`]+)`")

// readTable parses the layer table of section 2 of docs/DESIGN.md: the
// rows whose first cell is a number.
func readTable(t testing.TB) table {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), "docs", "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## 2. ")
	if start < 0 {
		t.Fatal("docs/DESIGN.md has no section 2")
	}
	sec := doc[start+1:]
	if end := strings.Index(sec, "\n## "); end >= 0 {
		sec = sec[:end]
	}
	var tab table
	for line := range strings.Lines(sec) {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 4 {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(cells[0]))
		if err != nil {
			continue
		}
		l := layer{n: n, stdlibOnly: strings.TrimSpace(cells[3]) == "stdlib"}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[1], -1) {
			l.packages = append(l.packages, m[1])
		}
		if len(l.packages) == 0 {
			t.Fatalf("docs/DESIGN.md section 2: the row of layer %d names no package", n)
		}
		tab = append(tab, l)
	}
	if len(tab) < 10 {
		t.Fatalf("docs/DESIGN.md section 2: %d layer rows, want the whole table", len(tab))
	}
	return tab
}

// place returns the row of a package: the one naming the longest prefix
// of its path.
func (tab table) place(pkg string) (layer, bool) {
	var best layer
	found, bestLen := false, -1
	for _, l := range tab {
		for _, p := range l.packages {
			if (pkg == p || strings.HasPrefix(pkg, p+"/")) && len(p) > bestLen {
				best, found, bestLen = l, true, len(p)
			}
		}
	}
	return best, found
}

// top is a path's top-level folder.
func top(pkg string) string {
	first, _, _ := strings.Cut(pkg, "/")
	return first
}

// isStdlib reports whether an import path is the standard library's: its
// first element has no dot.
func isStdlib(path string) bool { return !strings.Contains(top(path), ".") }

// check returns every import of the graph (a package inside the module,
// its non-test imports) that breaks the table's rules.
func (tab table) check(graph map[string][]string) []string {
	var bad []string
	pkgs := slices.Sorted(func(yield func(string) bool) {
		for p := range graph {
			if !yield(p) {
				return
			}
		}
	})
	for _, pkg := range pkgs {
		from, ok := tab.place(pkg)
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: no row of the layer table places it", pkg))
			continue
		}
		for _, imp := range graph[pkg] {
			rel, own := strings.CutPrefix(imp, module+"/")
			if !own {
				if from.stdlibOnly && !isStdlib(imp) {
					bad = append(bad, fmt.Sprintf("%s (layer %d, stdlib only) imports %s", pkg, from.n, imp))
				}
				continue
			}
			to, ok := tab.place(rel)
			switch {
			case !ok:
				bad = append(bad, fmt.Sprintf("%s imports %s, which no row of the layer table places", pkg, rel))
			case (rel == "storage/internal" || strings.HasPrefix(rel, "storage/internal/")) && top(pkg) != "storage":
				bad = append(bad, fmt.Sprintf("%s imports %s: storage/internal is for storage/ alone", pkg, rel))
			case to.n < from.n, to.n == from.n && top(rel) == top(pkg):
			default:
				bad = append(bad, fmt.Sprintf("%s (layer %d) imports %s (layer %d): an arrow up, or across to another folder of its layer", pkg, from.n, rel, to.n))
			}
		}
	}
	return bad
}

// listed is one package as go list prints it.
type listed struct {
	path  string   // inside the module
	dir   string   // its folder
	files []string // its non-test Go files
	imps  []string // their imports
	deps  []string // everything it links
}

// list runs go list over the module.
func list(t testing.TB) []listed {
	t.Helper()
	// Tab-separated, so that an empty field (a package with no GoFiles or
	// no Deps) stays in its place, and a folder may hold spaces.
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \",\"}}\t{{join .Imports \",\"}}\t{{join .Deps \",\"}}", module+"/...")
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listed
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if len(f) != 5 {
			t.Fatalf("go list printed %q, want 5 tab-separated fields", line)
		}
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
		pkgs = append(pkgs, listed{
			path:  strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/"),
			dir:   f[1],
			files: split(f[2]),
			imps:  split(f[3]),
			deps:  split(f[4]),
		})
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages: not the module", len(pkgs))
	}
	return pkgs
}

// root is the module's folder.
func root(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("no go.mod two folders up: %v", err)
	}
	return dir
}

// Ensure every non-test import of the module points down the layers of
// docs/DESIGN.md section 2.
func TestLayers(t *testing.T) {
	tab := readTable(t)
	graph := map[string][]string{}
	for _, p := range list(t) {
		graph[p.path] = p.imps
	}
	for _, e := range tab.check(graph) {
		t.Error(e)
	}
	for _, want := range []string{"pipeline", "storage/bolt", "httpapi", "cmd/writerd"} {
		if _, ok := graph[want]; !ok {
			t.Fatalf("go list did not list %s", want)
		}
	}
}

// Ensure the check finds each kind of wrong arrow, one planted in the
// module's real graph at a time: a rule that never fires proves nothing.
func TestLayers_FailsOnAPlantedImport(t *testing.T) {
	tab := readTable(t)
	real := map[string][]string{}
	for _, p := range list(t) {
		real[p.path] = p.imps
	}
	for _, tc := range []struct {
		name, from, imp, want string
	}{
		{"up one layer", "pipeline", module + "/handlers", "an arrow up"},
		{"up across folders", "auditlog", module + "/httpapi/auditapi", "an arrow up"},
		{"into the top", "internal/daemon", module + "/cmd/writerd", "an arrow up"},
		{"a leaf into a layer", "internal/loopback", module + "/pipeline", "an arrow up"},
		{"same layer, another folder", "mcp", module + "/auth", "an arrow up"},
		{"a subfolder up", "storage/bolt/kv", module + "/httpapi", "an arrow up"},
		{"storage/internal from outside", "httpapi", module + "/storage/internal/x", "for storage/ alone"},
		{"a leaf off the standard library", "internal/atomicfile", "golang.org/x/sys/unix", "stdlib only"},
		{"a package the table misses", "newfolder", "fmt", "no row of the layer table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			graph := map[string][]string{}
			for p, imps := range real {
				graph[p] = imps
			}
			graph[tc.from] = append(slices.Clone(graph[tc.from]), tc.imp)
			bad := tab.check(graph)
			if len(bad) != 1 || !strings.Contains(bad[0], tc.want) || !strings.HasPrefix(bad[0], tc.from) {
				t.Fatalf("planted %s -> %s: check found %q, want one error naming %s and %q", tc.from, tc.imp, bad, tc.from, tc.want)
			}
		})
	}
}

// within reports whether path is p or below it.
func within(path, p string) bool { return path == p || strings.HasPrefix(path, p+"/") }

// Ensure the writerd binary does not link package testing: a test
// helper that the daemon's code imports (writerd bench starts the tests'
// fake upstream) takes an interface of its own, not testing.TB.
func TestLayers_NoTestingInWriterd(t *testing.T) {
	pkgs := list(t)
	imports := map[string][]string{}
	var writerd *listed
	for i, p := range pkgs {
		imports[module+"/"+p.path] = p.imps
		if p.path == "cmd/writerd" {
			writerd = &pkgs[i]
		}
	}
	if writerd == nil {
		t.Fatal("go list did not list cmd/writerd")
	}
	if !slices.Contains(writerd.deps, "testing") {
		return
	}
	var via []string
	for _, d := range writerd.deps {
		if slices.Contains(imports[d], "testing") {
			via = append(via, strings.TrimPrefix(d, module+"/"))
		}
	}
	t.Errorf("cmd/writerd links package testing, imported by %v", via)
}
