package upstreamtest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

// TB is the part of testing.TB the helpers use. It is an interface of
// the package's own so that package testing is not linked into writerd,
// whose bench (internal/bench) starts the fake with Start and BuildTo.
type TB interface {
	Helper()
	Fatal(args ...any)
	TempDir() string
	Cleanup(func())
}

// BuildTo builds fakeupstream into dir and returns the binary's path. It
// builds from this package's source folder, so it works wherever the
// source tree is (tests, writerd bench run from a checkout).
func BuildTo(dir string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("upstreamtest: no source path")
	}
	return BuildMain(filepath.Join(filepath.Dir(file), "fakeupstream"), dir)
}

// BuildMain builds the main package in src into dir, the binary named
// after src's folder, and returns its path.
func BuildMain(src, dir string) (string, error) {
	name := filepath.Base(src)
	if _, err := os.Stat(src); err != nil {
		return "", fmt.Errorf("upstreamtest: %s's source: %w", name, err)
	}
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("upstreamtest: go build %s: %v\n%s", name, err, out)
	}
	return bin, nil
}

// Once builds a binary once per test process (into a folder removed
// only with the machine's temp files) with build, and returns its path.
type Once struct {
	once sync.Once
	bin  string
	err  error
}

// Build runs build once, into a new temporary folder named for name.
func (o *Once) Build(t TB, name string, build func(dir string) (string, error)) string {
	t.Helper()
	o.once.Do(func() {
		dir, err := os.MkdirTemp("", name+"-")
		if err != nil {
			o.err = err
			return
		}
		o.bin, o.err = build(dir)
	})
	if o.err != nil {
		t.Fatal(o.err)
	}
	return o.bin
}

var built Once

// Build builds fakeupstream once per test process and returns its path.
func Build(t TB) string {
	t.Helper()
	return built.Build(t, "fakeupstream", BuildTo)
}

// Options start a fake.
type Options struct {
	// Ledger is the ledger file; "" is ledger.jsonl in a new t.TempDir()
	// (StartHTTP) — instances given the same Ledger share their state.
	Ledger   string
	Switches Switches
	// JSONResponse: over HTTP, answers are application/json bodies
	// instead of event streams.
	JSONResponse bool
	// Stateless: over HTTP, no sessions; the go-sdk speaks protocol
	// 2026-07-28 over Streamable HTTP only so (a stateful fake
	// negotiates 2025-11-25).
	Stateless bool
	// NoFsync: the ledger is written but not fsynced, so that an answer
	// costs no disk flush (writerd bench's upstream target, measuring
	// writerd rather than the fake's disk). A crash may then lose
	// entries: never for the crash tests.
	NoFsync bool
}

// StdioCommand is the argv that runs the fake bin over stdio (what
// writerd's config names as an upstream's command). opts.Ledger must be
// set.
func StdioCommand(bin string, opts Options) []string {
	argv := []string{bin, "-stdio", "-ledger", opts.Ledger}
	if opts.NoFsync {
		argv = append(argv, "-no-fsync")
	}
	return append(argv, opts.Switches.Flags()...)
}

// HTTPCommand is the argv that runs the fake bin over Streamable HTTP on
// addr (a loopback host:port; port 0 picks one).
func HTTPCommand(bin, addr string, opts Options) []string {
	argv := []string{bin, "-http", addr, "-ledger", opts.Ledger}
	if opts.JSONResponse {
		argv = append(argv, "-json-response")
	}
	if opts.Stateless {
		argv = append(argv, "-stateless")
	}
	if opts.NoFsync {
		argv = append(argv, "-no-fsync")
	}
	return append(argv, opts.Switches.Flags()...)
}

// Server is a running fake over Streamable HTTP.
type Server struct {
	Addr   string // host:port
	URL    string // its MCP endpoint
	Ledger string
	Cmd    *exec.Cmd

	waited chan struct{}
	err    error
}

// StartHTTP starts a fake over Streamable HTTP on a loopback port, and
// stops it when the test ends. Its stderr goes to LEDGER.stderr.
func StartHTTP(t TB, opts Options) *Server {
	t.Helper()
	if opts.Ledger == "" {
		opts.Ledger = filepath.Join(t.TempDir(), "ledger.jsonl")
	}
	s, err := startHTTP(Build(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Start starts the fake bin (BuildTo's) over Streamable HTTP on a
// loopback port, outside a test (writerd bench); opts.Ledger must be set.
// The caller ends it (Stop, Kill). Its stderr goes to LEDGER.stderr.
func Start(bin string, opts Options) (*Server, error) {
	if opts.Ledger == "" {
		return nil, errors.New("upstreamtest: Start needs a ledger")
	}
	return startHTTP(bin, opts)
}

func startHTTP(bin string, opts Options) (*Server, error) {
	argv := HTTPCommand(bin, "127.0.0.1:0", opts)
	cmd := exec.Command(argv[0], argv[1:]...)
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
	s := &Server{Ledger: opts.Ledger, Cmd: cmd, waited: make(chan struct{})}
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		b, _ := os.ReadFile(opts.Ledger + ".stderr")
		return nil, fmt.Errorf("fakeupstream did not start: %v\n%s", err, b)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if !ok {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("fakeupstream: first line %q", line)
	}
	go io.Copy(io.Discard, r)
	go func() { s.err = cmd.Wait(); close(s.waited) }()
	s.Addr, s.URL = addr, "http://"+addr+"/mcp"
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

// Exited is closed when the fake's process has ended.
func (s *Server) Exited() <-chan struct{} { return s.waited }

// Entries reads the fake's ledger.
func (s *Server) Entries(t TB) []Entry {
	t.Helper()
	e, err := ReadLedger(s.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
