package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/writerd/writerd/httpapi"
	"github.com/writerd/writerd/metrics"
	"github.com/writerd/writerd/pipeline"
)

// ReplicaBeat is how often a daemon tells its store it serves, and reads
// which replicas do; one not seen for replicaWindow beats is taken for
// gone.
const (
	ReplicaBeat   = 10 * time.Second
	replicaWindow = 3
)

// CheckReplicas names /readyz's advisory check of the replicas' configs.
const CheckReplicas = "replicas"

// replicaBeat says, as the store's pipeline.Replicas, that this process
// serves with the upstreams file in force (its digest): when the store
// opens, at each reload and as a heartbeat; after each it reads the
// replicas seen lately, for /readyz, the metrics and one log line per
// change. Replicas whose digests differ are shown and counted, never
// refused: a rolling change of the file is normal.
type replicaBeat struct {
	id, host string
	every    time.Duration
	log      *slog.Logger
	m        *metrics.Replicas
	poke     chan struct{} // a reload: beat now

	mu     sync.Mutex
	config string             // the digest in force; "" for no file
	seen   []pipeline.Replica // as last read; nil before
	said   string             // the digests logged last
}

func newReplicaBeat(id string, every time.Duration, config string, log *slog.Logger, m *metrics.Replicas) *replicaBeat {
	host, _ := os.Hostname()
	return &replicaBeat{id: id, host: host + ":" + strconv.Itoa(os.Getpid()), every: every, log: log, m: m,
		poke: make(chan struct{}, 1), config: config}
}

// reloaded puts a new digest in force and beats at once.
func (b *replicaBeat) reloaded(config string) {
	b.mu.Lock()
	b.config = config
	b.mu.Unlock()
	select {
	case b.poke <- struct{}{}:
	default:
	}
}

// run beats on s until ctx ends; a store without pipeline.Replicas has
// nothing to tell.
func (b *replicaBeat) run(ctx context.Context, s Store) {
	rs, ok := s.(pipeline.Replicas)
	if !ok {
		return
	}
	t := time.NewTicker(b.every)
	defer t.Stop()
	for {
		b.beat(ctx, rs)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-b.poke:
		}
	}
}

// beat says this replica is seen, then reads who is. A store that does
// not answer keeps what was read last: the store's own readiness check
// says why.
func (b *replicaBeat) beat(ctx context.Context, rs pipeline.Replicas) {
	ctx, cancel := context.WithTimeout(ctx, b.every)
	defer cancel()
	b.mu.Lock()
	me := pipeline.Replica{ID: b.id, Host: b.host, Config: b.config}
	b.mu.Unlock()
	if err := rs.Seen(ctx, me); err != nil {
		b.log.Debug("the store did not record this replica", "cause", err.Error())
		return
	}
	seen, err := rs.Replicas(ctx, replicaWindow*b.every)
	if err != nil {
		b.log.Debug("the store did not list the replicas", "cause", err.Error())
		return
	}
	digests := byDigest(seen)
	b.m.Set(len(seen), len(digests))
	b.mu.Lock()
	b.seen = seen
	said := b.said
	b.said = strings.Join(slices.Sorted(maps.Keys(digests)), ",")
	b.mu.Unlock()
	switch {
	case b.said == said:
	case len(digests) > 1:
		var who []string
		for _, r := range seen {
			who = append(who, r.Host+"="+digestName(r.Config))
		}
		b.log.Warn("replicas serve different upstreams files; a rolling change shows so until every replica has reloaded", "digests", len(digests), "replicas", strings.Join(who, ","))
	case said != "":
		b.log.Info("the replicas serve one upstreams file", "digest", digestName(me.Config), "replicas", len(seen))
	}
}

// check is /readyz's advisory check: failing, with each digest and how
// many replicas serve it, while the replicas seen serve different files.
// It names no host: /readyz answers anyone who reaches it; the log
// names them.
func (b *replicaBeat) check() []httpapi.ReadyCheck {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	seen := b.seen
	b.mu.Unlock()
	if seen == nil {
		return nil
	}
	c := httpapi.ReadyCheck{Name: CheckReplicas, Advisory: true, State: "differ"}
	digests := byDigest(seen)
	if len(digests) > 1 {
		var parts []string
		for _, d := range slices.Sorted(maps.Keys(digests)) {
			n := digests[d]
			parts = append(parts, fmt.Sprintf("%s on %d %s", digestName(d), n, plural(n, "replica", "replicas")))
		}
		c.Err = pipeline.Errorf(pipeline.Unavailable, "The %d replicas seen serve %d different upstreams files: %s. A rolling change of the file shows so until every replica has reloaded it; nothing is refused.",
			len(seen), len(digests), strings.Join(parts, ", "))
	}
	return []httpapi.ReadyCheck{c}
}

// byDigest counts the replicas serving each digest.
func byDigest(seen []pipeline.Replica) map[string]int {
	n := map[string]int{}
	for _, r := range seen {
		n[r.Config]++
	}
	return n
}

// digestName is how the body and the log write a digest: as the file's
// load logs it, or "none" for a replica without an upstreams file.
func digestName(d string) string {
	if d == "" {
		return "none"
	}
	return d
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
