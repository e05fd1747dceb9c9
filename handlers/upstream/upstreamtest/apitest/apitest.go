// Package apitest is the tests' fake HTTP API (fakeapi, a separate
// process) and what a test needs around it: building and starting the
// binary, flipping its switches while it runs, and reading its ledger of
// executions and its log of requests.
//
// The fake is a ticket tracker that implements the Idempotency-Key
// header of draft-ietf-httpapi-idempotency-key-header: a request whose
// key is new executes once and its answer is kept; the same key with the
// same payload answers the kept answer again (Idempotent-Replayed: true),
// also after a restart; the same key while its first request still runs
// is 409 with a problem of type ProblemInFlight and Retry-After: 1; the
// same key with another payload is 422 with a problem of type
// ProblemKeyReused. Neither executes anything.
//
// The ledger (LEDGER, JSON lines, one per execution, appended and
// fsynced before the answer leaves) is the ground truth a crash test
// counts; the fake's state (tickets, kept answers) is the ledger
// replayed at start. LEDGER.requests has one line per request received,
// before anything else is done with it, with its request target exactly
// as it came: what a test of path escapes reads. LEDGER.control holds
// the switches in force (Switches), read at every request.
package apitest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
)

// Secret is in every error and refusal body the fake sends, and
// BodySecret in every result it sends (its "note" member): an
// upstream's text, which writerd must never echo to a caller, an event,
// a metric or its log.
const (
	Secret     = "SECRET-API-TEXT"
	BodySecret = "SECRET-API-BODY"
)

// The problem types of the draft's two key conditions.
const (
	ProblemInFlight  = "https://fakeapi.test/problems/in-flight"
	ProblemKeyReused = "https://fakeapi.test/problems/key-reused"
)

// Entry is one line of the ledger: one execution.
type Entry struct {
	Time        time.Time `json:"time"`
	Route       string    `json:"route"` // "POST /v1/tickets"
	RequestURI  string    `json:"request_uri"`
	Key         string    `json:"key"` // "" for none, or ignored
	Fingerprint string    `json:"fingerprint"`
	AttemptID   string    `json:"attempt_id"`
	Instance    int       `json:"instance"`
	Status      int       `json:"status"`
	// Answer is the body as first sent (null for none); a request with
	// the same key answers it again, with Status.
	Answer json.RawMessage `json:"answer"`
	// Ticket is the ticket as the execution left it (nil once deleted),
	// TicketID its id: the state a restart replays.
	TicketID string  `json:"ticket_id"`
	Ticket   *Ticket `json:"ticket,omitempty"`
}

// Ticket is the fake tracker's one kind of thing.
type Ticket struct {
	ID       string `json:"id"`
	Title    string `json:"title"`
	Body     string `json:"body"`
	Priority string `json:"priority"`
	Status   string `json:"status"`
	Comments int    `json:"comments"`
}

// Request is one line of LEDGER.requests: a request as received.
type Request struct {
	Time       time.Time `json:"time"`
	Method     string    `json:"method"`
	RequestURI string    `json:"request_uri"`
	Key        string    `json:"key"` // the header's raw value
	Instance   int       `json:"instance"`
}

// ReadLedger reads the ledger's entries; a last line cut short by a
// crash (never fsynced, never answered) is left out.
func ReadLedger(path string) ([]Entry, error) { return readLines[Entry](path) }

// ReadRequests reads LEDGER.requests.
func ReadRequests(ledger string) ([]Request, error) { return readLines[Request](ledger + ".requests") }

func readLines[T any](path string) ([]T, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []T
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break // cut short
		}
		var v T
		if err := json.Unmarshal(b[:i], &v); err != nil {
			return nil, fmt.Errorf("apitest: %s: %w", filepath.Base(path), err)
		}
		out = append(out, v)
		b = b[i+1:]
	}
	return out, nil
}

// ByKey counts executions by key ("" for those without one).
func ByKey(entries []Entry) map[string]int {
	m := map[string]int{}
	for _, e := range entries {
		m[e.Key]++
	}
	return m
}

// When a hanging fake stops (Switches.Hang).
const (
	HangBefore = "before" // never executes, never answers
	HangAfter  = "after"  // executes (the ledger has it), never answers
)

