package main

// Trials of writes to an upstream under load (issue 27, "What must be
// shown" 3): 16 agents writing through writerd to the tests' fake
// upstream over Streamable HTTP, which takes keys, while writerd is
// killed with SIGKILL (on bbolt, and one of two PostgreSQL replicas
// sharing the fake) or stopped with SIGSTOP while it holds pending
// records past their lease. The ledger of the fake is the ground truth:
// no key executed twice; each key settled (completed, re-driven under its
// upstream key where its owner died) with one event. The short versions
// run in every go test but under -short; WRITERD_TRIALS=long runs the
// long ones (20 rounds).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/postgres/pgtest"
)

// The lease of the trials' daemons (the test build's WRITERD_TEST_LEASE),
// their sweep (every quarter of the lease), and PostgreSQL's
// idle-in-transaction timeout, writerd's default: the promise is that a
// key whose owner died or stalled is settled within their sum.
const (
	loadLease = 2 * time.Second
	loadSweep = loadLease / 4
	loadIdle  = 10 * time.Second
	// loadDelay is how long the fake takes to answer under load, so that
	// a kill finds pending records.
	loadDelay = 50 * time.Millisecond
)

// httpFake is the fake upstream over Streamable HTTP, shared by every
// daemon of a trial, and the upstreams file that names it.
type httpFake struct {
	srv  *upstreamtest.Server
	sw   upstreamtest.Switches
	file string
}

// loadFake is the upstream of a trial, shared by its daemons: the fake
// MCP server over Streamable HTTP (httpFake) or the fake HTTP API
// (apiFake), each with create_ticket as the tool tracker_create_ticket.
type loadFake interface {
	upstreams() string                   // the upstreams file that names it
	delay(t *testing.T, d time.Duration) // how long it takes to answer
	executions(t *testing.T) []execution // its ledger
}

// execution is one execution in a fake's ledger.
type execution struct {
	key, digest, ticket string // the upstream key ("" for none), the arguments' digest, the ticket made
}

func (f *httpFake) upstreams() string { return f.file }

func (f *httpFake) executions(t *testing.T) []execution {
	var out []execution
	for _, e := range f.srv.Entries(t) {
		x := execution{key: e.UpstreamKey, digest: e.ArgsDigest}
		if e.Ticket != nil {
			x.ticket = e.Ticket.ID
		}
		out = append(out, x)
	}
	return out
}

