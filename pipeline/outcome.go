package pipeline

import (
	"context"
	"encoding/json"
	"time"

	"github.com/writerd/writerd/idempotency"
)

// The outcome tool answers "what became of my call?" without running
// anything. Since MCP 2026-07-28 a broken response stream loses the
// request in flight and the client must send it again as a new request,
// so an agent often does not know whether a write ran. Resending the same
// call with the same key is always safe, but it runs the write if it never
// arrived; get_write_outcome lets the agent look first. It reads the
// caller's own idempotency record (keys are per principal: no caller sees
// another's), and the calls in flight: this process's by its key locks,
// another process's by the store's claim (RunningKeys) where the store is
// shared.

// OutcomeToolName is the name of the outcome tool New registers.
const OutcomeToolName = "get_write_outcome"

// The states of a write's outcome.
const (
	WriteNone      = "none"      // no live record and no claim held: it never arrived, its key expired, or it is in flight but not begun on another replica
	WriteRunning   = "running"   // a call with the key is held by this process, or has begun its write on any process
	WriteCompleted = "completed" // it ran: result is what a replay returns
	WriteFailed    = "failed"    // it was refused: code says why
	WriteUnknown   = "unknown"   // a write outside the store whose outcome cannot be known; resolution, once an operator found it
)

// RunningKeys is implemented by the Keys of a store several processes
// share (docs/DESIGN.md section 13): Running reports whether a write
// transaction holds principal's key by the claim rule, in this process or
// another. A store one process holds need not implement it: the pipeline
// knows that process's calls by its key locks.
type RunningKeys interface {
	Running(principal, key string) (bool, error)
}

// WriteOutcomeInput is get_write_outcome's input.
type WriteOutcomeInput struct {
	Key string `json:"key" jsonschema:"minLength=8,maxLength=128,pattern=^[A-Za-z0-9._:-]+$" jsonschema_description:"The idempotency_key of a write this caller sent."`
}

// WriteOutcome is get_write_outcome's answer.
type WriteOutcome struct {
	State string `json:"state" jsonschema:"enum=none,enum=running,enum=completed,enum=failed,enum=unknown" jsonschema_description:"none: nothing with this key is committed and no claim on it is held (it never arrived, its key expired, or it is still in flight on another replica and has not begun there), so sending the call again with the same key is safe and never runs it twice; running: a call with this key is running now (for an upstream's tool: since is when it began, attempt its attempt), so ask again shortly; completed: it ran, and result is its answer; failed: it was refused, and code says why; unknown: it may have reached an upstream and its outcome cannot be known, it is never sent again, and resolution says what an operator found, once one did."`
	// Tool is the write's tool, when it completed or failed.
	Tool string `json:"tool,omitempty" jsonschema_description:"The tool the write called."`
	// Result is the structured result, byte for byte what a replay of the
	// call returns.
	Result json.RawMessage `json:"result,omitempty" jsonschema_description:"The write's structured result, as a retry with the same key returns it."`
	// AuditID is the write's audit event.
	AuditID string `json:"audit_id,omitempty" jsonschema_description:"The id of the write's audit event."`
	// Code is the error code of a failed write.
	Code string `json:"code,omitempty" jsonschema_description:"The error code the write failed with."`
	// ExpiresAt is when the key's record expires: from then on the key is
	// new again, and the state none.
	ExpiresAt *time.Time `json:"expires_at,omitempty" jsonschema_description:"When the key expires: from then on the state is none and the key runs a new write."`
	// Since and Attempt describe a running write outside the store.
	Since   *time.Time `json:"since,omitempty" jsonschema_description:"When a running write to an upstream began."`
	Attempt int        `json:"attempt,omitempty" jsonschema:"minimum=1,maximum=1000" jsonschema_description:"The attempt of a running write to an upstream: 1, and one more each time another process took it over."`
	// Resolution is an operator's finding on an unknown write, and
	// ResolutionID the audit event that recorded it.
	Resolution   string `json:"resolution,omitempty" jsonschema:"enum=applied,enum=not_applied" jsonschema_description:"What an operator found of an unknown write: applied (it took effect) or not_applied."`
	ResolutionID string `json:"resolution_id,omitempty" jsonschema:"maxLength=26" jsonschema_description:"The audit event of the resolution."`
}

// outcomeTool is get_write_outcome, for a pipeline of domain D.
func outcomeTool[D any]() *Tool[D] {
	return MustDefine(Spec[D, WriteOutcomeInput, WriteOutcome]{
		Name:  OutcomeToolName,
		Title: "Get a write's outcome",
		Description: "Tells what became of a write this caller sent with an idempotency_key, without running anything: " +
			"none (nothing committed and no claim held: it never arrived, it expired, or it is still in flight; sending it again with the same key is safe and never runs it twice), running, completed (with the result a retry would return), failed (with its code) or unknown (a write to an upstream that may have taken effect: never sent again; with an operator's resolution once there is one). " +
			"Use it when a write's answer was lost, for example after a timeout or a broken connection, before deciding to send it again.",
		ReadOnly: true,
		Run: func(ctx context.Context, op *Op[D], in *WriteOutcomeInput) (*WriteOutcome, error) {
			return op.outcome(op.Caller.Principal, in.Key)
		},
	})
}

// outcome reads the outcome of principal's key in the read transaction
// op runs in.
func (op *Op[D]) outcome(principal, key string) (*WriteOutcome, error) {
	rec, err := op.keys.Get(principal, key)
	if err != nil {
		return nil, err
	}
	if rec != nil && !rec.Expired(op.Now) {
		o := &WriteOutcome{Tool: rec.Tool, AuditID: rec.AuditID}
		if rec.ExpiresAt.Before(idempotency.Never) {
			expires := rec.ExpiresAt.UTC()
			o.ExpiresAt = &expires
		}
		switch rec.State {
		case idempotency.Completed:
			o.State, o.Result = WriteCompleted, rec.Result
		case idempotency.Pending:
			since := rec.CreatedAt.UTC()
			o.State, o.Since, o.Attempt = WriteRunning, &since, rec.Attempt
		case idempotency.Unknown:
			o.State, o.Code = WriteUnknown, rec.Code
			o.Resolution, o.ResolutionID = rec.Resolution, rec.ResolutionID
		default:
			o.State, o.Code = WriteFailed, rec.Code
		}
		return o, nil
	}
	if op.running(principal, key) {
		return &WriteOutcome{State: WriteRunning}, nil
	}
	if rk, ok := op.keys.(RunningKeys); ok {
		running, err := rk.Running(principal, key)
		if err != nil {
			return nil, err
		}
		if running {
			return &WriteOutcome{State: WriteRunning}, nil
		}
	}
	return &WriteOutcome{State: WriteNone}, nil
}
