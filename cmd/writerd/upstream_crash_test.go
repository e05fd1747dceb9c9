package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
)

// crashLeft is what a crash of writerd leaves of one write to an
// upstream, once writerd runs again on the same store and the key is sent
// again: the upstream's executions of the write (its ledger, per upstream
// key and per argument digest), the state get_write_outcome answers, and
// the write's one audit event, its outcome and its upstream.end.
type crashLeft struct {
	executions int
	state      string
	outcome    string
	end        string
}

var (
	keyedLeft = crashLeft{1, pipeline.WriteCompleted, auditlog.OK, string(upstream.EndAnswered)}
	lostLeft  = crashLeft{1, pipeline.WriteUnknown, auditlog.Unknown, pipeline.EndTakenOver}
	neverLeft = crashLeft{0, pipeline.WriteUnknown, auditlog.Unknown, pipeline.EndTakenOver}
)

// crashPoints is the matrix of docs/UPSTREAMS.md's "What a crash leaves":
// each point where writerd dies by SIGKILL during a write to an upstream,
// and what it leaves for an upstream that takes keys and one that does
// not. Every write is settled by the takeover of the writerd that starts
// next, in one event of transport takeover, attempt 2: re-driven under the
// same upstream key where the upstream takes keys (which executes the
// write if it never ran, and otherwise answers the one execution's
// answer again), recorded unknown otherwise. At pending-committed the
// call was never sent, but nothing tells a takeover so: the outcome of a
// write without keys is unknown with no execution, never guessed.
var crashPoints = []struct {
	point string
	// failpoint is the test build's (WRITERD_TEST_FAILPOINT); "" is a
	// kill -9 by the test once the upstream executed the call and holds
	// its answer (during the call).
	failpoint string
	// sent is the upstream's executions when writerd dies.
	sent           int
	keyed, unkeyed crashLeft
}{
	{"pending-committed", pipeline.FailpointPending, 0, keyedLeft, neverLeft},
	{"during-call", "", 1, keyedLeft, lostLeft},
	{"answered", pipeline.FailpointAnswered, 1, keyedLeft, lostLeft},
	{"completing", pipeline.FailpointCompleting, 1, keyedLeft, lostLeft},
}

// The two upstreams of the crash trials: the fake tracker taking keys as
// an argument, and ignoring them.
var crashUpstreams = []struct {
	name     string
	switches upstreamtest.Switches
	config   string // the block's keys lines
	keyed    bool
}{
	{"keys", upstreamtest.Switches{Keys: upstreamtest.KeysArgument, KeyArg: "request_key"}, "keys = \"argument\"\nkey_argument = \"request_key\"", true},
	{"no-keys", upstreamtest.Switches{}, "", false},
}

// crashLease is the pending records' lease on PostgreSQL in the crash
// trials (the test build's WRITERD_TEST_LEASE): a record is taken over
// only past it there, by a sweep every quarter of it.
const crashLease = "1s"

// Ensure each crash point of a write to an upstream (a kill -9 of writerd
// after its pending record commits, during the call, after the upstream
// answered and before the completion commits, and inside the completion)
// leaves what crashPoints says once writerd runs again on the same store
// and the key is sent again: for an upstream that takes keys, exactly one
// execution per upstream key and per argument digest, one ok event, and
// the retry replayed byte for byte as the completion; for one that does
// not, at most one execution and one unknown event that the retry never
// runs again; never two executions; get_write_outcome right at each step
// (running while the call is held, not answered by the dead process,
// running or settled after the restart, settled once the takeover ran);
// writerd audit verify and writerd check pass. On bbolt the restart is
// the release build (the file's lock proves the owner gone: every pending
// record is taken over at start); on PostgreSQL the test build with a
// short lease, past which a sweep takes the record over.
func TestUpstream_CrashPoints(t *testing.T) {
	t.Parallel() // its own processes and directories; mostly waiting on them
	if testing.Short() {
		t.Skip("kills and restarts the daemon")
	}
	pins := map[string]*fakeUpstream{}
	for _, up := range crashUpstreams {
		pins[up.name] = newFakeUpstream(t, up.switches)
	}
	eachStore(t, func(t *testing.T, kind storeKind) {
		for _, cp := range crashPoints {
			for _, up := range crashUpstreams {
				want := cp.unkeyed
				if up.keyed {
					want = cp.keyed
				}
				t.Run(cp.point+"/"+up.name, func(t *testing.T) {
					f := *pins[up.name]
					f.ledger = filepath.Join(t.TempDir(), "ledger.jsonl")
					f.argv = upstreamtest.StdioCommand(f.bin, upstreamtest.Options{Ledger: f.ledger, Switches: up.switches})
					testCrashPoint(t, kind, &f, up.switches, up.config, cp.failpoint, cp.sent, want)
				})
			}
		}
	})
}

