package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// The gate is the one check every JSON-RPC frame passes before the SDK sees
// it, whatever the transport (docs/DESIGN.md section 8). The SDK decodes frames
// leniently (duplicate members last-wins, numeric ids through float64) and
// ends a stdio session at the first frame it cannot decode, so the gate
// decides what a frame is: a request, a notification, a response to a call
// of ours, or a refusal answered with a JSON-RPC error of a fixed message.

// maxFrameDepth is the deepest nesting of objects and arrays a frame may
// have; the SDK decodes no deeper. Arguments are bounded far lower by the
// pipeline's own depth limit.
const maxFrameDepth = 1000

// maxSafeID is 2^53−1: a numeric id beyond it is not exact in every
// client's JSON, so two requests could share an answer.
const maxSafeID = 1<<53 - 1

// Kind is what a frame the gate let through is.
type Kind int

const (
	KindRequest      Kind = iota + 1 // a method and an id: answered
	KindNotification                 // a method, no id: never answered
	KindResponse                     // an id and a result or an error: the answer to a call of the server's
)

// Message is a frame the gate let through, in its parts. Every part holds
// the bytes as sent (the frame's own: it must not change while the message
// is used): an answer carries ID exactly as the client wrote it.
type Message struct {
	Kind   Kind
	ID     jsontext.Value // nil for a notification
	Method string         // requests and notifications
	Params jsontext.Value // nil if absent; else an object or an array
	Result jsontext.Value // responses
	Error  jsontext.Value // responses; an object
}

// Refusal is a frame the gate refused: the JSON-RPC error that answers it.
// Its message is fixed and echoes nothing of the frame.
type Refusal struct {
	Code    int
	Message string
	// ID is the frame's id as sent, when it could be read: the frame is an
	// object with one well-formed id member. Otherwise the answer's id is
	// null.
	ID jsontext.Value
	// Reason is a bounded name for logs and metrics: parse, too_deep,
	// too_large, batch, not_object, duplicate_member, surrogate, version,
	// id, method, params, member, response.
	Reason string
}

// The JSON-RPC error codes of refusals.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
)

// The refusals, a fixed catalogue.
var (
	refuseParse     = Refusal{Code: CodeParseError, Reason: "parse", Message: "Parse error: the frame is not one valid JSON value in UTF-8."}
	refuseTooDeep   = Refusal{Code: CodeInvalidRequest, Reason: "too_deep", Message: "Invalid request: the frame is nested too deeply."}
	refuseTooLarge  = Refusal{Code: CodeInvalidRequest, Reason: "too_large", Message: "Invalid request: the frame is too large."}
	refuseBatch     = Refusal{Code: CodeInvalidRequest, Reason: "batch", Message: "Invalid request: batches are not supported; send one JSON-RPC message per frame."}
	refuseNotObject = Refusal{Code: CodeInvalidRequest, Reason: "not_object", Message: "Invalid request: a frame must be one JSON-RPC message, a JSON object."}
	refuseDuplicate = Refusal{Code: CodeInvalidRequest, Reason: "duplicate_member", Message: "Invalid request: the frame has a duplicate member; each member may appear once in an object."}
	refuseSurrogate = Refusal{Code: CodeInvalidRequest, Reason: "surrogate", Message: "Invalid request: a string in the frame has an unpaired surrogate escape; only a tool's arguments may hold one, and they are then the tool's invalid input."}
	refuseVersion   = Refusal{Code: CodeInvalidRequest, Reason: "version", Message: `Invalid request: the frame must have "jsonrpc": "2.0".`}
	refuseID        = Refusal{Code: CodeInvalidRequest, Reason: "id", Message: "Invalid request: an id must be a string or an integer within ±(2^53−1)."}
	refuseMethod    = Refusal{Code: CodeInvalidRequest, Reason: "method", Message: "Invalid request: method must be a string."}
	refuseParams    = Refusal{Code: CodeInvalidRequest, Reason: "params", Message: "Invalid request: params must be an object."}
	refuseMember    = Refusal{Code: CodeInvalidRequest, Reason: "member", Message: "Invalid request: the frame has a member JSON-RPC 2.0 does not define."}
	refuseResponse  = Refusal{Code: CodeInvalidRequest, Reason: "response", Message: "Invalid request: a response needs an id and exactly one of result or error, an object."}
)

