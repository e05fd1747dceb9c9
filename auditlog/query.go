package auditlog

import (
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode"
)

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

// ParseWhen reads a time as writerd audit list's --since and --until (and
// the console's filters) take it: RFC 3339, a date (midnight UTC), or an
// age before now (30m, 2h, 7d).
func ParseWhen(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	var age time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseFloat(n, 64)
		if err != nil || days < 0 || days > 1e5 || n == "" || !unicode.IsDigit(rune(n[0])) {
			return time.Time{}, errors.New("not an age")
		}
		age = time.Duration(days * float64(24*time.Hour))
	} else {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return time.Time{}, errors.New("not an age")
		}
		age = d
	}
	return now.Add(-age).UTC(), nil
}
