package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/internal/logtest"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/postgres"
	"github.com/writerd/writerd/storage/postgres/pgtest"
	"github.com/writerd/writerd/storage/storetest"
)

var update = flag.Bool("update", false, "rewrite golden files")

// The binaries under test, built once by TestMain: the release build, and
// the writerd_testtools build with tools that fail on purpose.
var binary, testBinary string

func TestMain(m *testing.M) {
	flag.Parse()
	pgtest.Migrate(postgres.Migrate)
	dir, err := os.MkdirTemp("", "writerd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary, testBinary = filepath.Join(dir, "writerd"), filepath.Join(dir, "writerd-testtools")
	// No test reads or writes the configuration of whoever runs them
	// (env_test.go).
	configRoot = filepath.Join(dir, "config")
	if err := os.MkdirAll(filepath.Join(configRoot, "process"), 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(configRoot, "process"))
	// No test takes a flag from the environment of whoever runs them.
	if cleared := clearCommandEnv(); len(cleared) > 0 && testing.Verbose() {
		fmt.Fprintf(os.Stderr, "writerd tests: unset %s, which would reach the commands the tests run\n", strings.Join(cleared, " "))
	}
	for _, b := range []struct{ out, tags string }{{binary, ""}, {testBinary, "writerd_testtools"}} {
		cmd := exec.Command("go", "build", "-tags", b.tags, "-o", b.out, ".")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build writerd:", err)
			os.Exit(1)
		}
	}
	code := pgtest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// stdioDaemon is a running writerd serve --stdio and an SDK client session.
type stdioDaemon struct {
	t        testing.TB
	dir      string
	store    testStore
	cmd      *exec.Cmd
	session  *sdk.ClientSession
	stopOnce sync.Once
	stderr   *logtest.Buffer
	wire     *logtest.Buffer // every JSON-RPC frame the client read or wrote
}

type daemonConfig struct {
	bin   string
	store testStore // the store; if none, dir's
	dir   string    // data directory, without store; a new temporary one if empty
	env   []string  // extra environment
	args  []string  // extra flags
	// connect bounds the wait for the daemon to answer initialize
	// (default 30 s): longer where it waits for an upstream at start.
	connect time.Duration
	// client, if set, are the options of the SDK's client
	client *sdk.ClientOptions
}

// testStore is the store the daemons of an end-to-end test run on: the
// embedded one in a data directory, or a PostgreSQL database of the
// test's own, the audit key of its replicas in the directory.
type testStore struct {
	Dir string
	URL string
	// Config is the XDG_CONFIG_HOME of its daemons and commands, where
	// its log's key lives: "" for the test's (testConfigHome); a fork
	// (mustForkStore) has one of its own, as another machine would.
	Config string
}

// orDir returns the store a daemon is started on: s if it is set, else
// the data directory dir (a new one if empty). A store with a URL but no
// directory gets a new one, for its audit key: it must still run on its
// PostgreSQL database, not silently on bbolt in dir.
func (s testStore) orDir(t testing.TB, dir string) testStore {
	if s == (testStore{}) {
		s.Dir = dir
	}
	if s.Dir == "" {
		s.Dir = t.TempDir()
	}
	return s
}

// keyFile is the audit signing key: the data directory's by default.
func (s testStore) keyFile() string { return filepath.Join(s.Dir, auditKeyFile) }

// storeFlags name the store, as serve, check and the audit commands take
// it.
func (s testStore) storeFlags() []string {
	if s.URL != "" {
		return []string{"--store", s.URL}
	}
	return []string{"--data", s.Dir}
}

// serveFlags are storeFlags and, on PostgreSQL, the shared key.
func (s testStore) serveFlags() []string {
	if s.URL != "" {
		return append(s.storeFlags(), "--audit-key", s.keyFile())
	}
	return s.storeFlags()
}

// auditFlags are storeFlags and, on PostgreSQL, the key to check with.
func (s testStore) auditFlags() []string { return s.serveFlags() }

func (s testStore) config() daemon.StoreConfig {
	return daemon.StoreConfig{Data: s.Dir, URL: s.URL}
}

// storeKind makes the stores of one backend.
type storeKind struct {
	name string
	make func(t testing.TB) testStore
}

var (
	boltStores = storeKind{"bbolt", func(t testing.TB) testStore { return testStore{Dir: t.TempDir()} }}
	pgStores   = storeKind{"postgres", func(t testing.TB) testStore {
		return testStore{Dir: t.TempDir(), URL: pgtest.Database(t)}
	}}
)

// eachStore runs a test on each backend: one suite, two stores. Without
// a PostgreSQL server its run skips (fails, where one is required).
func eachStore(t *testing.T, test func(t *testing.T, kind storeKind)) {
	for _, kind := range []storeKind{boltStores, pgStores} {
		t.Run(kind.name, func(t *testing.T) {
			if kind.name == "postgres" {
				pgtest.URL(t)
			}
			test(t, kind)
		})
	}
}

// MustStart starts the daemon on a data directory and connects the SDK's
// client to it over stdio. The test's end stops it and checks the database.
func MustStart(t testing.TB) *stdioDaemon {
	t.Helper()
	return mustStartWith(t, daemonConfig{})
}

func mustStartWith(t testing.TB, c daemonConfig) *stdioDaemon {
	t.Helper()
	if c.bin == "" {
		c.bin = binary
	}
	store := c.store.orDir(t, c.dir)
	d := &stdioDaemon{t: t, dir: store.Dir, store: store, stderr: new(logtest.Buffer), wire: new(logtest.Buffer)}
	d.cmd = exec.Command(c.bin, append(append([]string{"serve", "--stdio"}, d.store.serveFlags()...), c.args...)...)
	d.cmd.Env = append(d.store.env(t), c.env...)
	d.cmd.Stderr = d.stderr
	client := sdk.NewClient(&sdk.Implementation{Name: "writerd-e2e", Version: "1"}, c.client)
	if c.connect == 0 {
		c.connect = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.connect)
	defer cancel()
	var err error
	d.session, err = client.Connect(ctx, &sdk.LoggingTransport{
		Transport: &sdk.CommandTransport{Command: d.cmd, TerminateDuration: 10 * time.Second},
		Writer:    d.wire,
	}, nil)
	if err != nil {
		t.Fatalf("connect to writerd: %v\nstderr:\n%s", err, d.stderr)
	}
	t.Cleanup(func() {
		d.Stop()
		if !t.Failed() {
			d.mustBeConsistent()
		}
	})
	return d
}

// Stop closes the session, which closes the daemon's stdin; it exits, and
// the SDK's command transport waits for it. It may be called more than
// once, and while other goroutines still call the daemon: their calls
// then fail, as calls on a closed session do.
func (d *stdioDaemon) Stop() {
	d.stopOnce.Do(func() { d.session.Close() })
}

// Kill ends the daemon with SIGKILL: no shutdown, no final fsync.
func (d *stdioDaemon) Kill() {
	d.cmd.Process.Kill()
	d.Stop()
}

// Call sends tools/call with the argument bytes exactly as given.
func (d *stdioDaemon) Call(tool, args string) *sdk.CallToolResult {
	d.t.Helper()
	res, err := d.call(tool, args)
	if err != nil {
		d.t.Fatalf("%s: %v", tool, err)
	}
	return res
}

func (d *stdioDaemon) call(tool, args string) (*sdk.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return d.session.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: json.RawMessage(args)})
}

