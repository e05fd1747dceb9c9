package auditlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
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
	// Unknown is the outcome of a write outside the store whose call may
	// have reached its upstream and whose effect cannot be known
	// (docs/DESIGN.md section 5b); its code is OUTCOME_UNKNOWN.
	Unknown = "unknown"
)

// Format is the version of the event format that Append writes, in
// every new event's "format" member (Follow sets it). An event without
// one is of format 1, the format before writes outside the store, and
// keeps its bytes: its leaf in the tree does not change. DecodeEvent
// reads formats 1 to Format and refuses a later one with a FormatError,
// so that an earlier writerd never lists a newer log's events with
// members it does not know dropped (format 3 added upstream's method,
// path and http_status, for HTTP APIs); Verify reads no event's members
// (the tree is over the stored bytes), so it checks a log of any format.
const Format = 3

// FormatError is DecodeEvent's refusal of an event of a format later
// than Format: written by a newer writerd.
type FormatError struct {
	Seq    uint64 // the event's sequence number, as its JSON holds it
	Format int
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("event %d is of format %d, which this writerd does not read (it reads event formats 1 to %d): read the log with a writerd of that format or later; writerd audit verify checks the log meanwhile", e.Seq, e.Format, Format)
}

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

	// Format is the event format's version; 0 (absent) is format 1.
	Format int `json:"format,omitempty"`
	// Upstream is the call of a write outside the store.
	Upstream *Upstream `json:"upstream,omitempty"`
	// Resolves is set on an operator's resolution of an unknown write.
	Resolves *Resolution `json:"resolves,omitempty"`
}

// Upstream is what an event records of a write's call outside the
// store: never its arguments, its answer's text or a secret.
type Upstream struct {
	Name       string  `json:"name"`    // the upstream, as the config names it
	Tool       string  `json:"tool"`    // the upstream's own name of the tool
	Attempt    int     `json:"attempt"` // from 1; a takeover adds one
	End        string  `json:"end"`     // how the call ended (handlers/upstream's End)
	DurationMS float64 `json:"duration_ms"`
	// AnswerDigest is the SHA-256 of the answer's bytes as they arrived,
	// hex-encoded, when one arrived.
	AnswerDigest string `json:"answer_digest,omitempty"`

	// An HTTP API's call (format 3): its method, its path template as
	// the config writes it (never the expanded path, a query value, a
	// header or the body), and the status of its answer when one came.
	Method     string `json:"method,omitempty"`
	Path       string `json:"path,omitempty"`
	HTTPStatus int    `json:"http_status,omitempty"`
}

// Resolution is what a resolution event records of the unknown write it
// resolves: that write's event, principal and key, and the finding
// (idempotency.Applied or idempotency.NotApplied).
type Resolution struct {
	Event     string `json:"event"`
	Principal string `json:"principal"`
	Key       string `json:"key"`
	Finding   string `json:"finding"`
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
// it. A member this format does not have is refused, not dropped, and an
// event of a later format is a *FormatError: what is decoded is all the
// event holds, so that encoding it again (Canonical) gives its stored
// bytes.
func DecodeEvent(b []byte) (*Event, error) {
	e := new(Event)
	if err := e.decode(b); err != nil {
		return nil, err
	}
	return e, nil
}

// UnmarshalJSON decodes an event as DecodeEvent does, so that an event
// read inside another document (a page of the audit API) is refused
// alike.
func (e *Event) UnmarshalJSON(b []byte) error { return e.decode(b) }

// event is Event without its methods, for decode.
type event Event

func (e *Event) decode(b []byte) error {
	// RFC 8785 bytes, as stored: member names exactly as written (v1
	// would take "Seq" for "seq"), none unknown, none twice.
	err := jsonv2.Unmarshal(b, (*event)(e), jsonv2.RejectUnknownMembers(true))
	if err != nil || e.Format > Format {
		// A later format may add members: name the format, not the
		// member it added.
		var head struct {
			Seq    uint64 `json:"seq"`
			Format int    `json:"format"`
		}
		if json.Unmarshal(b, &head) == nil && head.Format > Format {
			return &FormatError{Seq: head.Seq, Format: head.Format}
		}
	}
	switch {
	case err != nil:
		return fmt.Errorf("auditlog: decode event: %w", err)
	case e.Format == 2 && e.Upstream != nil && (e.Upstream.Method != "" || e.Upstream.Path != "" || e.Upstream.HTTPStatus != 0):
		return errors.New("auditlog: decode event: an upstream member of format 3 in an event of format 2")
	case e.Format < 0 || e.Format == 1:
		// Format 1 is written without the member; 0 and 1 are never
		// written, so encoding them again would change the bytes.
		return fmt.Errorf("auditlog: decode event: format %d", e.Format)
	}
	return nil
}

// Follow gives e its place after the event of id prevID and time prevTime
// ("" and the zero time for the first event of a log): a time no earlier
// than prevTime and a ULID of its time greater than prevID, so that both
// follow the sequence whatever the clock did, across restarts too; ByID
// and List's time bounds rely on that order. A backend's Append calls it
// with the last event stored, so it also sets the event's Format: every
// event appended says it is of the current format.
func (e *Event) Follow(prevID string, prevTime time.Time) error {
	e.Format = Format
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
