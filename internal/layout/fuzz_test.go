package layout

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fuzzTarget is a fuzz function's declaration in a test file.
var fuzzTarget = regexp.MustCompile(`(?m)^func (Fuzz\w*)\(`)

// Ensure .ci/run gives every fuzz target of the module a short run, in
// its own package: a target that moves or is added without a line there
// never runs in CI.
func TestFuzzTargetsRunInCI(t *testing.T) {
	dir := root(t)
	ci, err := os.ReadFile(filepath.Join(dir, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != dir && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkg, _ := filepath.Rel(dir, filepath.Dir(path))
		for _, m := range fuzzTarget.FindAllSubmatch(b, -1) {
			n++
			line := "-fuzz '^" + string(m[1]) + "$' "
			found := false
			for l := range strings.Lines(string(ci)) {
				if strings.Contains(l, line) && strings.HasSuffix(strings.TrimSpace(l), " ./"+filepath.ToSlash(pkg)) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s (%s) has no line in .ci/run", m[1], pkg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("found %d fuzz targets: not the module's", n)
	}
}
