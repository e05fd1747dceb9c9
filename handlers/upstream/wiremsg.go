package upstream

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// peeked is what the capture of a Streamable HTTP upstream needs of one
// JSON-RPC message: a request's method and id, a response's id, result
// and error code. It is read as jsonrpc.DecodeMessage reads a message
// (the same members, their names matched exactly, the same ids), with
// encoding/json: the SDK's own decoder allocates a 32 KiB buffer for
// each message it reads, and the capture reads each call's request and
// response once more than the SDK does, which at many calls a second was
// a fifth of writerd's CPU (docs/PERFORMANCE.md).
type peeked struct {
	request bool
	method  string // a request's
	id      jsonrpc.ID
	result  json.RawMessage // a response's, unless it has an error
	code    *int64          // a response's error code, if it has an error
}

var errNotMessage = errors.New("upstream: not a JSON-RPC 2.0 message")

// peek reads data as one JSON-RPC message. Its members are decoded into
// a map, whose keys encoding/json matches exactly (a struct's fields it
// would match in any case), the last of a repeated member kept.
func peek(data []byte) (*peeked, error) {
	var m map[string]json.RawMessage
	// A decoder, as the SDK's: the first value is the message, and
	// whatever follows it is not read.
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&m); err != nil {
		return nil, errNotMessage
	}
	var version string
	if err := json.Unmarshal(m["jsonrpc"], &version); err != nil || version != "2.0" {
		return nil, errNotMessage
	}
	var v any // as the SDK reads an id: a float64 or a string
	if raw, ok := m["id"]; ok {
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, errNotMessage
		}
	}
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		return nil, errNotMessage
	}
	if raw, ok := m["method"]; ok {
		p := &peeked{request: true, id: id}
		if err := json.Unmarshal(raw, &p.method); err != nil {
			return nil, errNotMessage
		}
		return p, nil
	}
	if !id.IsValid() {
		return nil, errNotMessage
	}
	p := &peeked{id: id, result: m["result"]}
	if raw, ok := m["error"]; ok && string(raw) != "null" {
		var e map[string]json.RawMessage
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, errNotMessage
		}
		var code int64
		if c, ok := e["code"]; ok {
			if err := json.Unmarshal(c, &code); err != nil {
				return nil, errNotMessage
			}
		}
		p.code, p.result = &code, nil
	}
	return p, nil
}

// response is a peeked response as the SDK's jsonrpc.Response: its error,
// if it has one, by its code alone (the upstream's message is never kept).
func (p *peeked) response() *jsonrpc.Response {
	if p.code != nil {
		return &jsonrpc.Response{ID: p.id, Error: &jsonrpc.Error{Code: *p.code}}
	}
	return &jsonrpc.Response{ID: p.id, Result: p.result}
}
