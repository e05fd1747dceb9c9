package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Ensure a stdio child's environment is exactly the endpoint's, even an
// empty one: nothing of writerd's own (its token, its PATH) reaches it.
func TestStdio_Environment(t *testing.T) {
	t.Setenv("WRITERD_TOKEN", "writerd-own-token")
	for _, env := range [][]string{{"A=1", "B=two words", "EMPTY="}, nil} {
		w := newWatch()
		ep := stdioEndpoint(t, "server", env...)
		ep.Dir = t.TempDir()
		c := MustStart(t, ep, w.opts(), w)
		var got []string
		if err := json.Unmarshal([]byte(textOf(t, c.Call(context.Background(), "env", json.RawMessage(`{}`), nil))), &got); err != nil {
			t.Fatal(err)
		}
		if want := slices.Sorted(slices.Values(env)); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
			t.Fatalf("the child's environment = %q, want exactly %q", got, want)
		}
		c.Close()
	}
}

// alive reports whether pid is a process that has not exited (a zombie
// has).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// waitGone waits, a minute at most, for pid to exit.
func waitGone(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitPIDFile waits for a child to write its pid.
func waitPIDFile(t testing.TB, path string) int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			pid, err := strconv.Atoi(string(b))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid file: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Ensure a stdio child dies with writerd, even when writerd is killed
// by SIGKILL: the parent, a writerd stand-in, is this test binary run
// again; it starts a child and is killed; the child is gone.
func TestStdio_Pdeathsig(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig is Linux's")
	}
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	parent := exec.Command(mustExe(t), childArg, "parent")
	parent.Env = []string{pidFileEnv + "=" + pidFile}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	child := waitPIDFile(t, pidFile)
	// The child outlives its stdin's end: only the signal ends it.
	defer syscall.Kill(child, syscall.SIGKILL)
	if !alive(child) {
		t.Fatal("the child is not running")
	}
	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	waitGone(t, child)
}

// Ensure the child outlives the threads the runtime ends: Pdeathsig fires
// when the forking thread exits, so that thread is held as long as the
// child runs. Goroutines that lock their threads and return end those
// threads.
func TestStdio_ThreadsEnd(t *testing.T) {
	w := newWatch()
	c := MustStart(t, stdioEndpoint(t, "server"), w.opts(), w)
	pid := textOf(t, c.Call(context.Background(), "pid", json.RawMessage(`{}`), nil))
	// 64 goroutines hold 64 threads at once, so that the idle threads,
	// the child's forking one among them if it were idle, are taken;
	// then all end, and their threads with them.
	var locked, ended sync.WaitGroup
	release := make(chan struct{})
	for range 64 {
		locked.Add(1)
		ended.Add(1)
		go func() {
			defer ended.Done()
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			locked.Done()
			<-release
		}()
	}
	locked.Wait()
	close(release)
	ended.Wait()
	time.Sleep(100 * time.Millisecond) // not an assertion: lets the threads' exits reach the kernel
	if got := textOf(t, c.Call(context.Background(), "pid", json.RawMessage(`{}`), nil)); got != pid {
		t.Fatalf("the child is %s, was %s", got, pid)
	}
	select {
	case up := <-w.ups:
		t.Fatalf("OnUp(%v): the child was restarted", up)
	default:
	}
}

// Ensure a child that dies is started again, and that Close ends the
// child.
func TestStdio_Restart(t *testing.T) {
	w := newWatch()
	c := MustStart(t, stdioEndpoint(t, "server"), w.opts(), w)
	first, _ := strconv.Atoi(textOf(t, c.Call(context.Background(), "pid", json.RawMessage(`{}`), nil)))
	if a := c.Call(context.Background(), "die", json.RawMessage(`{}`), nil); a.End != EndLost {
		t.Fatalf("end = %s (%v), want lost", a.End, a.Cause)
	}
	w.mustUp(t, false)
	w.mustTools(t)
	w.mustUp(t, true)
	second, _ := strconv.Atoi(textOf(t, c.Call(context.Background(), "pid", json.RawMessage(`{}`), nil)))
	if second == first || second == 0 {
		t.Fatalf("the child after the restart is %d, before %d", second, first)
	}
	waitGone(t, first)
	c.Close()
	if alive(second) {
		t.Fatalf("the child %d runs after Close", second)
	}
}

