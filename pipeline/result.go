package pipeline

import (
	"encoding/json"
	"net/http"
)

// Outcome is how a call ended; every call ends in exactly one
// (docs/DESIGN.md section 9).
type Outcome string

const (
	OutcomeOK       Outcome = "ok"       // the handler ran and its write or read succeeded
	OutcomeReplayed Outcome = "replayed" // an identical retry, answered from the record
	OutcomeRejected Outcome = "rejected" // stages 1–4: nothing ran, nothing was written
	OutcomeRefused  Outcome = "refused"  // the handler refused with a domain code
	OutcomeConflict Outcome = "conflict" // the idempotency key forbade the call
	OutcomeError    Outcome = "error"    // UNAVAILABLE or INTERNAL
	// OutcomeUnknown: a write outside the store whose outcome cannot be
	// known (OUTCOME_UNKNOWN, recorded with its event). A write outside
	// the store that the upstream refused is OutcomeRefused.
	OutcomeUnknown Outcome = "unknown"
)

// Result is the answer to one call, for a transport to render.
type Result struct {
	RequestID string
	Outcome   Outcome
	// Output is the structured result on success, as JSON; a replay carries
	// the stored bytes of the first answer.
	Output []byte
	// AuditID is the id of the call's audit event (the first call's, on a
	// replay); empty when the call wrote none.
	AuditID  string
	Replayed bool
	// Err is set on failure: the public error, safe to show.
	Err *Error
}

// ErrorJSON renders r.Err as the error envelope of docs/DESIGN.md section 3:
// {"error":{"code","message","status","retry","request_id"[,"preview"][,"detail"]}}.
func (r *Result) ErrorJSON() []byte {
	e := r.Err
	b, err := json.Marshal(envelope{Error: envelopeBody{
		Code: e.Code, Message: e.Message, Status: e.Status(),
		Retry: e.Retry, RequestID: r.RequestID, Preview: e.Preview, Detail: e.Detail,
	}})
	if err != nil {
		// Only a preview or a detail could fail to marshal; answer without.
		b, _ = json.Marshal(envelope{Error: envelopeBody{
			Code: Internal, Message: InternalMessage, Status: Internal.Status(),
			Retry: RetrySameKey, RequestID: r.RequestID,
		}})
	}
	return b
}

// WriteError writes r.Err to an HTTP response: the envelope, with its
// code's catalogue status. Every HTTP edge of writerd answers errors
// through it.
func (r *Result) WriteError(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(r.Err.Status())
	w.Write(r.ErrorJSON())
}