// Gate checks one frame against docs/DESIGN.md section 8: one JSON object in
// UTF-8 with "jsonrpc": "2.0", no duplicate member and no unpaired
// surrogate escape outside a tools/call's arguments, an id that is absent,
// a string or an integer within ±(2^53−1), a string method, no batch. It
// returns the message, or the refusal to answer it with: under the
// frame's id whenever the frame is one JSON value in valid UTF-8 (escapes
// of unpaired surrogates are valid JSON text) and an object with one
// well-formed id member.
//
// What is wrong inside a tools/call's arguments (a duplicate member, an
// unpaired surrogate escape) is not the frame's fault: the message goes
// through, and the pipeline's strict parse answers it as the tool's
// INVALID_INPUT, under the request's id, so that the model can correct
// its call.
func Gate(frame []byte) (*Message, *Refusal) {
	if !utf8.Valid(frame) {
		return nil, &refuseParse
	}
	deep := false
	if r := checkSyntax(frame); r == &refuseTooDeep {
		deep = true // the id can still be read
	} else if r != nil {
		return nil, r
	}
	switch firstByte(frame) {
	case '{':
	case '[':
		return nil, &refuseBatch
	default:
		return nil, &refuseNotObject
	}
	members, order := topMembers(frame)
	var id jsontext.Value
	if ids := members["id"]; len(ids) == 1 && validID(ids[0]) {
		id = ids[0]
	}
	refuse := func(r Refusal) (*Message, *Refusal) {
		r.ID = id
		return nil, &r
	}
	if deep {
		return refuse(refuseTooDeep)
	}
	// The syntax is known to be valid, so a failure now is a duplicate
	// member or an unpaired surrogate escape, at whatever depth; only a
	// tools/call's arguments may hold them.
	if !jsontext.Value(frame).IsValid() {
		outside := withoutArguments(frame, members)
		switch {
		case jsontext.Value(outside).IsValid():
		case !jsontext.Value(outside).IsValid(jsontext.AllowInvalidUTF8(true)):
			return refuse(refuseDuplicate)
		default:
			return refuse(refuseSurrogate)
		}
	}
	if v := members["jsonrpc"]; len(v) != 1 || string(v[0]) != `"2.0"` {
		return refuse(refuseVersion)
	}
	if _, has := members["id"]; has && id == nil {
		return nil, &refuseID
	}
	m := &Message{ID: id}
	// In the frame's order, so that a frame with two faults is always
	// refused for the same one.
	for _, name := range order {
		v := members[name][0]
		switch name {
		case "jsonrpc", "id":
		case "method":
			if v.Kind() != '"' {
				return refuse(refuseMethod)
			}
			var err error
			if m.Method, err = unquote(v); err != nil {
				return refuse(refuseMethod)
			}
		case "params":
			if v.Kind() != '{' {
				return refuse(refuseParams)
			}
			m.Params = v
		case "result":
			m.Result = v
		case "error":
			if v.Kind() != '{' {
				return refuse(refuseResponse)
			}
			m.Error = v
		default:
			return refuse(refuseMember)
		}
	}
	_, hasMethod := members["method"]
	switch {
	case hasMethod && (m.Result != nil || m.Error != nil):
		return refuse(refuseMember)
	case hasMethod && id != nil:
		m.Kind = KindRequest
	case hasMethod:
		m.Kind = KindNotification
	case id == nil || (m.Result == nil) == (m.Error == nil) || m.Params != nil:
		return refuse(refuseResponse)
	default:
		m.Kind = KindResponse
	}
	return m, nil
}