// rawResults returns the tools/call results as the daemon sent them, from
// the wire, in order: the bytes that byte-identity is about.
func (d *stdioDaemon) rawResults() []json.RawMessage {
	var out []json.RawMessage
	sc := bufio.NewScanner(strings.NewReader(d.wire.String()))
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "read: ")
		if !ok {
			continue
		}
		var msg struct {
			Result struct {
				StructuredContent json.RawMessage `json:"structuredContent"`
				IsError           bool            `json:"isError"`
			} `json:"result"`
		}
		if json.Unmarshal([]byte(line), &msg) == nil && msg.Result.StructuredContent != nil {
			out = append(out, msg.Result.StructuredContent)
		}
	}
	return out
}

// envelope is the error envelope of a failed call.
type envelope struct {
	Error struct {
		Code      string          `json:"code"`
		Message   string          `json:"message"`
		Status    int             `json:"status"`
		Retry     string          `json:"retry"`
		RequestID string          `json:"request_id"`
		Preview   json.RawMessage `json:"preview"`
	} `json:"error"`
}

// text returns a result's one text block.
func text(t testing.TB, res *sdk.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("result has %d content blocks, want 1", len(res.Content))
	}
	tc, ok := res.Content[0].(*sdk.TextContent)
	if !ok {
		t.Fatalf("content is %T, want text", res.Content[0])
	}
	return tc.Text
}

