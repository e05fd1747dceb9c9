package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/writerd/writerd/auditlog"
)

// A write outside the store (docs/DESIGN.md section 5b) is a tool whose
// effect happens elsewhere, at an upstream writerd does not own: its
// change cannot join the transaction of its idempotency record and audit
// event. The pipeline runs it in three steps instead: a pending record of
// the key committed before anything is sent (pending.go), the call
// outside any transaction, and a completion fenced by the record's owner
// and attempt. This file defines such tools; the package that knows the
// upstream (handlers/upstream) implements External for each.

// Disposition is what an answer from outside the store means for its
// write.
type Disposition int

const (
	// NotSent: the call provably never reached the upstream. Its pending
	// record is deleted, no event is written, and the caller is answered
	// UNAVAILABLE with same_key.
	NotSent Disposition = iota + 1
	// Done: the upstream answered; Output is the structured result.
	Done
	// Refused: the upstream refused the call (UPSTREAM_REFUSED).
	Refused
	// Uncertain: the call may have taken effect and no answer says how:
	// it is sent again under its key where the tool allows (Redrive),
	// and otherwise its outcome is unknown (OUTCOME_UNKNOWN).
	Uncertain
	// InFlight: the upstream says the key's first request is still
	// running. The record stays pending, to be re-driven under its key
	// after RetryAfter by the takeover sweep, and the caller is answered
	// IDEMPOTENCY_KEY_IN_USE with same_key. Only a tool that may be
	// re-driven has it; any other treats it as Uncertain.
	InFlight
	// UpstreamKeyReused: the upstream says the key was used before with
	// another payload: writerd derived one key for two writes, a fault
	// of its own, never a second write. The write fails with INTERNAL
	// and retry new_key, with one event, and an error line.
	UpstreamKeyReused
)

// External sends the calls of one tool outside the store.
type External interface {
	// Slot waits at most wait for one of the upstream's call slots and
	// returns its release, before anything of the call is recorded.
	// ErrNoSlot says the wait ran out, ctx's error that the caller went
	// away, an UNAVAILABLE *Error why the tool cannot be called now (its
	// upstream down, its definition changed); each is answered UNAVAILABLE
	// with same_key, nothing recorded.
	Slot(ctx context.Context, wait time.Duration) (release func(), err error)
	// Send sends one attempt of the call and says how it ended. ctx is
	// not the caller's: the caller's going away does not end it, and
	// Send bounds the call with the upstream's own timeout.
	Send(ctx context.Context, call *ExternalCall) *ExternalAnswer
}

// ExternalChecker is an External that can refuse arguments before
// anything of the call is recorded, as the strict parse does: an HTTP
// API's path argument that would leave its segment. Its error is an
// *Error (INVALID_INPUT, INPUT_TOO_LARGE) naming the argument; any
// other is INTERNAL.
type ExternalChecker interface {
	Check(args json.RawMessage) error
}

// check runs x's Check, if it has one.
func (x *external) check(args json.RawMessage) *Error {
	c, ok := x.ext.(ExternalChecker)
	if !ok {
		return nil
	}
	if err := c.Check(args); err != nil {
		return Public(err)
	}
	return nil
}

// ErrNoSlot is returned by External.Slot when every slot stayed busy for
// the whole wait.
var ErrNoSlot = errors.New("pipeline: no call slot free")

// ExternalCall is one sending of a write (or a read) outside the store.
type ExternalCall struct {
	// Args are the arguments as sent: the call's canonical arguments
	// without idempotency_key and confirm, the same on every attempt.
	Args json.RawMessage
	// UpstreamKey is the key of the write for the upstream (empty for a
	// read): the same on every attempt and every replica.
	UpstreamKey string
	Principal   string
	// Attempt is the pending record's attempt (1, and one more for each
	// takeover); Send counts the sendings within it, from 1.
	Attempt, Send int
}

