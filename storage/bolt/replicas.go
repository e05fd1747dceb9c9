package bolt

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/writerd/writerd/pipeline"
)

// replicas is what a Storage knows of the processes serving on it
// (pipeline.Replicas): only one process opens a bbolt file, so it is
// that process's own word, kept in memory on its own clock. Nothing of
// it is written to the file: a heartbeat would cost an fsync, and no
// other process could read it.
type replicas struct {
	mu   sync.Mutex
	seen map[string]pipeline.Replica
}

var _ pipeline.Replicas = (*Storage[any])(nil)

// Seen records r as seen now.
func (s *Storage[D]) Seen(_ context.Context, r pipeline.Replica) error {
	s.replicas.mu.Lock()
	defer s.replicas.mu.Unlock()
	if s.replicas.seen == nil {
		s.replicas.seen = map[string]pipeline.Replica{}
	}
	r.SeenAt = time.Now()
	s.replicas.seen[r.ID] = r
	return nil
}

// Replicas returns the replicas seen within the last within, by id.
func (s *Storage[D]) Replicas(_ context.Context, within time.Duration) ([]pipeline.Replica, error) {
	s.replicas.mu.Lock()
	defer s.replicas.mu.Unlock()
	since := time.Now().Add(-within)
	var rs []pipeline.Replica
	for _, r := range s.replicas.seen {
		if !r.SeenAt.Before(since) {
			rs = append(rs, r)
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].ID < rs[j].ID })
	return rs, nil
}
