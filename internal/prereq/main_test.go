package main

import (
	"strings"
	"testing"
)

// Ensure the list names each prerequisite the tests skip without, found
// or missing, with what it enables and, when missing, how to get it; and
// exits 1 only where CI's variable requires a missing one.
func TestRun_ListsEachPrerequisite(t *testing.T) {
	for _, env := range []string{"PATH", "WRITERD_TEST_POSTGRES", "WRITERD_LITEWITNESS", "WRITERD_CHROMIUM",
		"WRITERD_SERVER_MEMORY", "WRITERD_INSPECTOR_CLI", "WRITERD_TEST_POSTGRES_REQUIRED", "WRITERD_TEST_WITNESS_REQUIRED",
		"WRITERD_TEST_BROWSER_REQUIRED", "WRITERD_TEST_NODE_REQUIRED", "WRITERD_TEST_SERVER_MEMORY_REQUIRED"} {
		t.Setenv(env, "")
	}
	pgGlob = t.TempDir() + "/*/bin/initdb"
	var out strings.Builder
	if code := run(&out, t.TempDir()); code != 0 {
		t.Fatalf("nothing required, exit %d:\n%s", code, out.String())
	}
	for _, name := range []string{"PostgreSQL", "litewitness", "Chromium", "Node and the TS SDK", "server-memory", "curl", "a C compiler"} {
		if !strings.Contains(out.String(), "  missing  "+name+" ") {
			t.Errorf("no line saying %s is missing:\n%s", name, out.String())
		}
	}
	if n := strings.Count(out.String(), "enables: "); n != 7 || strings.Count(out.String(), "to get it: ") != 7 {
		t.Errorf("%d lines of what the missing ones enable, want 7 with how to get each:\n%s", n, out.String())
	}
	t.Setenv("WRITERD_TEST_POSTGRES_REQUIRED", "1")
	out.Reset()
	if code := run(&out, t.TempDir()); code != 1 || !strings.Contains(out.String(), "  MISSING  PostgreSQL") {
		t.Errorf("PostgreSQL required and missing: exit %d:\n%s", code, out.String())
	}
}
