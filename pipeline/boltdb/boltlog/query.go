package boltlog

import (
	"encoding/binary"
	"sort"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

// List returns up to limit events that pass f, in sequence order, after
// the sequence number after (0: from the start), and the cursor to resume
// from (the last event's sequence number) when more may follow, else 0.
// Event times never decrease along the log, so Since and Until bound the
// walk by binary search; the other fields are checked event by event.
func (l Log) List(tx *kv.Tx, f auditlog.Filter, after uint64, limit int) ([]*auditlog.Event, uint64, error) {
	size, err := l.Size(tx)
	if err != nil {
		return nil, 0, err
	}
	from, to := after+1, size // the sequence numbers to walk
	if !f.Since.IsZero() {
		first, err := l.firstAtOrAfter(tx, size, f.Since)
		if err != nil {
			return nil, 0, err
		}
		from = max(from, first)
	}
	if !f.Until.IsZero() {
		first, err := l.firstAtOrAfter(tx, size, f.Until)
		if err != nil {
			return nil, 0, err
		}
		to = min(to, first-1)
	}
	var out []*auditlog.Event
	var next uint64
	err = rawFrom(tx, from, func(seq uint64, c []byte) error {
		if seq > to {
			return errStop
		}
		e, err := auditlog.DecodeEvent(c)
		if err != nil {
			return err
		}
		if !f.Match(e) {
			return nil
		}
		if len(out) == limit {
			next = out[len(out)-1].Seq
			return errStop
		}
		out = append(out, e)
		return nil
	})
	if err != nil && err != errStop {
		return nil, 0, err
	}
	return out, next, nil
}

// firstAtOrAfter returns the sequence number of the first event at or
// after t, or size+1 if there is none.
func (l Log) firstAtOrAfter(tx *kv.Tx, size uint64, t time.Time) (uint64, error) {
	b, err := eventsOf(tx)
	if err != nil {
		return 0, err
	}
	var failed error
	i := sort.Search(int(size), func(i int) bool {
		seq := uint64(i + 1)
		e, err := auditlog.DecodeEvent(canonicalOf(int(seq), b.Get(binary.BigEndian.AppendUint64(nil, seq))))
		if err != nil {
			failed = err
			return true
		}
		return !e.Time.Before(t)
	})
	return uint64(i + 1), failed
}

// Tail returns the last n events, oldest first.
func (l Log) Tail(tx *kv.Tx, n int) ([]*auditlog.Event, error) {
	size, err := l.Size(tx)
	if err != nil {
		return nil, err
	}
	from := uint64(1)
	if size > uint64(n) {
		from = size - uint64(n) + 1
	}
	var out []*auditlog.Event
	err = rawFrom(tx, from, func(_ uint64, c []byte) error {
		e, err := auditlog.DecodeEvent(c)
		if err == nil {
			out = append(out, e)
		}
		return err
	})
	return out, err
}

type stopError struct{}

func (stopError) Error() string { return "stop" }

var errStop error = stopError{}