func testCrashPoint(t *testing.T, kind storeKind, f *fakeUpstream, sw upstreamtest.Switches, keys, failpoint string, sent int, want crashLeft) {
	ts := kind.make(t)
	file := f.file(t, keys)
	env := []string{"WRITERD_TEST_TRACKER_SECRET=" + upstreamSecret}
	if kind.name == pgStores.name {
		env = append(env, leaseEnv+"="+crashLease)
	}
	if failpoint == "" {
		// During the call: the fake executes it and never answers.
		held := sw
		held.Hang = upstreamtest.HangAfter
		if err := upstreamtest.SetSwitches(f.ledger, held); err != nil {
			t.Fatal(err)
		}
	}
	first := env
	if failpoint != "" {
		first = append(first[:len(first):len(first)], failpointEnv+"="+failpoint)
	}
	d := mustStartWith(t, daemonConfig{bin: testBinary, store: ts, args: []string{"--upstreams", file}, env: first})

	const key = "crash-key-0001"
	args := `{"idempotency_key":"` + key + `","title":"Printer jam","priority":"high"}`
	lost := d.callLost("tracker_create_ticket", args)
	if failpoint == "" {
		waitLedger(t, f, 1)
		// The call is held at the upstream: it is running, attempt 1.
		out := outcomeOf(t, d, key)
		if out.State != pipeline.WriteRunning || out.Attempt != 1 || out.Since == nil {
			t.Fatalf("get_write_outcome while the call is held = %+v, want running, attempt 1", out)
		}
		d.cmd.Process.Kill()
	}
	// The call's answer is lost with the process, and the dead one
	// answers nothing more.
	select {
	case err := <-lost:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call was not ended by the crash within 30s")
	}
	if _, err := d.callWithin(5*time.Second, pipeline.OutcomeToolName, `{"key":"`+key+`"}`); err == nil {
		t.Fatal("get_write_outcome was answered by a writerd that should be dead")
	}
	d.Kill()

	// What the crash left: the pending record of attempt 1, with its
	// upstream key and its arguments, and no event.
	s := MustOpenStore(t, ts)
	rec := s.record("local", key)
	if rec == nil || rec.State != idempotency.Pending || rec.Attempt != 1 || len(rec.UpstreamKey) != 43 || len(rec.Args) == 0 {
		t.Fatalf("after the crash the key's record is %+v, want pending, attempt 1, with its upstream key and arguments", rec)
	}
	upKey := rec.UpstreamKey
	if evs := s.eventsFor(key); len(evs) != 0 {
		t.Fatalf("after the crash the key has %d events, want none", len(evs))
	}
	s.s.Close()
	if n := len(f.entries(t)); n != sent {
		t.Fatalf("the upstream executed the write %d times before the crash, want %d", n, sent)
	}
	if err := upstreamtest.ClearSwitches(f.ledger); err != nil {
		t.Fatal(err)
	}

	// writerd again on the same store: the release build on bbolt, the
	// test build's short lease on PostgreSQL. The takeover settles the
	// write; until it has, the write is running.
	again := daemonConfig{store: ts, args: []string{"--upstreams", file}, env: env}
	if kind.name == pgStores.name {
		again.bin = testBinary
	}
	d2 := mustStartWith(t, again)
	var out *pipeline.WriteOutcome
	seen := []string{}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out = outcomeOf(t, d2, key)
		if len(seen) == 0 || seen[len(seen)-1] != out.State {
			seen = append(seen, out.State)
		}
		if out.State != pipeline.WriteRunning {
			break
		}
		if out.Attempt < 1 || out.Attempt > 2 {
			t.Fatalf("get_write_outcome while the takeover runs = %+v, want running, attempt 1 or 2", out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the write is still running 20s after the restart: %+v\nstderr:\n%s", out, d2.stderr)
		}
	}
	if out.State != want.state || out.AuditID == "" {
		t.Fatalf("get_write_outcome after the restart = %+v, want %s with its audit event\nstderr:\n%s", out, want.state, d2.stderr)
	}
	settled := lastRaw(t, d2)
	t.Logf("get_write_outcome after the restart: %s", strings.Join(seen, ", then "))

	// The retry of the key: replayed, or unknown again; never run again.
	retry := d2.Call("tracker_create_ticket", args)
	if want.state == pipeline.WriteCompleted {
		mustSucceed(t, retry)
		var o struct {
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(settled, &o); err != nil {
			t.Fatal(err)
		}
		if replayed, _ := retry.Meta["writerd/replayed"].(bool); !replayed || retry.Meta["writerd/audit_id"] != out.AuditID {
			t.Errorf("the retry's _meta = %v, want replayed, audit id %s", retry.Meta, out.AuditID)
		}
		if got := lastRaw(t, d2); !bytes.Equal(got, o.Result) {
			t.Errorf("the retry answered %s, the completion %s: want byte for byte the same", got, o.Result)
		}
	} else {
		e := mustFail(t, retry, string(pipeline.UnknownOutcome))
		if e.Error.Retry != "never" || !strings.Contains(e.Error.Message, out.AuditID) {
			t.Errorf("the retry's error %+v: want retry never, naming audit event %s", e.Error, out.AuditID)
		}
	}
	if again := outcomeOf(t, d2, key); again.State != out.State || again.AuditID != out.AuditID {
		t.Errorf("get_write_outcome after the retry = %+v, want %+v", again, out)
	}
	d2.Stop()

	// The upstream's ledger: never two executions.
	es := f.entries(t)
	if len(es) != want.executions {
		t.Fatalf("the upstream executed the write %d times, want %d", len(es), want.executions)
	}
	for digest, n := range upstreamtest.ByDigest(es) {
		if n > 1 {
			t.Errorf("arguments %s executed %d times", digest, n)
		}
	}
	for _, e := range es {
		if wantKey := map[bool]string{true: upKey, false: ""}[want.state == pipeline.WriteCompleted]; e.UpstreamKey != wantKey {
			t.Errorf("the execution carried upstream key %q, want %q", e.UpstreamKey, wantKey)
		}
	}

	// The store: the key settled, its one event, by the takeover.
	s = MustOpenStore(t, ts)
	evs := s.eventsFor(key)
	if len(evs) != 1 {
		t.Fatalf("the key has %d events, want 1: %+v", len(evs), evs)
	}
	ev := evs[0]
	if ev.ID != out.AuditID || ev.Outcome != want.outcome || ev.Transport != pipeline.TransportTakeover ||
		ev.Upstream == nil || ev.Upstream.Name != "tracker" || ev.Upstream.Tool != "create_ticket" ||
		ev.Upstream.Attempt != 2 || ev.Upstream.End != want.end || ev.Format != auditlog.Format {
		t.Errorf("the event %+v (upstream %+v): want %s by the takeover, attempt 2, end %s", ev, ev.Upstream, want.outcome, want.end)
	}
	rec = s.record("local", key)
	if rec == nil || rec.Attempt != 2 || rec.UpstreamKey != upKey || len(rec.Args) != 0 || rec.AuditID != ev.ID {
		t.Errorf("the settled record %+v: want attempt 2, its upstream key, no arguments, its event", rec)
	}
	if want.state == pipeline.WriteCompleted {
		// The completion is the one execution's answer.
		var answer struct {
			StructuredContent json.RawMessage `json:"structuredContent"`
		}
		if err := json.Unmarshal(es[0].Result, &answer); err != nil {
			t.Fatal(err)
		}
		var a, b any
		if json.Unmarshal(answer.StructuredContent, &a) != nil || json.Unmarshal(rec.Result, &b) != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("the completion %s is not the execution's answer %s", rec.Result, answer.StructuredContent)
		}
	}
	s.s.Close()

	mustRunOK(t, runConfig{env: ts.env(t)}, append([]string{"audit", "verify"}, ts.auditFlags()...)...)
	mustRunOK(t, runConfig{env: ts.env(t)}, append([]string{"check"}, ts.serveFlags()...)...)
}

