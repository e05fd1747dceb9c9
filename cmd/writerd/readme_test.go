package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The transcripts of the README and docs/AUDITING.md ("$ command" lines,
// each followed by what it prints) are run as written by
// TestREADME_Transcripts, so that they cannot drift: every command must
// exit as its output says (0, or 1 for a verification the transcript
// shows failing), and print the lines shown, up to what changes from run
// to run (ids, times, hashes, keys, tokens, durations).

// transcriptStep is one "$ command" of a transcript and the lines shown
// after it.
type transcriptStep struct {
	command string
	output  []string
}

// The documents whose blocks the tests run, from this package's
// directory: the README (newcomers and operators), docs/PROTOCOL.md
// (agents and clients) and docs/AUDITING.md (auditors).
const (
	readmeFile   = "README.md"
	protocolFile = "docs/PROTOCOL.md"
	auditingFile = "docs/AUDITING.md"
)

// docSection returns the section under heading of file (a path from the
// repository's root), up to the next section of level 2.
func docSection(t testing.TB, file, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", file))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q", file, heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}

// docBlock returns the first shell block of file's section under heading.
func docBlock(t testing.TB, file, heading string) string {
	t.Helper()
	_, block, ok := strings.Cut(docSection(t, file, heading), "```sh\n")
	if !ok {
		t.Fatalf("%s's %q has no shell block", file, heading)
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}

// readmeBlock is docBlock of README.md.
func readmeBlock(t testing.TB, heading string) string {
	t.Helper()
	return docBlock(t, readmeFile, heading)
}

// readmeShell is bash running script in dir as a newcomer's shell would:
// HOME is home, writerd on PATH is the binary under test, and no XDG_ or
// WRITERD_ variable of the test's is set. It runs in a process group of
// its own, killed when ctx ends; kill the group after Run with
// killGroup, for the daemons a failed script left.
func readmeShell(ctx context.Context, dir, home, script string, bashFlags ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", append(bashFlags, "-c", script)...)
	cmd.Dir = dir
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(name, "XDG_") && !strings.HasPrefix(name, "WRITERD_") && name != "HOME" && name != "PATH" {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "HOME="+home, "PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// killGroup kills what is left of cmd's process group.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// docTranscript returns the steps of the first block of file's section
// under heading that holds a line starting with prefix+"$ ".
func docTranscript(t *testing.T, file, heading, prefix string) []transcriptStep {
	t.Helper()
	section := docSection(t, file, heading)
	var steps []transcriptStep
	started := false
	for _, line := range strings.Split(section, "\n") {
		switch {
		case strings.HasPrefix(line, prefix+"$ "):
			started = true
			steps = append(steps, transcriptStep{command: strings.TrimPrefix(line, prefix+"$ ")})
		case !started:
		case line == "```" || (prefix != "" && !strings.HasPrefix(line, prefix) && line != ""):
			return steps
		case line == "" || strings.TrimSpace(line) == "":
		default:
			steps[len(steps)-1].output = append(steps[len(steps)-1].output, strings.TrimPrefix(line, prefix))
		}
	}
	if len(steps) == 0 {
		t.Fatalf("%s's %q has no transcript", file, heading)
	}
	return steps
}

// volatile is what a transcript's output may differ in from run to run.
var volatile = regexp.MustCompile(strings.Join([]string{
	`wrd_[A-Za-z0-9_-]{43}`,                            // a token
	`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`,          // a time
	`[0-9A-HJKMNP-TV-Z]{26}`,                           // a ULID
	`[0-9a-f]{8}…`,                                     // a digest, cut
	`[0-9a-f]{16,}`,                                    // a digest, an origin's id
	`\+[0-9a-f]{8}`,                                    // a key's hash
	`[A-Za-z0-9+/]{40,}={0,2}`,                         // a root, a signature, a key
	`"duration_ms":[0-9.]+`, `duration_ms:( +)[0-9.]+`, // durations
}, "|"))

var hexOnly = regexp.MustCompile(`^[0-9a-f]+$`)

// lineMatcher is a regular expression matching line, volatile parts
// allowed to differ.
func lineMatcher(line string) *regexp.Regexp {
	var re strings.Builder
	re.WriteString("^")
	last := 0
	for _, m := range volatile.FindAllStringIndex(line, -1) {
		re.WriteString(regexp.QuoteMeta(line[last:m[0]]))
		v := line[m[0]:m[1]]
		switch {
		case strings.HasPrefix(v, "wrd_"):
			re.WriteString(`wrd_[A-Za-z0-9_-]{43}`)
		case strings.HasPrefix(v, `"duration_ms":`):
			re.WriteString(`"duration_ms":[0-9.]+`)
		case strings.HasPrefix(v, "duration_ms:"):
			re.WriteString(`duration_ms: +[0-9.]+`)
		case strings.HasSuffix(v, "…"):
			re.WriteString(`[0-9a-f]{64}`)
		case strings.HasPrefix(v, "+"):
			re.WriteString(`\+[0-9a-f]{8}`)
		case len(v) >= 20 && strings.Contains(v, "T") && strings.HasSuffix(v, "Z") && v[4] == '-':
			re.WriteString(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
		case len(v) == 26 && strings.ToUpper(v) == v:
			re.WriteString(`[0-9A-HJKMNP-TV-Z]{26}`)
		case hexOnly.MatchString(v):
			re.WriteString(`[0-9a-f]{16,}`)
		default:
			re.WriteString(`[A-Za-z0-9+/]{40,}={0,2}`)
		}
		last = m[1]
	}
	re.WriteString(regexp.QuoteMeta(line[last:]))
	re.WriteString("$")
	return regexp.MustCompile(re.String())
}

// Ensure the shell blocks and transcripts for a daemon run as written, in
// a home directory of their own and on a port of the test's: the README's
// HTTP daemon block starts the daemon in ~/writerd-demo and exports the
// agent's token (its pid file is what the transcripts signal),
// docs/PROTOCOL.md's direct API block writes and lists with it, the
// README's token and docs/AUDITING.md's audit walkthroughs print what
// they show (the other writes of the audit walkthrough's log made first;
// the walkthrough stops the daemon itself before reading --data, and
// keeps the auditor's token in a file of its own), and the check block
// passes on what is left.
func TestREADME_Transcripts(t *testing.T) {
	work := t.TempDir()
	home := filepath.Join(work, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	addr := "127.0.0.1:" + port

	// The README's daemon, started as its HTTP section says (its token
	// for the agent), its direct API block, and the other writes of the
	// audit walkthrough's log.
	// The blocks run as written but for the port; the daemon's log is
	// where the HTTP block puts it.
	replace := strings.NewReplacer("127.0.0.1:7070", addr)
	serveLog := filepath.Join(home, "writerd-demo", "serve.log")
	var script strings.Builder
	fmt.Fprintf(&script, `set -u
{
%[3]s
} >%[5]s 2>&1 || { echo "@@http $?"; cat %[5]s; }
grep -q '"msg":"listening on %[1]s"' %[5]s && echo "@@http listening"
agent=$WRITERD_TOKEN
until curl -sf http://%[1]s/readyz >/dev/null; do sleep 0.1; done
api_block=$({ %[4]s
} 2>&1); echo "@@api $?"; echo "$api_block" | grep -q '"name":"alpha"' && echo "@@api alpha"
api() { curl -s -o /dev/null http://%[1]s/v1/tools/$1 -H "Authorization: Bearer $agent" -H "Idempotency-Key: $2" -d "$3"; }
api create_project create-alpha-2 '{"name":"alpha"}'
project=$(curl -s http://%[1]s/v1/tools/list_projects -H "Authorization: Bearer $agent" -d '{}' | sed 's/.*"id":"\([0-9A-Z]*\)".*/\1/')
api create_record rec-0000001 '{"project_id":"'$project'","title":"first"}'
api update_project rename-alpha-1 '{"project_id":"'$project'","expected_revision":1,"name":"beta"}'
api update_project rename-alpha-2 '{"project_id":"'$project'","expected_revision":1,"name":"gamma"}'
`, addr, serveLog, replace.Replace(readmeBlock(t, "## The HTTP daemon")), replace.Replace(docBlock(t, protocolFile, "## The direct API")), filepath.Join(work, "http-block.out"))
	var steps []transcriptStep
	for _, section := range []struct{ file, heading, prefix string }{
		{readmeFile, "### Tokens", "    "},
		{auditingFile, "## The audit CLI", ""},
	} {
		steps = append(steps, docTranscript(t, section.file, section.heading, section.prefix)...)
	}
	for i, s := range steps {
		cmd := replace.Replace(s.command)
		reload := strings.HasPrefix(cmd, "kill -HUP")
		if reload {
			fmt.Fprintf(&script, "reloads=$(grep -ac 'tokens file reloaded' %s)\n", serveLog)
		}
		fmt.Fprintf(&script, "echo '@@step %d'\n{ %s\n} 2>&1\necho \"@@exit $?\"\n", i, cmd)
		if reload {
			// The reload is the daemon's, a moment later.
			fmt.Fprintf(&script, "until [ \"$(grep -ac 'tokens file reloaded' %s)\" -gt \"$reloads\" ]; do sleep 0.05; done\n", serveLog)
		}
	}
	// Checking a database, the daemon stopped.
	fmt.Fprintf(&script, "echo '@@check'\n{ %s\n} 2>&1\necho \"@@check $?\"\nexit 0\n", replace.Replace(readmeBlock(t, "## Checking a database")))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := readmeShell(ctx, work, home, script.String())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	killGroup(cmd)
	if err != nil {
		t.Fatalf("the transcripts' script: %v\n%s", err, out.String())
	}
	for _, want := range []string{"@@http listening", "@@api 0", "@@api alpha", "@@check 0"} {
		if !strings.Contains("\n"+out.String(), "\n"+want+"\n") {
			t.Errorf("the HTTP daemon, direct API or check block: no %q in\n%s", want, out.String())
		}
	}
	got := map[int][]string{}
	exits := map[int]string{}
	step := -1
	for _, line := range strings.Split(out.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "@@step "):
			step, _ = strconv.Atoi(strings.TrimPrefix(line, "@@step "))
		case strings.HasPrefix(line, "@@exit "):
			exits[step] = strings.TrimPrefix(line, "@@exit ")
		case strings.HasPrefix(line, "@@check"):
			step = -1
		case step >= 0 && line != "":
			got[step] = append(got[step], line)
		}
	}
	for i, s := range steps {
		wantExit := "0"
		if strings.Contains(strings.Join(s.output, "\n"), "verification failed") {
			wantExit = "1"
		}
		if exits[i] != wantExit {
			t.Errorf("$ %s\nexited %s, want %s:\n%s", s.command, exits[i], wantExit, strings.Join(got[i], "\n"))
			continue
		}
		if len(got[i]) != len(s.output) {
			t.Errorf("$ %s\nprinted %d lines, the document shows %d:\n%s", s.command, len(got[i]), len(s.output), strings.Join(got[i], "\n"))
			continue
		}
		for j, want := range s.output {
			if !lineMatcher(want).MatchString(got[i][j]) {
				t.Errorf("$ %s\nline %d:\n got  %s\n want %s", s.command, j+1, got[i][j], want)
			}
		}
	}
}

// Ensure the commands of README.md's Performance block run, each for a
// fifth of a second instead of its default ten, the MCP one against a
// daemon of the test's own on the port the README names.
func TestREADME_Performance(t *testing.T) {
	work := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var script strings.Builder
	fmt.Fprintf(&script, "set -eu\nwriterd serve --addr %[1]s --insecure-no-auth --data %[2]s 2>%[3]s &\ndaemon=$!\nuntil curl -sf http://%[1]s/readyz >/dev/null; do sleep 0.1; done\n",
		addr, filepath.Join(work, "data"), filepath.Join(work, "serve.log"))
	for _, line := range strings.Split(readmeBlock(t, "## Performance"), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fmt.Fprintf(&script, "%s --duration 200ms >/dev/null\n", strings.ReplaceAll(line, "127.0.0.1:7393", addr))
	}
	script.WriteString("kill $daemon; wait $daemon\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = work
	cmd.Env = append(testEnv(t, "WRITERD_TOKEN=wrd_insecure-no-auth-takes-any-token", "TMPDIR="+work), "PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil {
		t.Fatalf("the Performance block: %v\n%s", err, out)
	}
}
