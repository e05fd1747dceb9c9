package idempotency

import "time"

// State is what became of the write that spent a key.
type State string

const (
	Completed State = "completed"
	Failed    State = "failed"
)

// Record is the stored outcome of one idempotent write.
type Record struct {
	Principal string    `json:"principal"`
	Key       string    `json:"key"`
	Tool      string    `json:"tool"`
	Digest    string    `json:"digest"`
	State     State     `json:"state"`
	Result    []byte    `json:"result,omitempty"` // Completed: the structured result, replayed byte for byte
	Code      string    `json:"code,omitempty"`   // Failed: the public error code
	AuditID   string    `json:"audit_id"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Verdict is what a call must do given the record of its key.
type Verdict int

const (
	// Run: the key is unused (or its record expired); run the write.
	Run Verdict = iota
	// Replay: the same request completed; answer with the stored result.
	Replay
	// Refail: the same request failed; answer IDEMPOTENCY_KEY_FAILED.
	Refail
	// Reused: the key was spent on a different request.
	Reused
)

// Match decides what a call with digest must do. A nil or expired record
// means Run.
func (r *Record) Match(digest string, now time.Time) Verdict {
	switch {
	case r == nil || r.Expired(now):
		return Run
	case r.Digest != digest:
		return Reused
	case r.State == Failed:
		return Refail
	default:
		return Replay
	}
}

// Expired reports whether the record no longer holds its key at now.
func (r *Record) Expired(now time.Time) bool { return !now.Before(r.ExpiresAt) }