// startHTTPFake starts the fake with keys taken as an argument and pins
// its create_ticket.
func startHTTPFake(t *testing.T) *httpFake {
	t.Helper()
	sw := upstreamtest.Switches{Keys: upstreamtest.KeysArgument, KeyArg: "request_key", Delay: upstreamtest.Duration(loadDelay)}
	f := &httpFake{srv: upstreamtest.StartHTTP(t, upstreamtest.Options{Switches: sw}), sw: sw}
	listed := make(chan []*sdk.Tool, 4)
	c := upstream.NewClient(upstream.Endpoint{Name: "probe", URL: f.srv.URL, Timeout: 10 * time.Second},
		upstream.ClientOptions{OnTools: func(ts []*sdk.Tool) { listed <- ts }})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var pin string
	select {
	case ts := <-listed:
		for _, d := range ts {
			if d.Name == "create_ticket" {
				pin = upstream.Pin(d)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the fake listed no tools within 30s")
	}
	c.Close()
	text := fmt.Sprintf(`[upstream.tracker]
url = %q
timeout = "5s"
max_concurrent = 64
keys = "argument"
key_argument = "request_key"

[[upstream.tracker.tool]]
name = "create_ticket"
kind = "write"
pin = %q
targets = ["/ticket/id"]
`, f.srv.URL, pin)
	f.file = filepath.Join(t.TempDir(), "upstreams.toml")
	if err := os.WriteFile(f.file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// delay sets how long the fake takes to answer, for every instance.
func (f *httpFake) delay(t *testing.T, d time.Duration) {
	t.Helper()
	sw := f.sw
	sw.Delay = upstreamtest.Duration(d)
	if err := upstreamtest.SetSwitches(f.srv.Ledger, sw); err != nil {
		t.Fatal(err)
	}
}

// startLoadDaemon starts writerd from the test build on s, serving the
// fake's tools, with the trials' lease and sweep.
func startLoadDaemon(t *testing.T, s testStore, f loadFake, tokens string) *httpDaemon {
	t.Helper()
	return MustStartHTTP(t, httpConfig{bin: testBinary, store: s, tokens: tokens, env: []string{
		"WRITERD_TEST_LEASE=" + loadLease.String(), "WRITERD_TEST_TRACKER_SECRET=" + upstreamSecret,
	}, args: []string{"--upstreams", f.upstreams()}})
}

// createTicket calls tracker_create_ticket over the direct API; the
// answer's id is the ticket's.
func createTicket(d *httpDaemon, token, key string) answer {
	req, err := http.NewRequest("POST", d.url+"/v1/tools/tracker_create_ticket",
		strings.NewReader(`{"title":"`+key+`","priority":"low"}`))
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
	a := answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
	var body struct {
		envelope
		Ticket struct {
			ID string `json:"id"`
		} `json:"ticket"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		a.code, a.body = notJSON, string(b)
		return a
	}
	a.code, a.retry, a.id = body.Error.Code, body.Error.Retry, body.Ticket.ID
	return a
}

// upLoad is agents writing tickets through writerd, each key sent again,
// to the replica pick names, until it is acknowledged.
type upLoad struct {
	t     *testing.T
	token string
	k     *acks
	pick  func(agent, attempt int) *httpDaemon
	stop  atomic.Bool
	wg    sync.WaitGroup
	seen  sync.Map

	mu       sync.Mutex
	sent     map[string]bool          // every key sent
	inFlight map[string]*httpDaemon   // keys sent, not answered, and where
	ackedBy  map[*httpDaemon][]string // keys acknowledged, not replayed, by replica
	// watched, if set, gets each answer of a key it holds, by replica.
	watched map[string]map[*httpDaemon][]answer
}

func (l *upLoad) count(kind string) {
	v, _ := l.seen.LoadOrStore(kind, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (l *upLoad) counts() string {
	var lines []string
	l.seen.Range(func(k, v any) bool {
		lines = append(lines, fmt.Sprintf("%s: %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	slices.Sort(lines)
	return strings.Join(lines, ", ")
}

// send sends key until it is acknowledged or the load stops; false if it
// stopped, or the answer was one no retry may get.
func (l *upLoad) send(agent int, key string, always bool) bool {
	for attempt := 0; ; attempt++ {
		if !always && l.stop.Load() {
			return false
		}
		d := l.pick(agent, attempt)
		l.mu.Lock()
		l.sent[key] = true
		l.inFlight[key] = d
		l.mu.Unlock()
		a := createTicket(d, l.token, key)
		l.mu.Lock()
		delete(l.inFlight, key)
		if a.ok() && !a.replayed {
			l.ackedBy[d] = append(l.ackedBy[d], key)
		}
		if w, ok := l.watched[key]; ok {
			w[d] = append(w[d], a)
		}
		l.mu.Unlock()
		switch {
		case a.ok():
			l.count("ok")
			if a.replayed {
				l.count("ok, replayed")
			}
			l.k.add(key, a)
			return true
		case a.retryable():
			if a.err != nil {
				l.count("no answer")
			} else {
				l.count(a.code + " " + a.retry)
			}
			if attempt > 2000 {
				l.k.fail("key %s: still %v after %d attempts", key, a, attempt)
				return false
			}
			time.Sleep(time.Duration(min(attempt, 20)) * 5 * time.Millisecond)
		default:
			l.k.fail("key %s on %s: %v", key, d.url, a)
			return false
		}
	}
}

func (l *upLoad) run(agents int, prefix string) {
	l.sent = map[string]bool{}
	l.inFlight = map[string]*httpDaemon{}
	l.ackedBy = map[*httpDaemon][]string{}
	l.t.Cleanup(l.end)
	for i := range agents {
		l.wg.Go(func() {
			for j := 0; !l.stop.Load(); j++ {
				if !l.send(i, fmt.Sprintf("%s-%02d-%06d", prefix, i, j), false) {
					return
				}
			}
		})
	}
}

func (l *upLoad) end() {
	l.stop.Store(true)
	l.wg.Wait()
}

// waitFor waits until n more writes are acknowledged.
func (l *upLoad) waitFor(n int, within time.Duration) {
	l.t.Helper()
	from := l.k.n()
	for deadline := time.Now().Add(within); l.k.n() < from+n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			l.t.Fatalf("%d writes acknowledged, %d in %v, want %d more (answers: %s; %v)",
				l.k.n(), l.k.n()-from, within, n, l.counts(), l.k.failures())
		}
	}
}

// retryAll sends every key ever sent once more, 16 at a time, until each
// is acknowledged: the end of a trial, where no key is left unanswered.
func (l *upLoad) retryAll() {
	l.mu.Lock()
	keys := make(chan string, len(l.sent))
	for k := range l.sent {
		keys <- k
	}
	l.mu.Unlock()
	close(keys)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for k := range keys {
				l.send(i, k, true)
			}
		})
	}
	wg.Wait()
}

// keysOf returns the keys acknowledged by d's own execution.
func (l *upLoad) keysOf(d *httpDaemon) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ackedBy[d])
}

// settleFigures are how long keys took to settle.
type settleFigures struct {
	all, affected []time.Duration
	takenOver     int
}

func quantiles(ds []time.Duration, of string) string {
	if len(ds) == 0 {
		return "none"
	}
	q := func(f float64) time.Duration { return quantile(ds, f).Round(time.Millisecond) }
	return fmt.Sprintf("p50 %v, p99 %v, max %v (%d %s)", q(0.5), q(0.99), q(1), len(ds), of)
}

// quantile returns the f quantile of ds (0 to 1), which it sorts; 0 if
// ds is empty.
func quantile(ds []time.Duration, f float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[int(f*float64(len(ds)-1))]
}

// mustSettleOnce checks the store of stopped daemons and the fake's
// ledger after every key was retried: no upstream key and no argument
// digest executed twice; each key sent is completed, under the upstream
// key its execution carried, with the ticket its acknowledgement named
// and one ok event; nothing pending or unknown is left; writerd check and
// audit verify pass. A key's settling is timed from its pending record's
// creation, or from the latest incident (kill, stop) between that and
// its event, to its event.
func mustSettleOnce(t *testing.T, s testStore, f loadFake, l *upLoad, incidents []time.Time) settleFigures {
	t.Helper()
	for _, e := range l.k.failures() {
		t.Error(e)
	}
	entries := f.executions(t)
	byKey, byDigest := map[string]int{}, map[string]int{}
	for _, e := range entries {
		byKey[e.key]++
		byDigest[e.digest]++
	}
	for k, n := range byKey {
		if n != 1 || k == "" {
			t.Errorf("upstream key %q executed %d times, want once", k, n)
		}
	}
	for d, n := range byDigest {
		if n != 1 {
			t.Errorf("the arguments of digest %s executed %d times, want once", d, n)
		}
	}
	ticketOf := map[string]string{}
	for _, e := range entries {
		if e.ticket != "" {
			ticketOf[e.key] = e.ticket
		}
	}
	st := MustOpenStore(t, s)
	byEvent := map[string][]*auditlog.Event{}
	var fig settleFigures
	for _, e := range st.events() {
		byEvent[e.IdempotencyKey] = append(byEvent[e.IdempotencyKey], e)
	}
	st.view(func(tx pipeline.Tx[handlers.Store]) error {
		return tx.Keys().Unsettled(func(r *idempotency.Record) error {
			t.Errorf("key %s left %s (attempt %d)", r.Key, r.State, r.Attempt)
			return nil
		})
	})
	acked := l.k.acknowledged()
	l.mu.Lock()
	sent := len(l.sent)
	l.mu.Unlock()
	if len(acked) != sent {
		t.Errorf("%d keys sent, %d acknowledged", sent, len(acked))
	}
	for key, ticket := range acked {
		r := st.record("agent", key)
		evs := byEvent[key]
		switch {
		case r == nil || r.State != idempotency.Completed:
			t.Errorf("key %s: record %+v, want completed", key, r)
			continue
		case byKey[r.UpstreamKey] != 1 || ticketOf[r.UpstreamKey] != ticket:
			t.Errorf("key %s: upstream key executed %d times (ticket %s), acknowledged as ticket %s", key, byKey[r.UpstreamKey], ticketOf[r.UpstreamKey], ticket)
		case len(evs) != 1 || evs[0].Outcome != auditlog.OK || evs[0].Upstream == nil || evs[0].ID != r.AuditID:
			t.Errorf("key %s: events %+v, want one ok event, the record's", key, evs)
			continue
		}
		ev := evs[0]
		from := r.CreatedAt
		for _, at := range incidents {
			if at.After(from) && at.Before(ev.Time) {
				from = at
			}
		}
		took := ev.Time.Sub(from)
		fig.all = append(fig.all, took)
		if from != r.CreatedAt {
			fig.affected = append(fig.affected, took)
		}
		if ev.Transport == pipeline.TransportTakeover {
			fig.takenOver++
		}
	}
	if n := len(st.events()); n != len(acked) || len(entries) != len(acked) {
		t.Errorf("%d events, %d executions, %d keys: want one of each per key", n, len(entries), len(acked))
	}
	st.s.Close()
	mustCheck(t, s)
	mustVerifyPasses(t, s.auditFlags()...)
	return fig
}

// Ensure writerd on bbolt, killed with SIGKILL while 16 agents write to a
// keyed upstream through it, round after round, executes no key twice:
// at each restart it takes over every pending record and re-drives it
// under its upstream key; every key, retried at the end, is completed
// with the ticket its acknowledgement named and one event.
func TestUpstreamLoad_KillBolt(t *testing.T) {
	if testing.Short() {
		t.Skip("kills writerd under load")
	}
	trialKillBolt(t, startHTTPFake(t))
}

// trialKillBolt is TestUpstreamLoad_KillBolt's trial, on the upstream f.
func trialKillBolt(t *testing.T, f loadFake) {
	rounds := trialSize(3, 20)
	s := boltStores.make(t)
	tok := mustAuditTokens(t)
	var mu sync.Mutex
	d := startLoadDaemon(t, s, f, tok.file)
	k := newAcks()
	l := &upLoad{t: t, token: tok.agent, k: k, pick: func(int, int) *httpDaemon {
		mu.Lock()
		defer mu.Unlock()
		return d
	}}
	l.run(16, "bolt")
	var incidents []time.Time
	var downs []time.Duration
	for round := range rounds {
		l.waitFor(40, 60*time.Second)
		mu.Lock()
		victim := d
		mu.Unlock()
		victim.Kill()
		killed := time.Now()
		incidents = append(incidents, killed)
		again := startLoadDaemon(t, s, f, tok.file)
		mu.Lock()
		d = again
		mu.Unlock()
		downs = append(downs, time.Since(killed))
		t.Logf("round %d: killed writerd; %d writes acknowledged so far", round+1, k.n())
	}
	l.waitFor(40, 60*time.Second)
	l.end()
	l.retryAll()
	mustStop(t, d)
	fig := mustSettleOnce(t, s, f, l, incidents)
	if fig.takenOver == 0 {
		t.Errorf("no key was taken over in %d kills: no kill found a pending write", rounds)
	}
	t.Logf("%d kills, restarted in %s; %d keys, %d taken over at a restart; settled %s; those pending at a kill, from the kill: %s; answers: %s",
		rounds, quantiles(downs, "restarts"), len(fig.all), fig.takenOver, quantiles(fig.all, "keys"), quantiles(fig.affected, "keys"), l.counts())
}

// ownerOf returns the owner of the pending records of the replica d: the
// owner of the last write d executed.
func ownerOf(t *testing.T, s testStore, l *upLoad, d *httpDaemon) string {
	t.Helper()
	mine := l.keysOf(d)
	if len(mine) == 0 {
		t.Fatalf("the replica at %s executed no write of its own", d.url)
	}
	return pgtest.Value[string](t, s.URL, `SELECT owner FROM idempotency WHERE principal = 'agent' AND key = $1`, mine[len(mine)-1])
}

// pendingOf returns the keys of the pending records owner holds.
func pendingOf(t *testing.T, s testStore, owner string) []string {
	t.Helper()
	return pgtest.Value[[]string](t, s.URL, `SELECT coalesce(array_agg(key), '{}') FROM idempotency WHERE state = 'pending' AND owner = $1`, owner)
}

// mustSettleHeld waits until none of the keys is pending, at most 60s.
func mustSettleHeld(t *testing.T, s testStore, held []string, what string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n := pgtest.Value[int64](t, s.URL, `SELECT count(*) FROM idempotency WHERE state = 'pending' AND key = ANY($1)`, held)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d pending records of the %s replica not taken over in 60s", n, len(held), what)
		}
	}
}

// Ensure two PostgreSQL replicas sharing one keyed upstream over
// Streamable HTTP, 16 agents writing through both, execute no key twice
// when one is killed with SIGKILL mid-round (the other's sweep takes its
// pending records over past their lease and re-drives them under their
// upstream keys), nor when one is stopped with SIGSTOP while it holds
// pending records (the fake answering late), past their lease: the other
// takes them over, and once woken the stopped one's completions write
// nothing (each key keeps the one event of its takeover). Every key,
// retried at the end, is completed with one event, each settled within
// the lease, the sweep and PostgreSQL's idle-in-transaction timeout of
// its owner's death or stall.
func TestUpstreamLoad_Replicas(t *testing.T) {
	trialReplicas(t, startHTTPFake(t))
}

// trialReplicas is TestUpstreamLoad_Replicas's trial, on the upstream f.
func trialReplicas(t *testing.T, f loadFake) {
	s, tok := mustReplicaStore(t)
	rounds := trialSize(3, 20)
	names := [2]string{"writerd-a", "writerd-b"}
	var replicas [2]*httpDaemon
	var mu sync.Mutex
	for r := range replicas {
		replicas[r] = startLoadDaemon(t, s.named(names[r]), f, tok.file)
	}
	replica := func(r int) *httpDaemon {
		mu.Lock()
		defer mu.Unlock()
		return replicas[r]
	}
	k := newAcks()
	// Half the agents write to each replica; a call that gets no answer
	// goes to the other.
	l := &upLoad{t: t, token: tok.agent, k: k, pick: func(agent, attempt int) *httpDaemon {
		return replica((agent + attempt) % 2)
	}}
	l.run(16, "pg")
	var incidents []time.Time
	var kills []time.Duration
	for round := range rounds {
		l.waitFor(40, 60*time.Second)
		victim := round % 2
		d := replica(victim)
		owner := ownerOf(t, s, l, d)
		d.Kill()
		killed := time.Now()
		incidents = append(incidents, killed)
		// The survivor takes the victim's pending records over, alone: the
		// victim is started again only once they are settled.
		held := pendingOf(t, s, owner)
		mustSettleHeld(t, s, held, "killed "+names[victim])
		kills = append(kills, time.Since(killed))
		l.waitFor(20, 60*time.Second)
		again := startLoadDaemon(t, s.named(names[victim]), f, tok.file)
		mu.Lock()
		replicas[victim] = again
		mu.Unlock()
		t.Logf("round %d: killed %s holding %d pending records, taken over by the other in %v; %d writes acknowledged so far",
			round+1, names[victim], len(held), kills[len(kills)-1].Round(time.Millisecond), k.n())
	}

	// The SIGSTOP: the fake answers late, so that writerd-a holds pending
	// records, and writerd-a is stopped while it does.
	l.waitFor(40, 60*time.Second)
	a := replica(0)
	t.Cleanup(func() { a.cmd.Process.Signal(syscall.SIGCONT) })
	owner := ownerOf(t, s, l, a)
	f.delay(t, 3*time.Second)
	// A moment it also holds a claim in a transaction left open, if one
	// comes within 100 tries: then the other waits for PostgreSQL to end
	// that transaction, the promise's third term.
	var held []string
	claims := 0
	time.Sleep(500 * time.Millisecond)
	for try := 0; ; try++ {
		a.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(20 * time.Millisecond)
		held, claims = pendingOf(t, s, owner), heldClaims(t, s.URL, "writerd-a")
		if len(held) > 0 && (claims > 0 || try >= 100) {
			break
		}
		a.cmd.Process.Signal(syscall.SIGCONT)
		if try == 200 {
			t.Fatal("writerd-a never held a pending record when stopped")
		}
		time.Sleep(time.Duration(try%7) * 3 * time.Millisecond)
	}
	stopped := time.Now()
	incidents = append(incidents, stopped)
	f.delay(t, loadDelay)
	// writerd-b takes them over, past their lease.
	mustSettleHeld(t, s, held, "stopped writerd-a")
	takenOver := time.Since(stopped)
	l.mu.Lock()
	l.watched = map[string]map[*httpDaemon][]answer{}
	for _, key := range held {
		l.watched[key] = map[*httpDaemon][]answer{}
	}
	l.mu.Unlock()
	a.cmd.Process.Signal(syscall.SIGCONT)
	l.waitFor(40, 60*time.Second)
	l.end()
	l.retryAll()
	mustStop(t, replicas[:]...)

	// The stopped replica's completions wrote nothing: each key it held
	// has the one event of writerd-b's takeover, and its record the
	// attempt after writerd-a's.
	fenced := 0
	l.mu.Lock()
	for key, by := range l.watched {
		for _, got := range by[a] {
			if got.ok() && !got.replayed {
				t.Errorf("key %s: the woken writerd-a answered its own execution, %v", key, got)
			}
			if got.code == "IDEMPOTENCY_KEY_IN_USE" {
				fenced++
			}
		}
	}
	l.mu.Unlock()
	st := MustOpenStore(t, s)
	for _, key := range held {
		r := st.record("agent", key)
		evs := st.eventsFor(key)
		if r == nil || r.Owner == owner || r.Attempt < 2 || len(evs) != 1 || evs[0].Transport != pipeline.TransportTakeover {
			t.Errorf("key %s, held by the stopped replica: record %+v, events %+v; want one event, of its takeover", key, r, evs)
		}
	}
	st.s.Close()
	fig := mustSettleOnce(t, s, f, l, incidents)
	bound := loadLease + loadSweep + loadIdle
	slices.Sort(fig.all)
	if worst := fig.all[len(fig.all)-1]; worst > bound {
		t.Errorf("a key took %v to settle, beyond the lease, the sweep and the idle-in-transaction timeout (%v)", worst, bound)
	}
	t.Logf("%d kills, their pending records taken over in %s; a SIGSTOP holding %d pending records and %d claims, taken over %v after it, %d of the woken replica's completions fenced off (IDEMPOTENCY_KEY_IN_USE); %d keys, %d taken over; settled %s; those pending at a kill or the stop, from it: %s (bound %v); answers: %s",
		rounds, quantiles(kills, "kills"), len(held), claims, takenOver.Round(time.Millisecond), fenced, len(fig.all), fig.takenOver, quantiles(fig.all, "keys"), quantiles(fig.affected, "keys"), bound, l.counts())
}

// Ensure a pending record whose replica died right after committing it
// (the test build's failpoint, before anything was sent) is taken over
// by the other replica past its lease, and re-driven, while two agents
// send its key to that replica again and again: their calls wait for the
// record without keeping its sweep from it, and each gets the ticket
// within the lease, the sweep and the idle-in-transaction timeout.
func TestUpstreamLoad_TakeoverWhileRetried(t *testing.T) {
	s, tok := mustReplicaStore(t)
	f := startHTTPFake(t)
	a := MustStartHTTP(t, httpConfig{bin: testBinary, store: s.named("writerd-a"), tokens: tok.file, env: []string{
		"WRITERD_TEST_LEASE=" + loadLease.String(),
		"WRITERD_TEST_FAILPOINT=" + pipeline.FailpointPending,
	}, args: []string{"--upstreams", f.file}})
	b := startLoadDaemon(t, s.named("writerd-b"), f, tok.file)
	const key = "retried-0001"
	if got := createTicket(a, tok.agent, key); got.err == nil {
		t.Fatalf("writerd-a answered %v; want it killed at its failpoint", got)
	}
	a.Kill()
	died := time.Now()
	var wg sync.WaitGroup
	var got [2]answer
	var took [2]time.Duration
	var inUse atomic.Int64
	for i := range got {
		wg.Go(func() {
			for time.Since(died) < 30*time.Second {
				got[i] = createTicket(b, tok.agent, key)
				if !got[i].retryable() {
					break
				}
				inUse.Add(1)
			}
			took[i] = time.Since(died)
		})
	}
	wg.Wait()
	bound := loadLease + loadSweep + loadIdle
	for i := range got {
		if !got[i].ok() || took[i] > bound {
			t.Errorf("agent %d: %v after %v; want the ticket within the lease, the sweep and the idle-in-transaction timeout (%v)", i, got[i], took[i].Round(time.Millisecond), bound)
		}
	}
	t.Logf("settled %v and %v after writerd-a died, %d answers in use before", took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), inUse.Load())
}
