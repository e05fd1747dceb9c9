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

// The README's transcripts ("$ command" lines, each followed by what it
// prints) are run as written by TestREADME_Transcripts, so that they
// cannot drift: every command must exit as its output says (0, or 1 for a
// verification the transcript shows failing), and print the lines shown,
// up to what changes from run to run (ids, times, hashes, keys, tokens,
// durations).

// transcriptStep is one "$ command" of a transcript and the lines shown
// after it.
type transcriptStep struct {
	command string
	output  []string
}

// readmeTranscript returns the steps of the first block of README.md's
// section under heading that holds a line starting with prefix+"$ ".
func readmeTranscript(t *testing.T, heading, prefix string) []transcriptStep {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no %q", heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
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
		t.Fatalf("README.md's %q has no transcript", heading)
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
		case regexp.MustCompile(`^[0-9a-f]+$`).MatchString(v):
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

// Ensure the README's token and audit walkthroughs run as written against
// a real daemon: the five writes the audit walkthrough's log holds are
// made first over the direct API, and the daemon is stopped where the
// transcript says so.
func TestREADME_Transcripts(t *testing.T) {
	work := t.TempDir()
	home := filepath.Join(work, "home")
	data := filepath.Join(work, "data")
	if err := os.MkdirAll(filepath.Join(home, ".config", "writerd"), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	addr := "127.0.0.1:" + port

	// The README's daemon, started as its HTTP section says, and the
	// writes of the audit walkthrough's log.
	var script strings.Builder
	fmt.Fprintf(&script, `set -u
agent=$(writerd token new --tokens ~/.config/writerd/tokens.json --name claude-code 2>/dev/null)
writerd serve --addr %[1]s --data %[2]s --tokens ~/.config/writerd/tokens.json 2>%[3]s &
echo $! > ~/.config/writerd/serve.pid
until curl -sf http://%[1]s/readyz >/dev/null; do sleep 0.1; done
api() { curl -s -o /dev/null http://%[1]s/v1/tools/$1 -H "Authorization: Bearer $agent" -H "Idempotency-Key: $2" -d "$3"; }
api create_project create-alpha-1 '{"name":"alpha"}'
api create_project create-alpha-2 '{"name":"alpha"}'
project=$(curl -s http://%[1]s/v1/tools/list_projects -H "Authorization: Bearer $agent" -d '{}' | sed 's/.*"id":"\([0-9A-Z]*\)".*/\1/')
api create_record rec-0000001 '{"project_id":"'$project'","title":"first"}'
api update_project rename-alpha-1 '{"project_id":"'$project'","expected_revision":1,"name":"beta"}'
api update_project rename-alpha-2 '{"project_id":"'$project'","expected_revision":1,"name":"gamma"}'
stop() { kill "$(cat ~/.config/writerd/serve.pid)"; while kill -0 "$(cat ~/.config/writerd/serve.pid)" 2>/dev/null; do sleep 0.05; done; }
`, addr, data, filepath.Join(work, "serve.log"))
	replace := strings.NewReplacer("127.0.0.1:7070", addr, "/var/lib/writerd", data)
	var steps []transcriptStep
	for _, section := range []struct{ heading, prefix string }{
		{"### Tokens", "    "},
		{"## The audit log, for auditors", ""},
	} {
		steps = append(steps, readmeTranscript(t, section.heading, section.prefix)...)
	}
	for i, s := range steps {
		cmd := replace.Replace(s.command)
		if strings.Contains(cmd, "# the daemon stopped") {
			script.WriteString("stop\n")
		}
		fmt.Fprintf(&script, "echo '@@step %d'\n{ %s\n} 2>&1\necho \"@@exit $?\"\n", i, cmd)
		if strings.HasPrefix(cmd, "kill -HUP") {
			// The reload is the daemon's, a moment later.
			script.WriteString("until grep -q 'tokens file reloaded' " + filepath.Join(work, "serve.log") + "; do sleep 0.05; done; : > " + filepath.Join(work, "serve.log") + "\n")
		}
	}
	script.WriteString("kill \"$(cat ~/.config/writerd/serve.pid)\" 2>/dev/null; exit 0\n")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = work
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(name, "XDG_") && !strings.HasPrefix(name, "WRITERD_") && name != "HOME" && name != "PATH" {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "HOME="+home, "PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil {
		t.Fatalf("the transcripts' script: %v\n%s", err, out.String())
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
			t.Errorf("$ %s\nprinted %d lines, the README shows %d:\n%s", s.command, len(got[i]), len(s.output), strings.Join(got[i], "\n"))
			continue
		}
		for j, want := range s.output {
			if !lineMatcher(want).MatchString(got[i][j]) {
				t.Errorf("$ %s\nline %d:\n got  %s\n want %s", s.command, j+1, got[i][j], want)
			}
		}
	}
}