// The test build's environment (testtools.go, not compiled into the
// tests).
const (
	failpointEnv = "WRITERD_TEST_FAILPOINT"
	leaseEnv     = "WRITERD_TEST_LEASE"
)

// callLost sends a call that a crash of d must cut off: its channel
// gets nil when the call ends unanswered, an error if it was answered.
func (d *stdioDaemon) callLost(tool, args string) <-chan error {
	lost := make(chan error, 1)
	go func() {
		res, err := d.call(tool, args)
		if err == nil {
			lost <- fmt.Errorf("the call was answered: %v", res)
			return
		}
		lost <- nil
	}()
	return lost
}

// waitLedger waits until the fake's ledger holds n executions.
func waitLedger(t *testing.T, f *fakeUpstream, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if len(f.entries(t)) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream's ledger holds %d executions after 20s, want %d", len(f.entries(t)), n)
		}
	}
}

// outcomeOf asks get_write_outcome of the key.
func outcomeOf(t *testing.T, d *stdioDaemon, key string) *pipeline.WriteOutcome {
	t.Helper()
	res, err := d.callWithin(10*time.Second, pipeline.OutcomeToolName, `{"key":"`+key+`"}`)
	if err != nil {
		t.Fatalf("get_write_outcome: %v\nstderr:\n%s", err, d.stderr)
	}
	mustSucceed(t, res)
	var out pipeline.WriteOutcome
	if err := json.Unmarshal(lastRaw(t, d), &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// callWithin is call with a timeout of its own.
func (d *stdioDaemon) callWithin(within time.Duration, tool, args string) (*sdk.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	return d.session.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: json.RawMessage(args)})
}

