package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// ran is how one run of the binary ended.
type ran struct {
	stdout, stderr string
	code           int
}

// runConfig is how to run the binary once.
type runConfig struct {
	bin   string   // the release build if empty
	cwd   string   // working directory; the test's if empty
	env   []string // added to the environment; a later entry wins
	stdin string   // closed after this is read
}

// mustRun runs the release binary with args and an empty stdin.
func mustRun(t testing.TB, args ...string) ran {
	t.Helper()
	return mustRunWith(t, runConfig{}, args...)
}

// mustRunWith runs the binary as c says and returns what it printed and
// its exit code. A run that has not ended after a minute fails the test.
func mustRunWith(t testing.TB, c runConfig, args ...string) ran {
	t.Helper()
	if c.bin == "" {
		c.bin = binary
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir = c.cwd
	cmd.Env = append(testEnv(t), c.env...)
	cmd.Stdin = strings.NewReader(c.stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("writerd %v did not end within a minute", args)
	case err != nil && !errors.As(err, &exit):
		t.Fatalf("writerd %v: %v", args, err)
	}
	return ran{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

// mustNotFault fails the test if stderr shows a Go runtime fault or a
// goroutine dump instead of a sentence.
func mustNotFault(t testing.TB, stderr string) {
	t.Helper()
	for _, s := range []string{"fatal error", "SIGBUS", "SIGSEGV", "goroutine ", "panic:"} {
		if strings.Contains(stderr, s) {
			t.Fatalf("stderr shows a runtime fault (%q):\n%s", s, stderr)
		}
	}
}

// helpLineRE is the second and last line of a usage error: the help
// command to read.
var helpLineRE = regexp.MustCompile(`^Run 'writerd (help(?: [a-z]+)*)' for `)

// mustFollowUsage checks a run against the command line's conventions: it
// exited with code; help (code 0) went to stdout, printing usage once and
// none of the other usages, whose first lines are given; a usage error
// went to stderr as two lines, the sentence firstLine and the help command
// to read, which prints usage; the other stream is empty.
func mustFollowUsage(t testing.TB, r ran, code int, usage, firstLine string, usages ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	printed, silent := r.stdout, r.stderr
	if code != 0 {
		printed, silent = r.stderr, r.stdout
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		if lines[0] != firstLine {
			t.Errorf("stderr begins %q, want %q", lines[0], firstLine)
		}
		m := helpLineRE.FindStringSubmatch(lines[len(lines)-1])
		switch {
		case len(lines) != 2 || m == nil:
			t.Errorf("stderr is %d lines, want 2: the sentence and the help command to read:\n%s", len(lines), r.stderr)
		default:
			help := mustRun(t, strings.Fields(m[1])...)
			if help.code != 0 || strings.Count(help.stdout, usage) != 1 {
				t.Errorf("writerd %s: exit %d, and it prints %q %d times, want once:\n%s%s", m[1], help.code, usage, strings.Count(help.stdout, usage), help.stdout, help.stderr)
			}
		}
	}
	if silent != "" {
		t.Errorf("the other stream holds %q, want nothing", silent)
	}
	for _, line := range usages {
		want := 0
		if line == usage && code == 0 {
			want = 1
		}
		if n := strings.Count(printed, line); n != want {
			t.Errorf("%q printed %d times, want %d:\n%s", line, n, want, printed)
		}
	}
}

// The first line of each usage text, by which a test counts how often a
// usage was printed.
const (
	mainUsageLine    = "writerd serves MCP write tools to AI agents"
	serveUsageLine   = "usage: writerd serve [--stdio] [--addr HOST:PORT] [flags]"
	checkUsageLine   = "usage: writerd check [--data DIR | --store URL]"
	versionUsageLine = "usage: writerd version"
)

// Ensure the command line keeps its conventions: help asked for (help,
// -h, --help, help <command>, help <command> <command>) goes to stdout
// with exit 0; a usage error (no or unknown command, unknown flag, bad
// value, unexpected argument) prints one sentence and the help command to
// read (not the usage) to stderr with exit 2, and a refused value names
// the form the flag takes, whether it came from a flag or the environment.
func TestCLI_HelpAndUsageErrors(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		env    []string
		code   int
		usage  string // the usage printed, once: to stdout if code is 0, else to stderr
		stderr string // the first line of stderr on a usage error
	}{
		{"help", []string{"help"}, nil, 0, mainUsageLine, ""},
		{"--help", []string{"--help"}, nil, 0, mainUsageLine, ""},
		{"-h", []string{"-h"}, nil, 0, mainUsageLine, ""},
		{"help serve", []string{"help", "serve"}, nil, 0, serveUsageLine, ""},
		{"help check", []string{"help", "check"}, nil, 0, checkUsageLine, ""},
		{"help version", []string{"help", "version"}, nil, 0, versionUsageLine, ""},
		{"serve -h", []string{"serve", "-h"}, nil, 0, serveUsageLine, ""},
		{"serve --help", []string{"serve", "--help"}, nil, 0, serveUsageLine, ""},
		{"check -h", []string{"check", "-h"}, nil, 0, checkUsageLine, ""},
		{"version --help", []string{"version", "--help"}, nil, 0, versionUsageLine, ""},

		{"no command", nil, nil, 2, mainUsageLine, "writerd: no command given"},
		{"unknown command", []string{"serv"}, nil, 2, mainUsageLine, `writerd: unknown command "serv"`},
		{"unknown top-level flag", []string{"--verbose"}, nil, 2, mainUsageLine, "writerd: unknown flag --verbose"},
		{"help for an unknown command", []string{"help", "serv"}, nil, 2, mainUsageLine, `writerd: unknown command "serv"`},
		{"help for a command of serve", []string{"help", "serve", "check"}, nil, 2, mainUsageLine, "writerd: serve has no commands of its own: writerd help serve"},
		{"help audit verify", []string{"help", "audit", "verify"}, nil, 0, auditVerifyUsageLn, ""},
		{"help token new", []string{"help", "token", "new"}, nil, 0, tokenNewUsageLine, ""},
		{"help audit of an unknown command", []string{"help", "audit", "verfy"}, nil, 2, auditUsageLine, "writerd audit: help takes one of list, show, verify, checkpoint, export, publish, tail, key"},
		{"a token command's usage error", []string{"token", "new", "--tokens", "/tmp/t.json"}, nil, 2, tokenNewUsageLine, "writerd token new: --name is required: the token's name, such as ci-agent"},
		{"unknown flag", []string{"serve", "--stdio", "--verbose"}, nil, 2, serveUsageLine, "writerd serve: unknown flag -verbose"},
		{"unexpected argument", []string{"serve", "--stdio", "now"}, nil, 2, serveUsageLine, `writerd serve: unexpected argument "now"`},
		{"a duration without its unit", []string{"serve", "--key-ttl", "24"}, nil, 2, serveUsageLine, "writerd serve: --key-ttl takes a duration such as 24h"},
		{"a duration that is a word", []string{"serve", "--key-wait=soon"}, nil, 2, serveUsageLine, "writerd serve: --key-wait takes a duration such as 5s"},
		{"a duration at zero", []string{"serve", "--key-ttl", "0s"}, nil, 2, serveUsageLine, "writerd serve: --key-ttl takes a positive duration such as 24h"},
		{"a store wait at zero", []string{"serve", "--stdio", "--store-wait", "0s"}, nil, 2, serveUsageLine, "writerd serve: --store-wait takes a positive duration of at most 10s, such as 5s: an upstream's call timeout leaves the HTTP write timeout two of it"},
		{"a store wait just over its bound", []string{"serve", "--stdio", "--store-wait", "10.001s"}, nil, 2, serveUsageLine, "writerd serve: --store-wait takes a positive duration of at most 10s, such as 5s: an upstream's call timeout leaves the HTTP write timeout two of it"},
		{"a duration from the environment", []string{"serve", "--stdio"}, []string{"WRITERD_KEY_TTL=a day"}, 2, serveUsageLine, "writerd serve: WRITERD_KEY_TTL takes a duration such as 24h"},
		{"a number that is not one", []string{"serve", "--max-bytes", "128k"}, nil, 2, serveUsageLine, "writerd serve: --max-bytes takes a whole number of bytes, such as 131072"},
		{"bytes at zero", []string{"serve", "--max-bytes", "0"}, nil, 2, serveUsageLine, "writerd serve: --max-bytes takes a positive number of bytes"},
		{"depth at zero", []string{"serve", "--max-depth", "0"}, nil, 2, serveUsageLine, "writerd serve: --max-depth takes a positive number of levels"},
		{"a level unknown", []string{"serve", "--log-level", "loud"}, nil, 2, serveUsageLine, "writerd serve: --log-level takes one of debug, info, warn or error"},
		{"a boolean that is not one", []string{"serve", "--stdio=maybe"}, nil, 2, serveUsageLine, "writerd serve: --stdio takes true or false"},
		{"a principal with a space", []string{"serve", "--principal", "ci agent"}, nil, 2, serveUsageLine, "writerd serve: --principal takes 1 to 128 printable ASCII characters without spaces"},
		{"a principal from the environment", []string{"serve"}, []string{"WRITERD_PRINCIPAL="}, 2, serveUsageLine, "writerd serve: WRITERD_PRINCIPAL takes 1 to 128 printable ASCII characters without spaces"},
		{"a public URL without its scheme", []string{"serve", "--public-url", "writerd.example.com"}, nil, 2, serveUsageLine,
			"writerd serve: --public-url takes the absolute http or https URL browsers reach this daemon's --addr at, such as https://writerd.example.com"},
		{"a public URL without HTTP", []string{"serve", "--stdio", "--public-url", "https://writerd.example.com"}, nil, 2, serveUsageLine,
			"writerd serve: --public-url takes the absolute http or https URL browsers reach this daemon's --addr at, such as https://writerd.example.com"},
		{"check: unexpected argument", []string{"check", "/var/lib/writerd"}, nil, 2, checkUsageLine, `writerd check: unexpected argument "/var/lib/writerd"`},
		{"check: unknown flag", []string{"check", "--fix"}, nil, 2, checkUsageLine, "writerd check: unknown flag -fix"},
		// An unquoted keyword/value --store splits into words: the one
		// holding the password is not said back.
		{"an unquoted keyword/value store", []string{"check", "--store", "host=db.internal", "password=secret-marker"}, nil, 2, checkUsageLine,
			"writerd check: unexpected argument after the flags; a value with spaces, such as a keyword/value --store, must be quoted"},
		{"version: unexpected argument", []string{"version", "long"}, nil, 2, versionUsageLine, `writerd version: unexpected argument "long"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRunWith(t, runConfig{env: tt.env}, tt.args...)
			mustFollowUsage(t, r, tt.code, tt.usage, tt.stderr, mainUsageLine, serveUsageLine, checkUsageLine, versionUsageLine, auditUsageLine, auditVerifyUsageLn, tokenNewUsageLine)
		})
	}
}

// Ensure writerd help serve shows every flag of serve, with the form it
// takes and its default, and each flag once.
func TestCLI_HelpServeListsFlags(t *testing.T) {
	r := mustRun(t, "help", "serve")
	for _, want := range []string{
		"  --stdio\n", "  --data directory\n", "(default $XDG_DATA_HOME/writerd, else ~/.local/share/writerd)",
		"  --principal name\n", "(default local)", "  --max-bytes bytes\n", "(default 131072)",
		"  --max-depth levels\n", "(default 16)", "  --key-ttl duration\n", "(default 24h)",
		"  --key-wait duration\n", "(default 5s)", "  --log-level level\n", "(default info)",
		"  --store-wait duration\n", "a duration of at most 10s (default 10s)",
	} {
		if n := strings.Count(r.stdout, want); n != 1 {
			t.Errorf("help serve shows %q %d times, want once:\n%s", want, n, r.stdout)
		}
	}
}

var versionLineRE = regexp.MustCompile(`^writerd (\(devel\)|v\S+)( \(revision [0-9a-f]+(, modified)?\))? go1\.\d+\S*\n$`)

// Ensure writerd version and writerd --version print one line to stdout:
// the module version and, when the build recorded one, the VCS revision,
// then the Go version; builds without VCS information (-buildvcs=false)
// print what they know.
func TestVersion_FromBuildInfo(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		r := mustRun(t, args...)
		if r.code != 0 || r.stderr != "" || !versionLineRE.MatchString(r.stdout) {
			t.Errorf("writerd %v: exit %d, stdout %q, stderr %q; want one version line", args, r.code, r.stdout, r.stderr)
		}
	}
}

// Ensure a version set with -ldflags "-X main.Version=…" is the one
// reported, and the one the MCP handshake and the log carry.
func TestVersion_Ldflags(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "writerd")
	build := exec.Command("go", "build", "-ldflags", "-X main.Version=v9.8.7", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	r := mustRunWith(t, runConfig{bin: bin}, "version")
	if !strings.HasPrefix(r.stdout, "writerd v9.8.7 ") || !versionLineRE.MatchString(r.stdout) {
		t.Errorf("version: %q, want writerd v9.8.7 …", r.stdout)
	}
	d := mustStartWith(t, daemonConfig{bin: bin})
	if v := d.session.InitializeResult().ServerInfo.Version; v != "v9.8.7" {
		t.Errorf("the handshake's version is %q, want v9.8.7", v)
	}
	d.Stop()
	if !strings.Contains(d.stderr.String(), `"version":"v9.8.7"`) {
		t.Errorf("the config log line lacks the version:\n%s", d.stderr)
	}
}
