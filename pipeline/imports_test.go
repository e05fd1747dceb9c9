package pipeline_test

import (
	"os/exec"
	"strings"
	"testing"
)

// Ensure the pipeline and the packages it stands on build without bbolt:
// each store on bbolt lives in a subpackage, so that another backend
// plugs in with no database beneath it but its own (docs/DESIGN.md
// section 2).
func TestImports_NoDatabase(t *testing.T) {
	pkgs := []string{"pipeline", "handlers", "idempotency", "auditlog", "digest", "mcp", "metrics"}
	args := []string{"list", "-deps"}
	for _, p := range pkgs {
		args = append(args, "github.com/writerd/writerd/"+p)
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for dep := range strings.Lines(string(out)) {
		if strings.HasPrefix(dep, "go.etcd.io/bbolt") || strings.Contains(dep, "/boltdb") || strings.Contains(dep, "/bolt") {
			t.Errorf("%v depend on %s", pkgs, strings.TrimSpace(dep))
		}
	}
}
