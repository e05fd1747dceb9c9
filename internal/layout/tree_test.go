package layout

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readTree returns the paths the tree of docs/DEVELOPMENT.md names: the
// first word of each line of its first code block that starts in the
// first column.
func readTree(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), "docs", "DEVELOPMENT.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n```\n")
	block, _, closed := strings.Cut(rest, "\n```\n")
	if !ok || !closed {
		t.Fatal("docs/DEVELOPMENT.md has no code block holding the tree")
	}
	var paths []string
	for line := range strings.Lines(block) {
		if line == "" || line[0] == ' ' || line[0] == '\t' || line[0] == '\n' {
			continue
		}
		word, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		paths = append(paths, strings.TrimSuffix(word, "/"))
	}
	return paths
}

// Ensure the tree of docs/DEVELOPMENT.md names only what exists, and
// every top-level folder and every package two folders deep or less, so
// that it cannot go stale as packages move.
func TestDevelopmentTree(t *testing.T) {
	tree := readTree(t)
	dir := root(t)
	for _, p := range tree {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("docs/DEVELOPMENT.md names %s, which does not exist", p)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && !slices.ContainsFunc(tree, func(p string) bool { return within(p, e.Name()) }) {
			t.Errorf("docs/DEVELOPMENT.md's tree names nothing in %s/", e.Name())
		}
	}
	var want []string
	for _, p := range list(t) {
		if strings.Count(p.path, "/") <= 1 {
			want = append(want, p.path)
		}
	}
	for _, w := range want {
		if !slices.Contains(tree, w) {
			t.Errorf("docs/DEVELOPMENT.md's tree does not name %s", w)
		}
	}
}