// lastRaw is the last structured result the daemon sent, as its bytes.
func lastRaw(t *testing.T, d *stdioDaemon) json.RawMessage {
	t.Helper()
	raw := d.rawResults()
	if len(raw) == 0 {
		t.Fatal("no structured result on the wire")
	}
	return raw[len(raw)-1]
}

// Ensure docs/UPSTREAMS.md's table "What a crash leaves" says what
// crashPoints asserts: one row per crash point, in its order, each
// column of an upstream with and without keys giving the executions, the
// state get_write_outcome answers and the event's outcome.
func TestUpstream_CrashTableDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "UPSTREAMS.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n### What a crash leaves\n")
	if !ok {
		t.Fatal(`docs/UPSTREAMS.md has no section "What a crash leaves"`)
	}
	section, _, _ = strings.Cut(section, "\n#")
	var rows [][]string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| writerd dies") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 4 {
			t.Fatalf("row %q: want 4 cells", line)
		}
		rows = append(rows, cells)
	}
	if len(rows) != len(crashPoints) {
		t.Fatalf("the table has %d rows, the test %d crash points", len(rows), len(crashPoints))
	}
	says := func(cell string, l crashLeft) bool {
		return strings.HasPrefix(cell, fmt.Sprintf("%d", l.executions)) &&
			strings.Contains(cell, "`"+l.state+"`") && strings.Contains(cell, "`"+l.outcome+"`") &&
			(l.end == string(upstream.EndAnswered) || strings.Contains(cell, "`"+l.end+"`"))
	}
	for i, cp := range crashPoints {
		if ran := map[bool]string{true: "yes", false: "no"}[cp.sent > 0]; rows[i][1] != ran {
			t.Errorf("row %d (%s): the upstream has run it %q, want %q", i+1, cp.point, rows[i][1], ran)
		}
		if !says(rows[i][2], cp.keyed) {
			t.Errorf("row %d (%s): with keys %q, want %+v", i+1, cp.point, rows[i][2], cp.keyed)
		}
		if !says(rows[i][3], cp.unkeyed) {
			t.Errorf("row %d (%s): without keys %q, want %+v", i+1, cp.point, rows[i][3], cp.unkeyed)
		}
	}
}
