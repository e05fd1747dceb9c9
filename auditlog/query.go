package auditlog

import "time"

// Filter selects events; every field set must match (they combine).
type Filter struct {
	Since, Until time.Time // [Since, Until): zero means unbounded
	Tool         string
	Principal    string
	Outcome      string // ok or failed
	Code         string
	Key          string // idempotency key
	Target       string // an entity id among the event's targets
	RequestID    string
}

// Match reports whether e passes the filter.
func (f Filter) Match(e *Event) bool {
	switch {
	case !f.Since.IsZero() && e.Time.Before(f.Since),
		!f.Until.IsZero() && !e.Time.Before(f.Until),
		f.Tool != "" && e.Tool != f.Tool,
		f.Principal != "" && e.Principal != f.Principal,
		f.Outcome != "" && e.Outcome != f.Outcome,
		f.Code != "" && e.Code != f.Code,
		f.Key != "" && e.IdempotencyKey != f.Key,
		f.RequestID != "" && e.RequestID != f.RequestID:
		return false
	}
	if f.Target == "" {
		return true
	}
	for _, t := range e.Targets {
		if t.ID == f.Target {
			return true
		}
	}
	return false
}
