package auditlog

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/oklog/ulid/v2"
)

// Get returns the event of sequence number seq, or ErrNotFound.
func Get(r Reader, seq uint64) (*Event, error) {
	c, err := r.Leaf(seq)
	if err != nil {
		return nil, err
	}
	return DecodeEvent(c)
}

// eventAt is Get for a binary search, which only asks for sequence
// numbers up to the log's size: a missing one there is damage, not an
// answer.
func eventAt(r Reader, seq uint64) (*Event, error) {
	e, err := Get(r, seq)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("auditlog: event %d is missing", seq)
	}
	return e, err
}

// ByID returns the event with the given ULID, or ErrNotFound. Ids grow
// with sequence numbers (Append's rule), so it is a binary search.
func ByID(r Reader, id string) (*Event, error) {
	if _, err := ulid.ParseStrict(id); err != nil {
		return nil, ErrNotFound
	}
	size, err := r.Size()
	if err != nil {
		return nil, err
	}
	seq, err := search(r, size, func(e *Event) bool { return e.ID >= id })
	switch {
	case err != nil:
		return nil, err
	case seq > size:
		return nil, ErrNotFound
	}
	e, err := eventAt(r, seq)
	switch {
	case err != nil:
		return nil, err
	case e.ID != id:
		return nil, ErrNotFound
	}
	return e, nil
}

// search returns the first sequence number, of the first size, whose
// event f holds for, or size+1 if there is none. f must hold for every
// event after one it holds for, as it does for an id or a time at or past
// a bound: both grow along the log.
func search(r Reader, size uint64, f func(*Event) bool) (uint64, error) {
	var failed error
	i := sort.Search(int(size), func(i int) bool {
		if failed != nil {
			return true
		}
		e, err := eventAt(r, uint64(i+1))
		if err != nil {
			failed = err
			return true
		}
		return f(e)
	})
	return uint64(i + 1), failed
}

// List returns up to limit events that pass f, in sequence order, after
// the sequence number after (0: from the start), and the cursor to resume
// from (the last event's sequence number) when more may follow, else 0.
// Event times never decrease along the log, so Since and Until bound the
// walk by binary search; the other fields are checked event by event.
func List(r Reader, f Filter, after uint64, limit int) ([]*Event, uint64, error) {
	size, err := r.Size()
	if err != nil {
		return nil, 0, err
	}
	from, to, err := Bounds(r, size, f) // the sequence numbers to walk
	if err != nil {
		return nil, 0, err
	}
	from = max(from, after+1)
	var out []*Event
	var next uint64
	var failed error
	err = r.Leaves(from)(func(seq uint64, c, _ []byte) bool {
		if seq > to {
			return false
		}
		e, err := DecodeEvent(c)
		if err != nil {
			failed = err
			return false
		}
		if !f.Match(e) {
			return true
		}
		if len(out) == limit {
			next = out[len(out)-1].Seq
			return false
		}
		out = append(out, e)
		return true
	})
	if err = errors.Join(err, failed); err != nil {
		return nil, 0, err
	}
	return out, next, nil
}

// Bounds returns the sequence numbers, of a log of size events, that
// f's Since and Until leave to walk: from the first to the last, both
// included (from > to: none). Event times never decrease along the log,
// so each bound is a binary search.
func Bounds(r Reader, size uint64, f Filter) (from, to uint64, err error) {
	from, to = 1, size
	if !f.Since.IsZero() {
		if from, err = firstAtOrAfter(r, size, f.Since); err != nil {
			return 0, 0, err
		}
	}
	if !f.Until.IsZero() {
		first, err := firstAtOrAfter(r, size, f.Until)
		if err != nil {
			return 0, 0, err
		}
		to = first - 1
	}
	return from, to, nil
}

// firstAtOrAfter returns the sequence number of the first event at or
// after t, or size+1 if there is none.
func firstAtOrAfter(r Reader, size uint64, t time.Time) (uint64, error) {
	return search(r, size, func(e *Event) bool { return !e.Time.Before(t) })
}

// All calls fn with each event in sequence order, stopping at the first
// error, fn's or the store's.
func All(r Reader, fn func(*Event) error) error {
	var failed error
	err := r.Leaves(1)(func(_ uint64, c, _ []byte) bool {
		e, err := DecodeEvent(c)
		if err == nil {
			err = fn(e)
		}
		failed = err
		return err == nil
	})
	return errors.Join(err, failed)
}