// checkSyntax refuses a frame that is not one JSON value, or that nests
// deeper than maxFrameDepth. The frame's bytes are valid UTF-8 (Gate
// checked); escapes of unpaired surrogates and duplicate members are left
// to a later check, so that the id of such a frame can still be read.
func checkSyntax(frame []byte) *Refusal {
	fd := getDecoder(frame, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	defer fd.release()
	d := &fd.d
	for {
		tok, err := d.ReadToken()
		if err != nil {
			return &refuseParse
		}
		switch tok.Kind() {
		case '{', '[':
			if d.StackDepth() > maxFrameDepth {
				return &refuseTooDeep
			}
		}
		if d.StackDepth() == 0 {
			break
		}
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return &refuseParse // data after the value
	}
	return nil
}

// withoutArguments returns frame with the value of its params' first
// "arguments" member replaced by null, if the frame is a tools/call
// (one method member, "tools/call", and one params member, an object);
// else frame itself. What the two differ in is the tool's to judge.
func withoutArguments(frame []byte, members map[string][]jsontext.Value) []byte {
	m, p := members["method"], members["params"]
	if len(m) != 1 || len(p) != 1 || p[0].Kind() != '{' {
		return frame
	}
	if method, err := unquote(m[0]); err != nil || method != "tools/call" {
		return frame
	}
	fd := getDecoder(frame, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	defer fd.release()
	d := &fd.d
	if _, err := d.ReadToken(); err != nil {
		return frame
	}
	for d.PeekKind() == '"' {
		tok, err := d.ReadToken()
		if err != nil {
			return frame
		}
		if tok.String() != "params" {
			if d.SkipValue() != nil {
				return frame
			}
			continue
		}
		if _, err := d.ReadToken(); err != nil { // the params' '{'
			return frame
		}
		for d.PeekKind() == '"' {
			tok, err := d.ReadToken()
			if err != nil {
				return frame
			}
			name := tok.String()
			v, err := d.ReadValue()
			if err != nil {
				return frame
			}
			if name == "arguments" {
				end := int(d.InputOffset())
				out := make([]byte, 0, len(frame))
				out = append(append(out, frame[:end-len(v)]...), "null"...)
				return append(out, frame[end:]...)
			}
		}
		return frame
	}
	return frame
}

func firstByte(b []byte) byte {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

// topMembers returns the members of a syntactically valid object, each
// name with every value it was given, in order, and the names in the
// order of their first appearance. A name holding an unpaired surrogate
// escape is read with U+FFFD in its place: it is no name JSON-RPC
// defines, whichever.
func topMembers(frame []byte) (map[string][]jsontext.Value, []string) {
	members := map[string][]jsontext.Value{}
	var order []string
	fd := getDecoder(frame, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	defer fd.release()
	d := &fd.d
	if _, err := d.ReadToken(); err != nil {
		return members, order
	}
	for d.PeekKind() == '"' {
		tok, err := d.ReadToken()
		if err != nil {
			return members, order
		}
		name := tok.String() // before the next call voids tok
		v, err := d.ReadValue()
		if err != nil {
			return members, order
		}
		end := int(d.InputOffset())
		v = frame[end-len(v) : end] // the frame's own bytes
		if _, seen := members[name]; !seen {
			order = append(order, name)
		}
		members[name] = append(members[name], v)
	}
	return members, order
}

// frameDecoder reads one frame in place: over a bytes.Buffer, a decoder
// reads the buffer's bytes without copying them. Pooled, for the gate and
// the fast path parse every frame.
type frameDecoder struct {
	buf bytes.Buffer
	d   jsontext.Decoder
}

var frameDecoders = sync.Pool{New: func() any { return new(frameDecoder) }}

func getDecoder(b []byte, opts ...jsontext.Options) *frameDecoder {
	fd := frameDecoders.Get().(*frameDecoder)
	fd.buf = *bytes.NewBuffer(b)
	fd.d.Reset(&fd.buf, opts...)
	return fd
}

// release returns fd to the pool, holding nothing of its frame.
func (fd *frameDecoder) release() {
	fd.buf = bytes.Buffer{}
	fd.d.Reset(&fd.buf)
	frameDecoders.Put(fd)
}

// integerID is the form of a numeric id: an integer, with no fraction or
// exponent, so that its value is plain to every client.
var integerID = regexp.MustCompile(`^-?(0|[1-9][0-9]{0,15})$`)

// validID reports whether v is a string or an integer within ±(2^53−1).
func validID(v jsontext.Value) bool {
	switch v.Kind() {
	case '"':
		return true
	case '0':
		if !integerID.Match(v) {
			return false
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		return err == nil && -maxSafeID <= n && n <= maxSafeID
	}
	return false
}

// idKey names an id by its value, so that "\u0061" and "a" are one id:
// the key of an id in a notifications/cancelled.
func idKey(v jsontext.Value) (string, bool) {
	switch v.Kind() {
	case '"':
		s, err := unquote(v)
		return "s" + s, err == nil
	case '0':
		if !validID(v) {
			return "", false
		}
		n, _ := strconv.ParseInt(string(v), 10, 64)
		return "n" + strconv.FormatInt(n, 10), true
	}
	return "", false
}

func unquote(v jsontext.Value) (string, error) {
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", errors.New("not a string")
	}
	return s, nil
}

// Answer is the error response to the refused frame, one line without its
// end.
func (r *Refusal) Answer() []byte {
	return errorFrame(r.ID, r.Code, r.Message)
}

// errorFrame renders a JSON-RPC error response. id is the request's id as
// sent, written back byte for byte (encoding/json would rewrite its
// escapes); nil is null.
func errorFrame(id jsontext.Value, code int, message string) []byte {
	if id == nil {
		id = jsontext.Value("null")
	}
	msg, _ := json.Marshal(message)
	b := append([]byte(`{"jsonrpc":"2.0","id":`), id...)
	b = append(b, `,"error":{"code":`...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, `,"message":`...)
	b = append(b, msg...)
	return append(b, "}}"...)
}