// ExternalAnswer is how one sending ended.
type ExternalAnswer struct {
	Disposition Disposition
	// End is how the call ended, as the audit event's upstream.end
	// records it (handlers/upstream's End values).
	End string
	// Output is the structured result, for Done: checked against the
	// tool's output schema by the pipeline; one that breaks it makes the
	// outcome unknown, since the upstream acted.
	Output json.RawMessage
	// AnswerDigest is the hex SHA-256 of the answer as it arrived, if one
	// did.
	AnswerDigest string
	// Targets are the entities the answer names, for the audit event.
	Targets []auditlog.Target
	// Status is the upstream's HTTP status, for an HTTP API (0 for an
	// MCP upstream): a refusal's answer names it.
	Status int
	// RetryAfter is how long the upstream asked to wait (InFlight).
	RetryAfter time.Duration
	// Credential, with NotSent: the upstream refused writerd's own
	// credential, so nothing ran; the caller is told it is the
	// operator's to fix.
	Credential bool
	// Cause is the private reason of an answer that is not Done, for the
	// logs at debug level: it may hold the upstream's text, which never
	// reaches a caller or the info-level log.
	Cause    error
	Duration time.Duration
}

// ExternalSpec describes a tool whose effect is outside the store.
type ExternalSpec struct {
	Name        string
	Title       string
	Description string
	// ReadOnly tools are passed through: no key, no record, no event.
	ReadOnly bool
	// Destructive write tools need "confirm": true; the unconfirmed call
	// answers CONFIRMATION_REQUIRED with Preview's value and never calls
	// the upstream.
	Destructive bool
	// InputSchema is the schema of the upstream's arguments, closed and
	// bounded as writerd enforces it, without idempotency_key and
	// confirm: DefineExternal adds them (a schema that defines either is
	// refused).
	InputSchema json.RawMessage
	// OutputSchema is the schema of Output, the structured result.
	OutputSchema json.RawMessage
	// Scope, if set, is a scope the caller must hold besides read or
	// write.
	Scope string
	// Redrive allows an uncertain call to be sent again under its
	// upstream key: the upstream honours keys, or the tool is declared
	// idempotent.
	Redrive bool
	// Upstream and UpstreamTool name the upstream and its own name of
	// the tool, for the audit event.
	Upstream, UpstreamTool string
	// RedriveWithin bounds a re-drive (0: no bound): past it from the
	// pending record's creation, the upstream no longer keeps the key (an
	// HTTP API's key TTL), and a call that may have reached it is
	// recorded unknown, never sent again.
	RedriveWithin time.Duration
	// Method and Path are an HTTP API endpoint's method and path
	// template, for its events ("" for an MCP server's tool).
	Method, Path string
	External     External
	// Preview is what an unconfirmed destructive call shows: what would
	// be sent, and to which upstream.
	Preview func(args json.RawMessage) any
}

// external is what a Tool keeps of its ExternalSpec.
type external struct {
	upstream, tool string
	method, path   string
	within         time.Duration // ExternalSpec.RedriveWithin
	redrive        bool
	ext            External
}

// externalInput is the decoded input of an external tool: its key, its
// confirmation, and the arguments to send.
type externalInput struct {
	Key     string `json:"idempotency_key"`
	Confirm bool   `json:"confirm"`
	args    json.RawMessage
}

func (in *externalInput) idempotencyKey() string { return in.Key }
func (in *externalInput) confirmed() bool        { return in.Confirm }

