package boltkeys

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/writerd/writerd/idempotency"
)

// The stored form of a record, in one of two formats, told by its first
// byte.
//
// Format 1, a record of a write inside the store (completed or failed,
// none of the members of a write outside it set): principal, key, tool,
// digest, code and audit id each as a length (uvarint) and its bytes, the
// state (1 completed, 2 failed), the creation and expiry times each as a
// length and time.Time's binary form, and last the result's bytes as they
// are, so that a replay gives them back exactly. About 170 bytes besides
// the result, where the JSON of before took 330.
//
// Format 2, any other record (a write outside the store, docs/DESIGN.md
// section 5b): the state (1 to 4: completed, failed, pending, unknown)
// second, so that the collector and the unsettled index read it without
// decoding the rest; then principal, key and resolution (the three that
// say whether the record is unsettled), tool, digest, code, audit id,
// owner, upstream key and resolution id as in format 1; the attempt (a
// uvarint); the creation, expiry, lease and resolution times (a zero time
// as length 0); the arguments as a length and their bytes; and last the
// result as it is. Some 20 bytes more than format 1 besides the
// arguments.
//
// Records format 1 can hold are written in it, so that an earlier
// writerd, which knows format 1 only, still reads every record but those
// of writes outside the store; those it refuses (errFormat), never
// misreads.
const (
	format1 = 1
	format2 = 2
)

var states = map[idempotency.State]byte{idempotency.Completed: 1, idempotency.Failed: 2, idempotency.Pending: 3, idempotency.Unknown: 4}

// stateOf is the state a stored state byte stands for, or "".
func stateOf(c byte) idempotency.State {
	for s, b := range states {
		if b == c {
			return s
		}
	}
	return ""
}

// plain reports whether format 1 holds r: a record of a write inside the
// store, with none of the members of a write outside it.
func plain(r *idempotency.Record) bool {
	return (r.State == idempotency.Completed || r.State == idempotency.Failed) &&
		r.Owner == "" && r.Attempt == 0 && r.LeaseUntil == (time.Time{}) && r.UpstreamKey == "" && len(r.Args) == 0 &&
		r.Resolution == "" && r.ResolutionID == "" && r.ResolvedAt == (time.Time{})
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTime(b []byte, t time.Time) []byte {
	tb, _ := t.MarshalBinary() // fails only on a zone offset of a fraction of a minute
	b = binary.AppendUvarint(b, uint64(len(tb)))
	return append(b, tb...)
}

func marshal(r *idempotency.Record) ([]byte, error) {
	state, ok := states[r.State]
	if !ok {
		return nil, fmt.Errorf("boltkeys: encode record: the state %q is none of the four", r.State)
	}
	if r.Attempt < 0 {
		return nil, fmt.Errorf("boltkeys: encode record: the attempt %d is negative", r.Attempt)
	}
	if plain(r) {
		b := make([]byte, 0, 200+len(r.Result))
		b = append(b, format1)
		for _, s := range []string{r.Principal, r.Key, r.Tool, r.Digest, r.Code, r.AuditID} {
			b = appendString(b, s)
		}
		b = append(b, state)
		for _, t := range []time.Time{r.CreatedAt, r.ExpiresAt} {
			b = appendTime(b, t)
		}
		return append(b, r.Result...), nil
	}
	b := make([]byte, 0, 300+len(r.Args)+len(r.Result))
	b = append(b, format2, state)
	for _, s := range []string{r.Principal, r.Key, r.Resolution, r.Tool, r.Digest, r.Code, r.AuditID, r.Owner, r.UpstreamKey, r.ResolutionID} {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, uint64(r.Attempt))
	for _, t := range []time.Time{r.CreatedAt, r.ExpiresAt, r.LeaseUntil, r.ResolvedAt} {
		if t == (time.Time{}) {
			b = append(b, 0)
			continue
		}
		b = appendTime(b, t)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Args)))
	b = append(b, r.Args...)
	return append(b, r.Result...), nil
}

// errFormat is the error of bytes that are no stored record.
var errFormat = errors.New("boltkeys: decode record: not a stored record")

// reader reads a stored record's fields in order; a short or malformed
// field sets bad and reads as empty.
type reader struct {
	b   []byte
	bad bool
}

func (rd *reader) bytes() []byte {
	n, w := binary.Uvarint(rd.b)
	if w <= 0 || n > uint64(len(rd.b)-w) {
		rd.bad, rd.b = true, nil
		return nil
	}
	v := rd.b[w : w+int(n)]
	rd.b = rd.b[w+int(n):]
	return v
}