// mustFail asserts a failed call with the code and returns its envelope.
func mustFail(t testing.TB, res *sdk.CallToolResult, code string) envelope {
	t.Helper()
	if !res.IsError {
		t.Fatalf("call succeeded, want %s: %s", code, text(t, res))
	}
	if res.StructuredContent != nil {
		t.Fatalf("an error result carries structuredContent")
	}
	var e envelope
	if err := json.Unmarshal([]byte(text(t, res)), &e); err != nil {
		t.Fatalf("error text is not the envelope: %v", err)
	}
	if e.Error.Code != code {
		t.Fatalf("code = %s (%s), want %s", e.Error.Code, e.Error.Message, code)
	}
	if e.Error.RequestID == "" || e.Error.RequestID != res.Meta["writerd/request_id"] {
		t.Fatalf("request id %q, _meta %v", e.Error.RequestID, res.Meta)
	}
	return e
}

// mustSucceed asserts a successful call and returns its structured result.
func mustSucceed(t testing.TB, res *sdk.CallToolResult) map[string]any {
	t.Helper()
	if res.IsError {
		t.Fatalf("call failed: %s", text(t, res))
	}
	m, ok := res.StructuredContent.(map[string]any)
	if !ok {
		t.Fatalf("structuredContent is %T", res.StructuredContent)
	}
	var fromText map[string]any
	if err := json.Unmarshal([]byte(text(t, res)), &fromText); err != nil || fmt.Sprint(fromText) != fmt.Sprint(m) {
		t.Fatalf("the text block is not the structured result: %v", err)
	}
	if res.Meta["writerd/request_id"] == nil {
		t.Fatalf("no request id in _meta: %v", res.Meta)
	}
	return m
}

// store is a read-only view of a stopped daemon's store, through the
// interfaces every backend implements.
type store struct {
	t testing.TB
	s daemon.Store
}

// MustOpenStore opens the store of a daemon that no longer runs, waiting
// a little for its process to let go of it.
func MustOpenStore(t testing.TB, ts testStore) *store {
	t.Helper()
	var s daemon.Store
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s, err = daemon.OpenReadOnly(ts.config())
		if !errors.Is(err, daemon.ErrHeld) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("open the store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return &store{t: t, s: s}
}

func (s *store) view(fn func(tx pipeline.Tx[handlers.Store]) error) {
	s.t.Helper()
	if err := s.s.View(context.Background(), fn); err != nil {
		s.t.Fatal(err)
	}
}

// projects returns the number of projects.
func (s *store) projects() int {
	s.t.Helper()
	ps, _, err := storetest.Projects(context.Background(), s.s)
	if err != nil {
		s.t.Fatal(err)
	}
	return len(ps)
}

// records returns the number of records, of every project.
func (s *store) records() int {
	s.t.Helper()
	_, n, err := storetest.Projects(context.Background(), s.s)
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

// keys returns the number of idempotency records, expired or not.
func (s *store) keys() int {
	s.t.Helper()
	n := 0
	s.view(func(tx pipeline.Tx[handlers.Store]) error {
		return tx.Keys().ForEach(func(*idempotency.Record) error { n++; return nil })
	})
	return n
}

func (s *store) events() []*auditlog.Event {
	s.t.Helper()
	evs, err := storetest.Events(context.Background(), s.s)
	if err != nil {
		s.t.Fatal(err)
	}
	return evs
}

func (s *store) eventsFor(key string) []*auditlog.Event {
	var out []*auditlog.Event
	for _, e := range s.events() {
		if e.IdempotencyKey == key {
			out = append(out, e)
		}
	}
	return out
}

func (s *store) record(principal, key string) *idempotency.Record {
	var r *idempotency.Record
	s.view(func(tx pipeline.Tx[handlers.Store]) error {
		var err error
		r, err = tx.Keys().Get(principal, key)
		return err
	})
	return r
}

// mustBeConsistent checks a stopped daemon's store as writerd check
// does: the backend's checks, the pipeline's invariants and the tools'.
func (d *stdioDaemon) mustBeConsistent() {
	d.t.Helper()
	_, _, problems, err := handlers.CheckStore(context.Background(), MustOpenStore(d.t, d.store).s, time.Now())
	if err != nil {
		d.t.Error(err)
	}
	if len(problems) > 0 {
		d.t.Error(errors.Join(problems...))
	}
}