// Ensure the backoff doubles up to its bound, and a healthy session
// resets it.
func TestSupervise_Backoff(t *testing.T) {
	var lines bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &lines}, nil))
	c := NewClient(Endpoint{Name: "x", Command: []string{"/nonexistent/upstream"}}, ClientOptions{Logger: logger})
	c.backoff = backoff{min: time.Millisecond, max: 8 * time.Millisecond, healthy: time.Hour}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var afters []string
	for len(afters) < 6 {
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		afters = afters[:0]
		for _, l := range strings.Split(strings.TrimSpace(lines.String()), "\n") {
			var r struct{ After string }
			if json.Unmarshal([]byte(l), &r) == nil && r.After != "" {
				afters = append(afters, r.After)
			}
		}
		mu.Unlock()
	}
	c.Close()
	if want := []string{"1ms", "2ms", "4ms", "8ms", "8ms", "8ms"}; !slices.Equal(afters[:6], want) {
		t.Fatalf("delays %v, want %v", afters[:6], want)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// logRecords returns the JSON log's records.
func logRecords(t testing.TB, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatalf("log line %s: %v", l, err)
		}
		out = append(out, r)
	}
	return out
}

// Ensure a child's stderr is logged at debug level only, each line cut
// at 1 KiB, at most 10 lines a second with the rest counted, and every
// secret's value replaced by its reference, also where the cut runs
// through it.
func TestStdio_Stderr(t *testing.T) {
	const secret = "s3cr3t-VALUE-0123456789"
	run := func(level slog.Level) []byte {
		var buf bytes.Buffer
		var mu sync.Mutex
		logger := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: level}))
		w := newWatch()
		opts := w.opts()
		opts.Logger = logger
		ep := stdioEndpoint(t, "stderr", secretEnv+"="+secret)
		ep.Secrets = []Secret{{Ref: "env:UPSTREAM_TOKEN", Value: secret}, {Ref: "file:/short", Value: "s3cr3t"}}
		c := MustStart(t, ep, opts, w)
		c.Close() // the child's stderr is read to its end
		mu.Lock()
		defer mu.Unlock()
		return bytes.Clone(buf.Bytes())
	}

	if got := run(slog.LevelInfo); bytes.Contains(got, []byte("upstream stderr")) || bytes.Contains(got, []byte("filler")) {
		t.Fatalf("stderr at info level:\n%s", got)
	}

	raw := run(slog.LevelDebug)
	if bytes.Contains(raw, []byte("s3cr3t")) {
		t.Fatalf("a secret's value in the log:\n%s", raw)
	}
	var logged []string
	dropped := 0
	for _, r := range logRecords(t, raw) {
		switch r["msg"] {
		case "upstream stderr":
			if r["level"] != "DEBUG" {
				t.Fatalf("stderr at %v", r["level"])
			}
			logged = append(logged, r["line"].(string))
		case "upstream stderr lines dropped":
			dropped += int(r["count"].(float64))
		}
	}
	if total := 2 + stderrFiller; len(logged)+dropped != total || len(logged) >= total {
		t.Fatalf("%d lines logged and %d dropped, want %d in all, some dropped", len(logged), dropped, total)
	}
	if len(logged) < 2 {
		t.Fatalf("logged %q", logged)
	}
	if want := "starting with token=env:UPSTREAM_TOKEN now"; logged[0] != want {
		t.Errorf("line 1 = %q, want %q", logged[0], want)
	}
	if want := strings.Repeat("a", 1020) + "env:UPSTREAM_TOKEN"; logged[1] != want {
		t.Errorf("line 2 = %q, want the first KiB with the secret whole replaced", logged[1])
	}
}

// Ensure the rate: 10 lines in a second, the rest counted and the count
// logged once the next second's first line comes or the stream ends.
func TestStderrLog_Rate(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	l := newStderrLog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), "x", nil, func() time.Time { return now })
	for range 15 {
		l.line([]byte("a\n"))
	}
	now = now.Add(1500 * time.Millisecond)
	l.line([]byte("b\n"))
	for range 12 {
		l.line([]byte("c\n"))
	}
	l.flush()
	var got []string
	for _, r := range logRecords(t, buf.Bytes()) {
		if c, ok := r["count"]; ok {
			got = append(got, "dropped "+strconv.Itoa(int(c.(float64))))
		} else {
			got = append(got, r["line"].(string))
		}
	}
	want := slices.Concat(slices.Repeat([]string{"a"}, 10), []string{"dropped 5", "b"}, slices.Repeat([]string{"c"}, 9), []string{"dropped 3"})
	if !slices.Equal(got, want) {
		t.Fatalf("logged %q\nwant %q", got, want)
	}
}