// UnmarshalJSON reads the two members the pipeline acts on; the schema
// check has already checked every member.
func (in *externalInput) UnmarshalJSON(b []byte) error {
	var head struct {
		Key     string `json:"idempotency_key"`
		Confirm bool   `json:"confirm"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return err
	}
	in.Key, in.Confirm = head.Key, head.Confirm
	return nil
}

// readInput is the decoded input of an external read tool.
type readInput struct{ args json.RawMessage }

func (in *readInput) UnmarshalJSON([]byte) error { return nil }

// DefineExternal builds a Tool whose effect is outside the store. Its
// input schema is spec's, closed (additionalProperties false), with the
// idempotency key of a write and the confirmation of a destructive tool
// added, compiled by the strict parse's checker: a keyword it does not
// enforce, a $ref it cannot resolve, or a string, array or object left
// unbounded refuses the tool.
func DefineExternal[D any](spec ExternalSpec) (*Tool[D], error) {
	switch {
	case spec.Name == "" || spec.External == nil:
		return nil, fmt.Errorf("pipeline: tool %q: a name and an External are required", spec.Name)
	case spec.ReadOnly && spec.Destructive:
		return nil, fmt.Errorf("pipeline: tool %s: a read tool deletes nothing", spec.Name)
	case spec.Destructive && spec.Preview == nil:
		return nil, fmt.Errorf("pipeline: tool %s: a destructive tool has a Preview", spec.Name)
	case len(spec.OutputSchema) == 0:
		return nil, fmt.Errorf("pipeline: tool %s: an output schema is required", spec.Name)
	case spec.Scope != "" && !ValidScopeName(spec.Scope):
		return nil, fmt.Errorf("pipeline: tool %s: %q is no scope name", spec.Name, spec.Scope)
	}
	in, err := externalSchema(spec)
	if err != nil {
		return nil, fmt.Errorf("pipeline: tool %s: input schema: %w", spec.Name, err)
	}
	description := spec.Description
	if !spec.ReadOnly {
		description = strings.TrimSpace(description + " " + RetryAdvice)
	}
	t := &Tool[D]{
		ToolInfo: &ToolInfo{
			Name: spec.Name, Title: spec.Title, Description: description,
			ReadOnly: spec.ReadOnly, Destructive: spec.Destructive,
			// An upstream's write may change what exists: it is
			// advertised as destructive unless it is a read.
			Overwrites: !spec.ReadOnly && !spec.Destructive,
			Scope:      spec.Scope, OpenWorld: true,
			InputSchema: in, OutputSchema: spec.OutputSchema,
		},
		external: &external{upstream: spec.Upstream, tool: spec.UpstreamTool, method: spec.Method, path: spec.Path, within: spec.RedriveWithin, redrive: spec.Redrive, ext: spec.External},
	}
	if spec.ReadOnly {
		t.newInput = func() any { return new(readInput) }
	} else {
		t.newInput = func() any { return new(externalInput) }
	}
	if spec.Preview != nil {
		t.preview = func(_ context.Context, _ *Op[D], v any) (any, error) {
			return spec.Preview(v.(*externalInput).args), nil
		}
	}
	if t.input, err = compileSchema(t.InputSchema); err != nil {
		return nil, fmt.Errorf("pipeline: tool %s: input %w", spec.Name, err)
	}
	if t.result, err = compileSchema(t.OutputSchema); err != nil {
		return nil, fmt.Errorf("pipeline: tool %s: output %w", spec.Name, err)
	}
	var tree map[string]any
	if err := json.Unmarshal(t.InputSchema, &tree); err != nil {
		return nil, err
	}
	if err := checkBounded("", tree); err != nil {
		return nil, fmt.Errorf("pipeline: tool %s: %w", spec.Name, err)
	}
	t.names = make(map[string]bool)
	collectNames(tree, t.names)
	return t, nil
}

// externalSchema is spec's input schema as writerd enforces and
// advertises it.
func externalSchema(spec ExternalSpec) (json.RawMessage, error) {
	var s map[string]any
	if err := json.Unmarshal(spec.InputSchema, &s); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if s == nil {
		s = map[string]any{}
	}
	if t, ok := s["type"]; ok && t != "object" {
		return nil, errors.New(`the root is not of type "object"`)
	}
	s["type"] = "object"
	closeObjects(s)
	s["additionalProperties"] = false
	props, _ := s["properties"].(map[string]any)
	if props == nil {
		if _, ok := s["properties"]; ok {
			return nil, errors.New("properties is not an object")
		}
		props = map[string]any{}
	}
	var required []any
	if r, ok := s["required"]; ok {
		if required, ok = r.([]any); !ok {
			return nil, errors.New("required is not an array")
		}
	}
	add := map[string]any{}
	if !spec.ReadOnly {
		add["idempotency_key"] = keySchema
		required = append(required, "idempotency_key")
	}
	if spec.Destructive {
		add["confirm"] = confirmSchema
	}
	for name, sub := range add {
		if _, clash := props[name]; clash {
			return nil, fmt.Errorf("the upstream's schema defines %q, which writerd adds", name)
		}
		props[name] = sub
	}
	s["properties"] = props
	if len(required) > 0 {
		s["required"] = required
	}
	return json.Marshal(s)
}

// closeObjects closes every object schema under s that names its
// properties and says nothing of others (additionalProperties false), as
// the strict parse closes writerd's own: a member the upstream's schema
// does not name is refused, never passed on for the upstream to ignore
// or misread. An object whose additionalProperties is a schema (a map)
// stays open, to be bounded by the config's max_properties.
func closeObjects(s map[string]any) {
	if _, named := s["properties"]; named {
		if _, said := s["additionalProperties"]; !said {
			s["additionalProperties"] = false
		}
	}
	for _, kw := range []string{"items", "additionalProperties", "not", "propertyNames", "contains", "if", "then", "else"} {
		if sub, ok := s[kw].(map[string]any); ok {
			closeObjects(sub)
		}
	}
	for _, kw := range []string{"properties", "$defs", "definitions", "patternProperties"} {
		if subs, ok := s[kw].(map[string]any); ok {
			for _, sub := range subs {
				if m, ok := sub.(map[string]any); ok {
					closeObjects(m)
				}
			}
		}
	}
	// Not allOf's: each of its schemas sees the whole object, and one
	// closed on its own properties would refuse the others'.
	for _, kw := range []string{"anyOf", "oneOf", "prefixItems"} {
		if subs, ok := s[kw].([]any); ok {
			for _, sub := range subs {
				if m, ok := sub.(map[string]any); ok {
					closeObjects(m)
				}
			}
		}
	}
}

// keySchema and confirmSchema are the members DefineExternal adds, as
// Define generates them from Key and Confirm.
var keySchema, confirmSchema = func() (map[string]any, map[string]any) {
	member := func(raw json.RawMessage, name string) map[string]any {
		var s struct {
			Properties map[string]map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(raw, &s); err != nil || s.Properties[name] == nil {
			panic("pipeline: no generated schema for " + name)
		}
		return maps.Clone(s.Properties[name])
	}
	k, err := generateSchema[Key]()
	if err != nil {
		panic(err)
	}
	c, err := generateSchema[Confirm]()
	if err != nil {
		panic(err)
	}
	return member(k, "idempotency_key"), member(c, "confirm")
}()

// readExternal passes a read tool's call through: no key, no record, no
// event; one slot of the upstream.
func (p *Pipeline[D]) readExternal(ctx context.Context, c Caller, t *Tool[D], in *readInput) *Result {
	reqID := RequestID(ctx)
	if e := t.external.check(in.args); e != nil {
		return &Result{RequestID: reqID, Outcome: OutcomeRejected, Err: e}
	}
	free, err := t.external.ext.Slot(ctx, p.cfg.KeyWait)
	if err != nil {
		return &Result{RequestID: reqID, Outcome: OutcomeError, Err: noSlot(err)}
	}
	defer free()
	ans := t.external.ext.Send(ctx, &ExternalCall{Args: in.args, Principal: c.Principal, Send: 1})
	if ans.Disposition == Done {
		if err := t.checkResult(ans.Output); err == nil {
			return &Result{RequestID: reqID, Outcome: OutcomeOK, Output: ans.Output}
		}
	}
	if ans.Disposition == Refused {
		return &Result{RequestID: reqID, Outcome: OutcomeRefused, Err: Errorf(UpstreamRefused, upstreamRefusedMessage)}
	}
	return &Result{RequestID: reqID, Outcome: OutcomeError, Err: Errorf(Unavailable, upstreamReadMessage)}
}

// noSlot is the answer to a call that found no slot of its upstream, or
// whose caller went away while it waited: nothing was recorded.
func noSlot(err error) *Error {
	var e *Error
	if errors.As(err, &e) && e.Code == Unavailable {
		return e // the External's own sentence: a tool withdrawn, an upstream down
	}
	if errors.Is(err, ErrNoSlot) {
		return Wrap(Unavailable, err, "The upstream of this tool is busy with other calls and nothing of this one was recorded; send it again with the same key shortly.")
	}
	return Cancelled(err)
}

// The answers of writes outside the store, from the catalogue.
const (
	upstreamRefusedMessage = "The upstream refused this call; change the arguments as its tool's description says and send it with a new key."
	upstreamStatusMessage  = "The upstream refused the call with HTTP %d; change the arguments as its tool's description says and send it with a new key."
	upstreamReadMessage    = "The upstream of this tool did not give an answer that can be returned; send the same call again shortly."
	notSentMessage         = "The upstream of this tool could not be reached and the call was not sent; send it again with the same key shortly."
	credentialMessage      = "The upstream of this tool refused writerd's own credential and did not run the call; its operator has been alerted. Send it again with the same key later."
)