// Switches are how the fake misbehaves, from LEDGER.control (SetSwitches)
// or, without one, from its flags; read at every request. They apply to
// the executing routes in Routes, every one if empty; a replay of a key
// is answered from the ledger, untouched by them.
type Switches struct {
	Delay Duration `json:"delay,omitempty"` // execute, wait, answer
	Hang  string   `json:"hang,omitempty"`  // HangBefore or HangAfter
	// Reset: execute, then reset the connection instead of answering.
	Reset bool `json:"reset,omitempty"`
	// Fail: execute, then answer 500.
	Fail bool `json:"fail,omitempty"`
	// Refuse: execute nothing; answer this status (a 4xx) with a problem.
	Refuse int `json:"refuse,omitempty"`
	// RetryAfter: execute nothing; answer 429 with Retry-After: N.
	RetryAfter int `json:"retry_after,omitempty"`
	// Unavailable: execute nothing; answer 503.
	Unavailable bool `json:"unavailable,omitempty"`
	// Redirect: execute nothing; answer 307 to the same path.
	Redirect bool `json:"redirect,omitempty"`
	// IgnoreKey: take no key: every request executes.
	IgnoreKey bool     `json:"ignore_key,omitempty"`
	Routes    []string `json:"routes,omitempty"`
}

// Applies reports whether the switches apply to route.
func (s Switches) Applies(route string) bool {
	if len(s.Routes) == 0 {
		return true
	}
	for _, r := range s.Routes {
		if r == route {
			return true
		}
	}
	return false
}

// Duration is a time.Duration written as in Go ("150ms").
type Duration = upstreamtest.Duration

// SetSwitches puts s in force for the fake of ledger, at its next
// request: LEDGER.control replaced whole (a temporary file renamed).
func SetSwitches(ledger string, s Switches) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := ledger + ".control.tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, ledger+".control")
}

// ReadSwitches reads LEDGER.control; none is the zero Switches.
func ReadSwitches(ledger string) (Switches, error) {
	var s Switches
	b, err := os.ReadFile(ledger + ".control")
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	err = json.Unmarshal(b, &s)
	return s, err
}

// TB is the part of testing.TB the helpers use.
type TB = upstreamtest.TB

// BuildTo builds fakeapi into dir from this package's source folder and
// returns the binary's path.
func BuildTo(dir string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("apitest: no source path")
	}
	return upstreamtest.BuildMain(filepath.Join(filepath.Dir(file), "fakeapi"), dir)
}

var built upstreamtest.Once

// Build builds fakeapi once per test process and returns its path.
func Build(t TB) string {
	t.Helper()
	return built.Build(t, "fakeapi", BuildTo)
}

// Options start a fake.
type Options struct {
	// Ledger is the ledger file; "" is ledger.jsonl in a new t.TempDir().
	Ledger string
	// KeyHeader is the header a key comes in (default Idempotency-Key),
	// KeyFormat "token" (default) or "sf-string".
	KeyHeader, KeyFormat string
	// NoFsync: the ledger is written, never fsynced (benchmarks only).
	NoFsync bool
}

// Server is a running fake.
type Server struct {
	Addr   string // host:port, loopback
	URL    string // http://Addr
	Ledger string
	Cmd    *exec.Cmd
	waited chan struct{}
}

// StartAPI starts a fake on a loopback port, stopped when the test ends.
func StartAPI(t TB, opts Options) *Server {
	t.Helper()
	if opts.Ledger == "" {
		opts.Ledger = filepath.Join(t.TempDir(), "ledger.jsonl")
	}
	s, err := Start(Build(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Start starts the fake bin on a loopback port; opts.Ledger must be set.
// Its stderr goes to LEDGER.stderr.
func Start(bin string, opts Options) (*Server, error) {
	if opts.Ledger == "" {
		return nil, errors.New("apitest: Start needs a ledger")
	}
	argv := []string{"-http", "127.0.0.1:0", "-ledger", opts.Ledger}
	if opts.KeyHeader != "" {
		argv = append(argv, "-key-header", opts.KeyHeader)
	}
	if opts.KeyFormat != "" {
		argv = append(argv, "-key-format", opts.KeyFormat)
	}
	if opts.NoFsync {
		argv = append(argv, "-no-fsync")
	}
	cmd := exec.Command(bin, argv...)
	stderr, err := os.OpenFile(opts.Ledger+".stderr", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		cmd.Process.Kill()
		cmd.Wait()
		b, _ := os.ReadFile(opts.Ledger + ".stderr")
		return nil, fmt.Errorf("apitest: fakeapi did not start: %q %v\n%s", line, err, b)
	}
	go io.Copy(io.Discard, out)
	s := &Server{Addr: addr, URL: "http://" + addr, Ledger: opts.Ledger, Cmd: cmd, waited: make(chan struct{})}
	go func() { cmd.Wait(); close(s.waited) }()
	return s, nil
}

// Kill ends the fake with SIGKILL and waits for it.
func (s *Server) Kill() {
	s.Cmd.Process.Signal(syscall.SIGKILL)
	<-s.waited
}

// Stop ends the fake with SIGTERM and waits for it.
func (s *Server) Stop() {
	s.Cmd.Process.Signal(syscall.SIGTERM)
	<-s.waited
}
