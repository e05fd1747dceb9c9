package main

// Trials of several replicas on one PostgreSQL database: real daemons on
// loopback ports, real agents, real kills and stops, a real server
// restarted and its backends terminated. Each runs a short version in
// every go test but under -short, where they skip; with
// WRITERD_TRIALS=long (CI sets it) the long one.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/postgres/pgtest"
)

// trialsEnv set to "long" runs the long versions of the trials.
const trialsEnv = "WRITERD_TRIALS"

// trialSize is short, or long under WRITERD_TRIALS=long.
func trialSize(short, long int) int {
	if os.Getenv(trialsEnv) == "long" {
		return long
	}
	return short
}

// named returns s with its URL naming the replica in pg_stat_activity.
func (s testStore) named(name string) testStore {
	u, err := url.Parse(s.URL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		s.URL += " application_name=" + name
		return s
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	s.URL = u.String()
	return s
}

// mustReplicaStore returns a fresh database for replicas, and a tokens
// file with the agent's token, the one every trial's calls are made as,
// and the auditor's, the one checkpoints are read with.
func mustReplicaStore(t *testing.T) (testStore, auditTokens) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs replicas under load")
	}
	return pgStores.make(t), mustAuditTokens(t)
}

// answer is what an agent got for one call.
type answer struct {
	err      error // the call did not reach an answer: the replica is gone
	status   int
	code     string // the error's code, if it failed
	retry    string // the error's retry hint
	replayed bool
	id       string // the project's id, if it succeeded
	auditID  string // its audit event's id (the direct API's Writerd-Audit-Id)
	body     string // the body, if it was not JSON (code notJSON)
}

// notJSON is the code of an answer whose body is not JSON: a reply came,
// so the replica is not gone, and it is no answer any call may get; it is
// not retried but reported.
const notJSON = "NOT_JSON"

func (a answer) ok() bool { return a.err == nil && a.code == "" && a.id != "" }

// retryable reports an answer after which the same key is sent again:
// the replica is gone, busy with the key, or its store unavailable with
// the hint to retry the same key.
func (a answer) retryable() bool {
	return a.err != nil || a.code == "IDEMPOTENCY_KEY_IN_USE" || a.code == "UNAVAILABLE" && a.retry == "same_key"
}

func (a answer) String() string {
	switch {
	case a.err != nil:
		return "no answer: " + a.err.Error()
	case a.code == notJSON:
		return fmt.Sprintf("%d %s: %q", a.status, a.code, a.body)
	case a.code != "":
		return fmt.Sprintf("%d %s (retry %s)", a.status, a.code, a.retry)
	}
	return fmt.Sprintf("%d %s replayed=%v", a.status, a.id, a.replayed)
}

// agentClient calls replicas as agents do, over many connections at once.
var agentClient = &http.Client{
	Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true},
	Timeout:   2 * time.Minute,
}

// createProject calls create_project over the direct API.
func createProject(d *httpDaemon, token, key string) answer {
	req, err := http.NewRequest("POST", d.url+"/v1/tools/create_project", strings.NewReader(`{"name":"`+key+`"}`))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	resp, err := agentClient.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{err: err}
	}
	a := answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", auditID: resp.Header.Get("Writerd-Audit-Id")}
	return a.parse(b)
}

// createProjectMCP calls create_project over an MCP session.
func createProjectMCP(s *sdk.ClientSession, key string) answer {
	res, err := s.CallTool(context.Background(), &sdk.CallToolParams{
		Name: "create_project", Arguments: json.RawMessage(`{"idempotency_key":"` + key + `","name":"` + key + `"}`)})
	if err != nil {
		return answer{err: err}
	}
	if len(res.Content) != 1 {
		return answer{err: fmt.Errorf("%d content blocks", len(res.Content))}
	}
	tc, ok := res.Content[0].(*sdk.TextContent)
	if !ok {
		return answer{err: fmt.Errorf("content %T", res.Content[0])}
	}
	a := answer{status: 200, replayed: res.Meta["writerd/replayed"] == true}
	return a.parse([]byte(tc.Text))
}

