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

// The stored form of a record: a format byte (1), then principal, key,
// tool, digest, code and audit id each as a length (uvarint) and its bytes,
// the state (1 completed, 2 failed), the creation and expiry times each as
// a length and time.Time's binary form, and last the result's bytes as
// they are, so that a replay gives them back exactly. About 170 bytes
// besides the result, where the JSON of before took 330.
const format = 1

var states = map[idempotency.State]byte{idempotency.Completed: 1, idempotency.Failed: 2}

func marshal(r *idempotency.Record) ([]byte, error) {
	state, ok := states[r.State]
	if !ok {
		return nil, fmt.Errorf("boltkeys: encode record: the state %q is none of the two", r.State)
	}
	b := make([]byte, 0, 200+len(r.Result))
	b = append(b, format)
	for _, s := range []string{r.Principal, r.Key, r.Tool, r.Digest, r.Code, r.AuditID} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = append(b, state)
	for _, t := range []time.Time{r.CreatedAt, r.ExpiresAt} {
		tb, _ := t.MarshalBinary() // fails only on a zone offset of a fraction of a minute
		b = binary.AppendUvarint(b, uint64(len(tb)))
		b = append(b, tb...)
	}
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

// owner reads only the principal and key of a stored record.
func owner(v []byte) (principal, key string, err error) {
	if len(v) == 0 || v[0] != format {
		return "", "", errFormat
	}
	rd := &reader{b: v[1:]}
	principal, key = rd.string(), rd.string()
	if rd.bad {
		return "", "", errFormat
	}
	return principal, key, nil
}

func unmarshal(v []byte) (*idempotency.Record, error) {
	if len(v) == 0 || v[0] != format {
		return nil, errFormat
	}
	rd := &reader{b: v[1:]}
	r := &idempotency.Record{Principal: rd.string(), Key: rd.string(), Tool: rd.string(), Digest: rd.string(), Code: rd.string(), AuditID: rd.string()}
	if len(rd.b) == 0 {
		return nil, errFormat
	}
	for s, c := range states {
		if c == rd.b[0] {
			r.State = s
		}
	}
	rd.b = rd.b[1:]
	for _, t := range []*time.Time{&r.CreatedAt, &r.ExpiresAt} {
		if err := t.UnmarshalBinary(rd.bytes()); err != nil {
			rd.bad = true
		}
	}
	if rd.bad || r.State == "" {
		return nil, errFormat
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
