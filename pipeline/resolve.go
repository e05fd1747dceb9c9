package pipeline

import (
	"context"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/idempotency"
)

// The resolution tool records an operator's finding on a write whose
// outcome is unknown (docs/DESIGN.md section 5b): whether it took effect
// at its upstream. It is a write of its own, with the admin scope and its
// own key, through every stage: its one event names the unknown write's
// event, principal and key, and the unknown record keeps the finding,
// which get_write_outcome and every retry of that key then tell. writerd
// outcome resolve sends it with a key made from the principal and key it
// resolves, so that the same finding again replays and the other finding
// is refused (IDEMPOTENCY_KEY_REUSED).

// ResolveToolName is the name of the resolution tool New registers.
const ResolveToolName = "resolve_write_outcome"

// ResolveInput is resolve_write_outcome's input.
type ResolveInput struct {
	Key
	Principal string `json:"principal" jsonschema:"minLength=1,maxLength=128" jsonschema_description:"The principal of the unknown write."`
	WriteKey  string `json:"key" jsonschema:"minLength=8,maxLength=128,pattern=^[A-Za-z0-9._:-]+$" jsonschema_description:"The idempotency_key of the unknown write."`
	Finding   string `json:"finding" jsonschema:"enum=applied,enum=not_applied" jsonschema_description:"What the operator found at the upstream: applied (the write took effect) or not_applied."`
}

// Resolved is resolve_write_outcome's answer.
type Resolved struct {
	Event     string    `json:"event" jsonschema:"maxLength=26" jsonschema_description:"The audit event of the unknown write."`
	Principal string    `json:"principal" jsonschema:"maxLength=128"`
	Key       string    `json:"key" jsonschema:"maxLength=128"`
	Finding   string    `json:"finding" jsonschema:"enum=applied,enum=not_applied"`
	ExpiresAt time.Time `json:"expires_at" jsonschema_description:"When the unknown write's key expires, counted from this resolution."`
}

func resolveTool[D any](p *Pipeline[D]) *Tool[D] {
	t := MustDefine(Spec[D, ResolveInput, Resolved]{
		Name:  ResolveToolName,
		Title: "Resolve a write's unknown outcome",
		Description: "Records what an operator found of a write to an upstream whose outcome is unknown: applied or not_applied. " +
			"Needs the admin scope. The unknown write is never sent again either way; its key expires a TTL after the resolution.",
		Run: func(ctx context.Context, op *Op[D], in *ResolveInput) (*Resolved, error) {
			return p.resolve(op, in)
		},
	})
	t.need = ScopeAdmin
	return t
}

// resolve runs inside the resolution's write transaction.
func (p *Pipeline[D]) resolve(op *Op[D], in *ResolveInput) (*Resolved, error) {
	rec, err := op.keys.Claim(in.Principal, in.WriteKey, 0)
	if err != nil {
		return nil, err
	}
	if rec == nil || rec.State != idempotency.Unknown || rec.Expired(op.Now) {
		return nil, Errorf(NotFound, "There is no write of unknown outcome under this principal and key.")
	}
	op.Touch("event", rec.AuditID, 0)
	if rec.Resolution != "" {
		return nil, Errorf(AlreadyExists, "This write's outcome is already resolved; its finding stands.")
	}
	op.resolves = &auditlog.Resolution{Event: rec.AuditID, Principal: rec.Principal, Key: rec.Key, Finding: in.Finding}
	resolved := *rec
	resolved.Resolution, resolved.ResolvedAt = in.Finding, op.Now
	resolved.ExpiresAt = op.Now.Add(p.cfg.KeyTTL)
	op.appended = func(ev *auditlog.Event) error {
		resolved.ResolutionID = ev.ID
		return op.keys.Put(&resolved)
	}
	return &Resolved{Event: rec.AuditID, Principal: rec.Principal, Key: rec.Key, Finding: in.Finding, ExpiresAt: resolved.ExpiresAt.UTC()}, nil
}
