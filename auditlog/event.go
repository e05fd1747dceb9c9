package auditlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/writerd/writerd/digest"
)

// ErrNotFound is returned by a store's lookups for an event that does not
// exist, and for a tree size that has no checkpoint.
var ErrNotFound = errors.New("auditlog: no such event")

// Outcomes of a write as the audit log records them.
const (
	OK     = "ok"
	Failed = "failed"
)

// Event is one audit event, with the JSON members of docs/DESIGN.md section 7.
type Event struct {
	Seq            uint64    `json:"seq"`
	ID             string    `json:"id"`
	Time           time.Time `json:"time"`
	RequestID      string    `json:"request_id"`
	Principal      string    `json:"principal"`
	Transport      string    `json:"transport"`
	Tool           string    `json:"tool"`
	IdempotencyKey string    `json:"idempotency_key"`
	Digest         string    `json:"digest"`
	Outcome        string    `json:"outcome"`
	Code           string    `json:"code,omitempty"`
	Status         int       `json:"status,omitempty"`
	Targets        []Target  `json:"targets"`
	DurationMS     float64   `json:"duration_ms"`
}

// Target is an entity a write touched.
type Target struct {
	Kind     string `json:"kind"`
	ID       string `json:"id"`
	Revision int64  `json:"revision"`
}

// Canonical returns the event's RFC 8785 form: its stored bytes, the leaf
// of the Merkle tree.
func (e *Event) Canonical() ([]byte, error) { return e.canonical() }

// canonical returns the event's stored bytes: its RFC 8785 form.
func (e *Event) canonical() ([]byte, error) {
	if e.Targets == nil {
		e.Targets = []Target{}
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("auditlog: encode event: %w", err)
	}
	return digest.Canonical(b)
}

// DecodeEvent decodes an event from its canonical JSON, as a store keeps
// it.
func DecodeEvent(b []byte) (*Event, error) {
	return decode(b)
}

func decode(b []byte) (*Event, error) {
	e := new(Event)
	if err := json.Unmarshal(b, e); err != nil {
		return nil, fmt.Errorf("auditlog: decode event: %w", err)
	}
	return e, nil
}

// Follow gives e its place after the event of id prevID and time prevTime
// ("" and the zero time for the first event of a log): a time no earlier
// than prevTime and a ULID of its time greater than prevID, so that both
// follow the sequence whatever the clock did, across restarts too; ByID
// and List's time bounds rely on that order. A backend's Append calls it
// with the last event stored.
func (e *Event) Follow(prevID string, prevTime time.Time) error {
	if e.Time.Before(prevTime) {
		e.Time = prevTime
	}
	id, err := ulid.New(ulid.Timestamp(e.Time), ulid.DefaultEntropy())
	if err != nil {
		return fmt.Errorf("auditlog: new id: %w", err)
	}
	if prevID != "" {
		p, err := ulid.ParseStrict(prevID)
		if err != nil {
			return fmt.Errorf("auditlog: previous id: %w", err)
		}
		if id.Compare(p) <= 0 {
			id = increment(p)
		}
	}
	e.ID = id.String()
	return nil
}

// increment returns the ULID after u, as a 128-bit number.
func increment(u ulid.ULID) ulid.ULID {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]++
		if u[i] != 0 {
			break
		}
	}
	return u
}