func (a answer) parse(b []byte) answer {
	var body struct {
		envelope
		Project struct {
			ID string `json:"id"`
		} `json:"project"`
	}
	if err := json.Unmarshal(b, &body.envelope); err != nil {
		// Not an error of the call: the replica answered, with its status
		// kept, and what it said must fail the trial, not be retried.
		a.code, a.body = notJSON, string(b)
		return a
	}
	json.Unmarshal(b, &body)
	a.code, a.retry, a.id = body.Error.Code, body.Error.Retry, body.Project.ID
	if a.code != "" && body.Error.Status != 0 {
		a.status = body.Error.Status
	}
	return a
}

// acks records the project each key's acknowledged write made.
type acks struct {
	mu   sync.Mutex
	ids  map[string]string
	errs []string
}

func newAcks() *acks { return &acks{ids: map[string]string{}} }

// add records an acknowledgement; the same key acknowledged with another
// project is an error.
func (k *acks) add(key string, a answer) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if id, ok := k.ids[key]; ok && id != a.id {
		k.errs = append(k.errs, fmt.Sprintf("key %s acknowledged as %s and as %s", key, id, a.id))
	}
	k.ids[key] = a.id
}

func (k *acks) fail(format string, args ...any) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.errs = append(k.errs, fmt.Sprintf(format, args...))
}

func (k *acks) n() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.ids)
}

// failures returns a copy of the errors so far: agents may still add to
// them.
func (k *acks) failures() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.errs)
}

// acknowledged returns a copy of the acknowledged keys' projects: agents
// may still add to them.
func (k *acks) acknowledged() map[string]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.ids)
}

// mustBeExactlyOnce checks the store of stopped replicas: every key has
// at most one event and an executed write exactly one; every acknowledged
// write is there once, with its event; every project has its event and
// every event its project; and writerd check and audit verify pass. It
// returns the number of events.
func mustBeExactlyOnce(t *testing.T, s testStore, k *acks) int {
	t.Helper()
	for _, e := range k.failures() {
		t.Error(e)
	}
	st := MustOpenStore(t, s)
	events := st.events()
	byKey := map[string][]*auditlog.Event{}
	for _, e := range events {
		byKey[e.IdempotencyKey] = append(byKey[e.IdempotencyKey], e)
	}
	for key, es := range byKey {
		if len(es) != 1 {
			t.Errorf("key %s has %d events, want 1", key, len(es))
		}
		if es[0].Outcome != auditlog.OK {
			t.Errorf("key %s: a failed event %+v", key, es[0])
		}
	}
	for key, id := range k.acknowledged() {
		if es := byKey[key]; len(es) != 1 || es[0].Targets[0].ID != id {
			t.Errorf("acknowledged write %s (project %s) has events %v", key, id, es)
		}
	}
	if n := st.projects(); n != len(events) {
		t.Errorf("%d projects, %d events", n, len(events))
	}
	st.s.Close()
	mustCheck(t, s)
	mustVerifyPasses(t, s.auditFlags()...)
	return len(events)
}

