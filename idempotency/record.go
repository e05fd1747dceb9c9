package idempotency

import "time"

// State is what became of the write that spent a key.
type State string

const (
	Completed State = "completed"
	Failed    State = "failed"
	// Pending is a write outside the store (docs/DESIGN.md section 5b)
	// whose call may be on its way to, or at, the upstream: its record is
	// committed before anything is sent, and only its owner (Owner and
	// Attempt, the fence) completes, fails, marks unknown or deletes it.
	Pending State = "pending"
	// Unknown is a write outside the store whose call may have reached
	// the upstream and whose outcome cannot be known. An operator's
	// resolution (Resolution) says what became of it.
	Unknown State = "unknown"
)

// Resolutions of an unknown write, an operator's finding.
const (
	Applied    = "applied"
	NotApplied = "not_applied"
)

// Never is the expiry of a record that does not expire by the key TTL: a
// pending record, and an unknown one until its resolution (Powertools
// #8049: an in-progress record that expired ran a withdrawal twice). A
// backend's collector, which deletes records expired at now, never
// reaches it.
var Never = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// Record is the stored outcome of one idempotent write.
type Record struct {
	Principal string    `json:"principal"`
	Key       string    `json:"key"`
	Tool      string    `json:"tool"`
	Digest    string    `json:"digest"`
	State     State     `json:"state"`
	Result    []byte    `json:"result,omitempty"` // Completed: the structured result, replayed byte for byte
	Code      string    `json:"code,omitempty"`   // Failed, Unknown: the public error code
	AuditID   string    `json:"audit_id"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`

	// A write outside the store (docs/DESIGN.md section 5b).

	// Owner is the process that owns a pending record (its pipeline's
	// id) and Attempt its attempt, from 1; a takeover makes a new owner
	// and attempt, so that the former owner's completion, fenced by both,
	// writes nothing. Kept once the record settles, for the outcome tool.
	Owner   string `json:"owner,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// LeaseUntil is when a pending record's owner must have renewed it;
	// past it, any process may take it over.
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// UpstreamKey is the key sent upstream, the same on every attempt.
	UpstreamKey string `json:"upstream_key,omitempty"`
	// Args are the arguments as sent upstream, so that a takeover can
	// re-drive the call; deleted when the record settles. Never logged or
	// audited.
	Args []byte `json:"args,omitempty"`
	// Resolution is an operator's finding on an unknown write (Applied or
	// NotApplied), ResolutionID the audit event that recorded it and
	// ResolvedAt when; an unknown record's TTL counts from ResolvedAt.
	Resolution   string    `json:"resolution,omitempty"`
	ResolutionID string    `json:"resolution_id,omitempty"`
	ResolvedAt   time.Time `json:"resolved_at,omitzero"`
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
	// Wait: the same request is pending, its call outside the store in
	// flight: wait for it, then answer IDEMPOTENCY_KEY_IN_USE.
	Wait
	// Unsure: the same request's outcome is unknown: answer
	// OUTCOME_UNKNOWN, never run it.
	Unsure
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
	case r.State == Pending:
		return Wait
	case r.State == Unknown:
		return Unsure
	default:
		return Replay
	}
}

// Expired reports whether the record no longer holds its key at now. A
// pending record, and an unknown one not yet resolved, never expire.
func (r *Record) Expired(now time.Time) bool {
	if r.State == Pending || r.State == Unknown && r.Resolution == "" {
		return false
	}
	return !now.Before(r.ExpiresAt)
}

// Settled reports whether the record is final: completed or failed, or
// unknown (which only a resolution adds to).
func (r *Record) Settled() bool { return r.State != Pending }

// Fenced reports whether r is the pending record that owner holds at
// attempt: only then may owner complete, renew or delete it.
func (r *Record) Fenced(owner string, attempt int) bool {
	return r != nil && r.State == Pending && r.Owner == owner && r.Attempt == attempt
}