func (rd *reader) string() string { return string(rd.bytes()) }

func (rd *reader) uint() uint64 {
	n, w := binary.Uvarint(rd.b)
	if w <= 0 {
		rd.bad, rd.b = true, nil
		return 0
	}
	rd.b = rd.b[w:]
	return n
}

// time reads a time; zero reads a length 0 as the zero time (format 2).
func (rd *reader) time(t *time.Time, zero bool) {
	tb := rd.bytes()
	if zero && len(tb) == 0 && !rd.bad {
		*t = time.Time{}
		return
	}
	if err := t.UnmarshalBinary(tb); err != nil {
		rd.bad = true
	}
}

// header is what a stored record's first members say of it without
// decoding the rest: whose it is, and whether it is unsettled (pending,
// or unknown with no resolution), which the collector never deletes and
// the unsettled index holds.
func header(v []byte) (principal, key string, unsettled bool, err error) {
	if len(v) == 0 {
		return "", "", false, errFormat
	}
	var rd *reader
	var state idempotency.State
	switch v[0] {
	case format1:
		rd = &reader{b: v[1:]}
	case format2:
		if len(v) < 2 {
			return "", "", false, errFormat
		}
		state, rd = stateOf(v[1]), &reader{b: v[2:]}
		if state == "" {
			return "", "", false, errFormat
		}
	default:
		return "", "", false, errFormat
	}
	principal, key = rd.string(), rd.string()
	switch state {
	case idempotency.Pending:
		unsettled = true
	case idempotency.Unknown:
		unsettled = len(rd.bytes()) == 0
	}
	if rd.bad {
		return "", "", false, errFormat
	}
	return principal, key, unsettled, nil
}

// owner reads only the principal and key of a stored record.
func owner(v []byte) (principal, key string, err error) {
	principal, key, _, err = header(v)
	return principal, key, err
}

func unmarshal(v []byte) (*idempotency.Record, error) {
	if len(v) == 0 {
		return nil, errFormat
	}
	switch v[0] {
	case format1:
		return unmarshal1(v[1:])
	case format2:
		return unmarshal2(v[1:])
	}
	return nil, errFormat
}

func unmarshal1(v []byte) (*idempotency.Record, error) {
	rd := &reader{b: v}
	r := &idempotency.Record{Principal: rd.string(), Key: rd.string(), Tool: rd.string(), Digest: rd.string(), Code: rd.string(), AuditID: rd.string()}
	if len(rd.b) == 0 {
		return nil, errFormat
	}
	r.State = stateOf(rd.b[0])
	rd.b = rd.b[1:]
	rd.time(&r.CreatedAt, false)
	rd.time(&r.ExpiresAt, false)
	if rd.bad || (r.State != idempotency.Completed && r.State != idempotency.Failed) {
		return nil, errFormat
	}
	if len(rd.b) > 0 {
		r.Result = bytes.Clone(rd.b)
	}
	return r, nil
}

func unmarshal2(v []byte) (*idempotency.Record, error) {
	if len(v) == 0 {
		return nil, errFormat
	}
	r := &idempotency.Record{State: stateOf(v[0])}
	rd := &reader{b: v[1:]}
	for _, s := range []*string{&r.Principal, &r.Key, &r.Resolution, &r.Tool, &r.Digest, &r.Code, &r.AuditID, &r.Owner, &r.UpstreamKey, &r.ResolutionID} {
		*s = rd.string()
	}
	attempt := rd.uint()
	for _, t := range []*time.Time{&r.CreatedAt, &r.ExpiresAt, &r.LeaseUntil, &r.ResolvedAt} {
		rd.time(t, true)
	}
	args := rd.bytes()
	if rd.bad || r.State == "" || attempt > 1<<31-1 {
		return nil, errFormat
	}
	r.Attempt = int(attempt)
	if len(args) > 0 {
		r.Args = bytes.Clone(args)
	}
	if len(rd.b) > 0 {
		r.Result = bytes.Clone(rd.b)
	}
	return r, nil
}

// unmarshalJSON decodes a record of the earlier layout, for the conversion:
// its members as JSON, a newline, then the result's bytes as they are; or,
// earlier still, one JSON object with the result in base64.
func unmarshalJSON(b []byte) (*idempotency.Record, error) {
	head, result, split := bytes.Cut(b, []byte{'\n'})
	r := new(idempotency.Record)
	if err := json.Unmarshal(head, r); err != nil {
		return nil, err
	}
	if split && len(result) > 0 {
		r.Result = bytes.Clone(result)
	}
	return r, nil
}
