package auditlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/writerd/writerd/digest"
)

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

// stampOf reads an event's id and time from its canonical JSON, skipping
// the other members: Append needs only these of the last event, once per
// write inside the commit, where decoding it all cost a tenth of the
// write's time.
func stampOf(b []byte) (id string, t time.Time, err error) {
	fail := func(why string) (string, time.Time, error) {
		return "", time.Time{}, fmt.Errorf("auditlog: decode event: %s", why)
	}
	d := jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(true)) // no name tracking: it allocates
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return fail("not an object")
	}
	var haveID, haveTime bool
	for d.PeekKind() == '"' && !(haveID && haveTime) {
		name, err := d.ReadValue() // a name: valid until the next read
		if err != nil {
			return fail("a member name is malformed")
		}
		isID, isTime := string(name) == `"id"`, string(name) == `"time"`
		v, err := d.ReadValue()
		switch {
		case err != nil:
			return fail("a member value is malformed")
		case !isID && !isTime:
			continue
		case v.Kind() != '"':
			return fail("its id or time is not a string")
		}
		s, err := jsontext.AppendUnquote(nil, v)
		if err != nil {
			return fail("its id or time is not a string")
		}
		if isID {
			id, haveID = string(s), true
		} else if t, err = time.Parse(time.RFC3339Nano, string(s)); err != nil {
			return fail("its time is not RFC 3339")
		} else {
			haveTime = true
		}
	}
	if !haveID || !haveTime {
		return fail("no id or time")
	}
	return id, t, nil
}

func decode(b []byte) (*Event, error) {
	e := new(Event)
	if err := json.Unmarshal(b, e); err != nil {
		return nil, fmt.Errorf("auditlog: decode event: %w", err)
	}
	return e, nil
}
