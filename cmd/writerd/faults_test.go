package main

import (
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/writerd/writerd/pipeline"
)

// timedCall is one of a replica's calls: when it began and how long it
// took to be answered.
type timedCall struct {
	began time.Time
	took  time.Duration
}

// callTimes collects the calls of a load on one replica.
type callTimes struct {
	mu    sync.Mutex
	calls []timedCall
}

func (c *callTimes) add(began time.Time, took time.Duration) {
	c.mu.Lock()
	c.calls = append(c.calls, timedCall{began, took})
	c.mu.Unlock()
}

// during returns how long each call took that was in flight at some
// instant of [from, to].
func (c *callTimes) during(from, to time.Time) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	for _, k := range c.calls {
		if !k.began.After(to) && !k.began.Add(k.took).Before(from) {
			out = append(out, k.took)
		}
	}
	return out
}

// Ensure no replica stopped, cut off or slowed stalls another's writes
// (docs/DESIGN.md section 14): replica b, whose links to PostgreSQL pass a
// blackhole, is stopped with SIGSTOP at random instants of its batches,
// cut off, and given 200ms of latency each way, while agents write to
// both; replica a's writes in flight during each fault have a p99 at most
// a second above their p99 without faults, and none takes past
// --store-wait. Every acknowledged write is in the store once. Short: 2
// stops, 2 cuts, 1 slow link, each a second; long (WRITERD_TRIALS=long):
// 20, 20, 10, each 1.5s.
func TestReplicas_FaultsStallNoOther(t *testing.T) {
	s, tok := mustReplicaStore(t)
	via, hole := viaBlackhole(t, s)
	a := MustStartHTTP(t, httpConfig{store: s.named("writerd-a"), tokens: tok.file})
	// b's own waits are short, so that its agents retry within the trial.
	b := MustStartHTTP(t, httpConfig{store: via.named("writerd-b"), tokens: tok.file, args: []string{"--store-wait", "2s"}})
	t.Cleanup(func() {
		hole.cut.Store(false)
		hole.delay.Store(0)
		b.cmd.Process.Signal(syscall.SIGCONT)
	})

	k := newAcks()
	var onA callTimes
	la := &load{t: t, token: tok.agent, k: k, pick: func(int, int) *httpDaemon { return a }, timed: &onA}
	lb := &load{t: t, token: tok.agent, k: k, pick: func(int, int) *httpDaemon { return b }}
	la.run(6, "fault-a")
	lb.run(6, "fault-b")
	la.waitFor(200, 30*time.Second)

	hold := time.Duration(trialSize(1000, 1500)) * time.Millisecond
	baseFrom := time.Now()
	time.Sleep(2 * hold)
	base := onA.during(baseFrom, time.Now())
	baseP99 := quantile(base, 0.99)

	type fault struct {
		name       string
		start, end func()
	}
	faults := []fault{
		{"SIGSTOP", func() { b.cmd.Process.Signal(syscall.SIGSTOP) }, func() { b.cmd.Process.Signal(syscall.SIGCONT) }},
		{"links cut", func() { hole.cut.Store(true) }, func() { hole.cut.Store(false) }},
		{"200ms each way", func() { hole.delay.Store(int64(200 * time.Millisecond)) }, func() { hole.delay.Store(0) }},
	}
	rounds := []int{trialSize(2, 20), trialSize(2, 20), trialSize(1, 10)}
	figures := map[string][]time.Duration{}
	for i, f := range faults {
		for range rounds[i] {
			// A random instant of b's batches: its agents keep one in
			// flight at almost every instant.
			time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond)
			from := time.Now()
			f.start()
			time.Sleep(hold)
			f.end()
			to := time.Now()
			// The calls in flight at the fault's end are answered by then.
			time.Sleep(300 * time.Millisecond)
			during := onA.during(from, to)
			if len(during) == 0 {
				t.Fatalf("%s: replica a answered no write during the fault", f.name)
			}
			figures[f.name] = append(figures[f.name], during...)
			if worst := slices.Max(during); worst > pipeline.DefaultStoreWait {
				t.Errorf("%s: a write on replica a took %v, past --store-wait %v", f.name, worst, pipeline.DefaultStoreWait)
			}
		}
	}
	lb.waitForOn(b, "b", 20, 30*time.Second) // b writes again after its faults
	la.end()
	lb.end()
	mustStop(t, a, b)
	n := mustBeExactlyOnce(t, s, k)
	t.Logf("replica a without faults: %s", quantiles(base, "writes"))
	for _, f := range faults {
		ds := figures[f.name]
		if got := quantile(ds, 0.99); got > baseP99+time.Second {
			t.Errorf("%s on replica b: replica a's writes had a p99 of %v, more than a second above its %v without faults", f.name, got, baseP99)
		}
		t.Logf("replica a during %s on b: %s", f.name, quantiles(ds, "writes"))
	}
	t.Logf("%d events; answers on b: %s", n, lb.counts())
}