// Ensure two replicas on one database, each key sent to both at once by
// 64 agents (half over the direct API, half over MCP), execute each key
// once: both answers succeed with the same project, one of them a replay;
// one event per key, and check and verify pass.
func TestReplicas_EveryKeyToBoth(t *testing.T) {
	s, tok := mustReplicaStore(t)
	const agents = 64
	keys := trialSize(4, 40)
	a := MustStartHTTP(t, httpConfig{store: s.named("writerd-a"), tokens: tok.file})
	b := MustStartHTTP(t, httpConfig{store: s.named("writerd-b"), tokens: tok.file})
	// The odd agents' MCP sessions, one to each replica, opened here: MCP
	// fails the test when it cannot connect, which only the test's own
	// goroutine may do.
	sessions := make([][2]*sdk.ClientSession, agents)
	for i := 1; i < agents; i += 2 {
		sessions[i] = [2]*sdk.ClientSession{a.MCP(tok.agent), b.MCP(tok.agent)}
	}
	k := newAcks()
	var executedOn [2]atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range agents {
		wg.Go(func() {
			call := func(d *httpDaemon, key string) answer { return createProject(d, tok.agent, key) }
			if i%2 == 1 {
				sa, sb := sessions[i][0], sessions[i][1]
				call = func(d *httpDaemon, key string) answer {
					if d == a {
						return createProjectMCP(sa, key)
					}
					return createProjectMCP(sb, key)
				}
			}
			for j := range keys {
				key := fmt.Sprintf("both-%02d-%04d", i, j)
				var got [2]answer
				var both sync.WaitGroup
				for r, d := range []*httpDaemon{a, b} {
					both.Go(func() { got[r] = call(d, key) })
				}
				both.Wait()
				if !got[0].ok() || !got[1].ok() || got[0].id != got[1].id || got[0].replayed == got[1].replayed {
					k.fail("key %s: replica a answered %v, b %v; want the same project, once replayed", key, got[0], got[1])
					continue
				}
				k.add(key, got[0])
				if got[0].replayed {
					executedOn[1].Add(1)
				} else {
					executedOn[0].Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	mustStop(t, a, b)
	n := mustBeExactlyOnce(t, s, k)
	if n != agents*keys || k.n() != agents*keys {
		t.Errorf("%d events, %d keys acknowledged, want %d", n, k.n(), agents*keys)
	}
	t.Logf("%d keys, each to both replicas at once, in %v: executed %d on a, %d on b; %d events",
		agents*keys, took.Round(time.Millisecond), executedOn[0].Load(), executedOn[1].Load(), n)
}

// load is agents writing to replicas over the direct API, each key sent
// again, to the same or the other replica, until it is acknowledged.
type load struct {
	t     *testing.T
	token string
	k     *acks
	pick  func(agent, attempt int) *httpDaemon // the replica of a call
	ok    func(a answer) bool                  // an answer a retried call may get
	stop  atomic.Bool
	wg    sync.WaitGroup
	seen  sync.Map   // answer kinds, counted: "UNAVAILABLE same_key" → *atomic.Int64
	timed *callTimes // if set, gets each call's time

	mu       sync.Mutex
	inFlight map[string]struct{} // keys sent, not yet answered
	ackedBy  map[*httpDaemon]int // writes acknowledged, by the replica that answered
}

func (l *load) count(kind string) {
	v, _ := l.seen.LoadOrStore(kind, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// counts returns the answer kinds seen, as "kind n" lines.
func (l *load) counts() string {
	var lines []string
	l.seen.Range(func(k, v any) bool {
		lines = append(lines, fmt.Sprintf("%s: %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	slices.Sort(lines)
	return strings.Join(lines, ", ")
}

// run starts the agents. Their end is also the test's cleanup, before the
// replicas' (registered earlier, so run later): a test that ends early, on
// t.Fatal, skips its own call of end, and the agents would otherwise go on
// retrying against stopped replicas.
func (l *load) run(agents int, prefix string) {
	l.inFlight = map[string]struct{}{}
	l.ackedBy = map[*httpDaemon]int{}
	l.t.Cleanup(l.end)
	for i := range agents {
		l.wg.Go(func() {
			for j := 0; !l.stop.Load(); j++ {
				key := fmt.Sprintf("%s-%02d-%06d", prefix, i, j)
				for attempt := 0; ; attempt++ {
					if l.stop.Load() {
						return // the test is over: the key may stay unacknowledged
					}
					d := l.pick(i, attempt)
					l.mu.Lock()
					l.inFlight[key] = struct{}{}
					l.mu.Unlock()
					began := time.Now()
					a := createProject(d, l.token, key)
					if l.timed != nil {
						l.timed.add(began, time.Since(began))
					}
					l.mu.Lock()
					delete(l.inFlight, key)
					if a.ok() {
						l.ackedBy[d]++
					}
					l.mu.Unlock()
					switch {
					case a.ok():
						l.count("ok")
						if a.replayed {
							l.count("ok, replayed")
						}
						l.k.add(key, a)
					case a.retryable() && (l.ok == nil || l.ok(a)):
						if a.err != nil {
							l.count("no answer")
						} else {
							l.count(a.code + " " + a.retry)
						}
						if attempt > 2000 {
							l.k.fail("key %s: still %v after %d attempts", key, a, attempt)
							return
						}
						time.Sleep(time.Duration(min(attempt, 20)) * 5 * time.Millisecond)
						continue
					default:
						l.k.fail("key %s on %s: %v", key, d.url, a)
						return
					}
					break
				}
			}
		})
	}
}

// pending returns the keys sent and not yet answered.
func (l *load) pending() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Collect(maps.Keys(l.inFlight))
}

// waitFor waits until n more writes are acknowledged.
func (l *load) waitFor(n int, within time.Duration) {
	l.t.Helper()
	l.waitUntil("writes", l.k.n, n, within)
}

// waitForOn waits until the replica d, called name, acknowledges n more
// writes: those of the agents l.pick sends to it.
func (l *load) waitForOn(d *httpDaemon, name string, n int, within time.Duration) {
	l.t.Helper()
	l.waitUntil("writes on "+name, func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.ackedBy[d]
	}, n, within)
}

// waitUntil waits until count, of what, grows by n.
func (l *load) waitUntil(what string, count func() int, n int, within time.Duration) {
	l.t.Helper()
	from := count()
	for deadline := time.Now().Add(within); count() < from+n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			l.t.Fatalf("%d %s acknowledged, %d of them in %v, want %d more (answers: %s; %v)",
				count(), what, count()-from, within, n, l.counts(), l.k.failures())
		}
	}
}

// end stops the agents and waits for them. It may be called more than
// once: the test calls it, and run's cleanup again.
func (l *load) end() {
	l.stop.Store(true)
	l.wg.Wait()
}

// mustStop stops each daemon with SIGTERM and fails the test unless it
// exits 0: whatever a trial did to the others or to the server, a
// replica still shuts down cleanly.
func mustStop(t *testing.T, ds ...*httpDaemon) {
	t.Helper()
	for _, d := range ds {
		if code := d.Stop(); code != 0 {
			t.Errorf("the replica at %s exited %d after SIGTERM:\n%s", d.url, code, d.stderr)
		}
	}
}

// Kill ends the daemon with SIGKILL and waits for it.
func (d *httpDaemon) Kill() {
	d.once.Do(func() {
		d.cmd.Process.Kill()
		d.cmd.Wait()
		d.code = -1
	})
}

// logSize returns the size of the store's log, read beside the replicas.
func logSize(t *testing.T, s testStore) uint64 {
	t.Helper()
	st := MustOpenStore(t, s)
	defer st.s.Close()
	var size uint64
	err := pipeline.AuditStorage(st.s).View(context.Background(), func(r auditlog.Reader) (err error) {
		size, err = r.Size()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return size
}

// Ensure a replica killed with SIGKILL mid-batch under load, again and
// again, loses nothing and doubles nothing: every key it had not answered
// is retried on the other replica and runs once; the audit sequence has
// no gap; and the survivor, the victim having been the signer, signs a
// checkpoint covering every write committed by the kill within seconds.
func TestReplicas_KillMidBatch(t *testing.T) {
	s, tok := mustReplicaStore(t)
	rounds := trialSize(3, 20)
	args := []string{"--checkpoint-interval", "100ms"}
	names := [2]string{"writerd-a", "writerd-b"}
	start := func(r int) *httpDaemon {
		return MustStartHTTP(t, httpConfig{store: s.named(names[r]), tokens: tok.file, args: args})
	}
	var replicas [2]*httpDaemon
	var mu sync.Mutex
	replicas[0] = start(0)
	// The first replica signs: it takes the lead with its first checkpoint.
	firstWrite := createProject(replicas[0], tok.agent, "kill-first")
	if !firstWrite.ok() {
		t.Fatalf("the first write: %v", firstWrite)
	}
	mustWaitCheckpoint(t, replicas[0], tok.auditor, 1, 10*time.Second)
	replicas[1] = start(1)
	signer := 0

	k := newAcks()
	l := &load{t: t, token: tok.agent, k: k}
	// Three in four agents write to the signer, the rest to the other;
	// a call that gets no answer goes to the other replica.
	l.pick = func(agent, attempt int) *httpDaemon {
		mu.Lock()
		defer mu.Unlock()
		r := signer
		if agent%4 == 3 {
			r = 1 - signer
		}
		if attempt > 0 {
			r = (r + attempt) % 2
		}
		return replicas[r]
	}
	l.run(16, "kill")
	var moves []time.Duration
	for round := range rounds {
		l.waitFor(50, 30*time.Second)
		mu.Lock()
		victim := replicas[signer]
		mu.Unlock()
		victim.Kill()
		killed := time.Now()
		mu.Lock()
		signer = 1 - signer
		survivor := replicas[signer]
		mu.Unlock()
		// The survivor takes the lead and signs, within seconds, a
		// checkpoint covering the log as it was at the kill: its size read
		// right after. Only that is timed.
		mustWaitCheckpoint(t, survivor, tok.auditor, logSize(t, s), 15*time.Second)
		moves = append(moves, time.Since(killed))
		// The keys the victim had not answered are retried on the
		// survivor, and the writes go on.
		l.waitFor(20, 30*time.Second)
		again := start(1 - signer)
		mu.Lock()
		replicas[1-signer] = again
		mu.Unlock()
		t.Logf("round %d: killed %s; %d writes acknowledged so far", round+1, names[1-signer], k.n())
	}
	l.waitFor(20, 30*time.Second)
	l.end()
	mustStop(t, replicas[:]...) // the live ones: each killed one was replaced
	k.add("kill-first", firstWrite)
	n := mustBeExactlyOnce(t, s, k)
	slices.Sort(moves)
	t.Logf("%d kills, %d writes acknowledged, %d events; the survivor signed a checkpoint covering the log as of the kill %v to %v after it (median %v); answers: %s",
		rounds, k.n(), n, moves[0].Round(time.Millisecond), moves[len(moves)-1].Round(time.Millisecond), moves[len(moves)/2].Round(time.Millisecond), l.counts())
}

// heldClaims returns how many transaction-scoped advisory locks (claims)
// the named replica's transactions hold, idle, as a stopped process
// leaves them: in the database of url only, as the cluster may hold other
// tests' databases (and their replicas, of the same names).
func heldClaims(t *testing.T, url, name string) int {
	t.Helper()
	return int(pgtest.Value[int64](t, url, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1 AND a.state = 'idle in transaction'
		AND a.datname = current_database()`, name))
}

// Ensure a replica stopped with SIGSTOP while it holds claims lets no key
// run twice, and holds up the other's answers on those keys by no more
// than the other's --key-wait: each key the stopped replica had not
// answered, sent to the other, is either written there or answered
// IDEMPOTENCY_KEY_IN_USE within --key-wait (and 2s of slack), and at least
// one is in use. The other's writes are not held to --key-wait, and the
// trial does not time them: they may wait for the log's head, which the
// stopped replica's transaction may hold until PostgreSQL ends it
// (idle_in_transaction_session_timeout, 10s by default). The other
// serves each key that was in use within 30s, once that transaction is
// ended; resumed, the stopped replica acknowledges writes again; and the
// store holds every acknowledged write once and no key twice.
func TestReplicas_StoppedReplica(t *testing.T) {
	s, tok := mustReplicaStore(t)
	const keyWait = time.Second
	a := MustStartHTTP(t, httpConfig{store: s.named("writerd-a"), tokens: tok.file})
	b := MustStartHTTP(t, httpConfig{store: s.named("writerd-b"), tokens: tok.file, args: []string{"--key-wait", keyWait.String()}})
	k := newAcks()
	l := &load{t: t, token: tok.agent, k: k, pick: func(int, int) *httpDaemon { return a }}
	l.run(32, "stop")
	// Should the test end early: registered after the load's end, so run
	// before it (agents waiting on a stopped replica would hold it up) and
	// before the replica's stop.
	t.Cleanup(func() { a.cmd.Process.Signal(syscall.SIGCONT) })
	l.waitFor(100, 30*time.Second)

	// Stop a while it holds claims: a moment its pending transactions hold
	// advisory locks.
	var held int
	for try := 0; ; try++ {
		a.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(50 * time.Millisecond)
		if held = heldClaims(t, s.URL, "writerd-a"); held > 0 {
			break
		}
		if try == 100 {
			a.cmd.Process.Signal(syscall.SIGCONT)
			t.Fatal("writerd-a never held a claim when stopped")
		}
		a.cmd.Process.Signal(syscall.SIGCONT)
		time.Sleep(time.Duration(try%7) * 3 * time.Millisecond)
	}
	stopped := time.Now()
	pending := l.pending()

	// The other replica, for each key the stopped one had not answered.
	type first struct {
		a    answer
		took time.Duration
	}
	firsts := make([]first, len(pending))
	var wg sync.WaitGroup
	for i, key := range pending {
		wg.Go(func() {
			start := time.Now()
			firsts[i] = first{createProject(b, tok.agent, key), time.Since(start)}
		})
	}
	wg.Wait()
	var inUse int
	var slowest time.Duration
	for i, f := range firsts {
		switch {
		case f.a.code == "IDEMPOTENCY_KEY_IN_USE":
			inUse++
			slowest = max(slowest, f.took)
			if f.took > keyWait+2*time.Second {
				t.Errorf("key %s: IDEMPOTENCY_KEY_IN_USE after %v, --key-wait %v", pending[i], f.took, keyWait)
			}
		case f.a.ok():
			k.add(pending[i], f.a)
		default:
			t.Errorf("key %s on the other replica: %v", pending[i], f.a)
		}
	}
	if inUse == 0 {
		t.Fatalf("none of %d pending keys was in use on the other replica, with %d claims held: %v", len(pending), held, firsts)
	}
	// Then it serves them, once PostgreSQL ends the stuck transaction.
	var served time.Duration
	for i, f := range firsts {
		if f.a.code != "IDEMPOTENCY_KEY_IN_USE" {
			continue
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			got := createProject(b, tok.agent, pending[i])
			if got.ok() {
				k.add(pending[i], got)
				served = max(served, time.Since(stopped))
				break
			}
			if got.code != "IDEMPOTENCY_KEY_IN_USE" || time.Now().After(deadline) {
				t.Fatalf("key %s on the other replica, the first stopped: %v", pending[i], got)
			}
		}
	}
	// Resumed, the first answers its pending calls (UNAVAILABLE same_key
	// where its transaction was ended, which the load retries there: a
	// replay) and writes again.
	a.cmd.Process.Signal(syscall.SIGCONT)
	l.waitFor(100, 30*time.Second)
	l.end()
	mustStop(t, a, b)
	n := mustBeExactlyOnce(t, s, k)
	t.Logf("stopped with %d claims held and %d calls pending: %d answered IDEMPOTENCY_KEY_IN_USE within %v (--key-wait %v), all served %v after the stop; %d events; answers on the stopped replica: %s",
		held, len(pending), inUse, slowest.Round(time.Millisecond), keyWait, served.Round(time.Millisecond), n, l.counts())
}

// Ensure PostgreSQL restarted under load (pg_ctl restart -m fast), and a
// replica's connections terminated (pg_terminate_backend), cost no write
// and double none: every answer is a success or UNAVAILABLE with retry
// same_key; writes resume without restarting writerd, on writerd-a itself
// once its connections are terminated; every acknowledged write is there
// once.
func TestReplicas_ServerRestartAndTerminate(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts PostgreSQL under load")
	}
	cluster := pgtest.StartCluster(t, pgtest.Options{})
	s := testStore{Dir: t.TempDir(), URL: pgtest.EmptyOn(t, cluster.URL("postgres"))}
	tok := mustAuditTokens(t)
	rounds := trialSize(1, 5)
	a := MustStartHTTP(t, httpConfig{store: s.named("writerd-a"), tokens: tok.file})
	b := MustStartHTTP(t, httpConfig{store: s.named("writerd-b"), tokens: tok.file})
	k := newAcks()
	l := &load{t: t, token: tok.agent, k: k,
		pick: func(agent, _ int) *httpDaemon { return []*httpDaemon{a, b}[agent%2] },
		ok:   func(a answer) bool { return a.err == nil && a.code == "UNAVAILABLE" && a.retry == "same_key" }}
	l.run(16, "restart")
	server := cluster.URL("postgres")
	for round := range rounds {
		l.waitFor(100, 30*time.Second)
		if err := cluster.Restart(); err != nil {
			t.Fatal(err)
		}
		l.waitFor(100, 60*time.Second)
		restarted := l.counts()
		// The cluster is the test's own: only writerd-a's backends bear
		// that name. pg_terminate_backend goes in the aggregate's FILTER,
		// which only the rows WHERE keeps reach: beside application_name
		// in WHERE, the planner may (and PostgreSQL 15 does) call it first,
		// on every backend, this one included.
		terminated := pgtest.Value[int64](t, server, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
			FROM pg_stat_activity WHERE application_name = 'writerd-a'`)
		if terminated == 0 {
			t.Fatal("pg_terminate_backend terminated none of writerd-a's connections")
		}
		// Writes resume on writerd-a itself, not only on writerd-b: its
		// agents (the even ones) are answered again.
		l.waitForOn(a, "writerd-a", 100, 60*time.Second)
		t.Logf("round %d: restarted the server (answers so far: %s), terminated writerd-a's %d connections (answers so far: %s); %d writes acknowledged",
			round+1, restarted, terminated, l.counts(), k.n())
	}
	l.end()
	mustStop(t, a, b)
	n := mustBeExactlyOnce(t, s, k)
	t.Logf("%d restarts and terminations: %d writes acknowledged, %d events; answers: %s", rounds, k.n(), n, l.counts())
}
