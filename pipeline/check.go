package pipeline

import (
	"errors"
	"fmt"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/idempotency"
)

// Check verifies what the pipeline promises of a store, through the
// storage interfaces, and returns every problem found, joined
// (errors.Join: one problem per line):
//
//   - audit sequence numbers dense from 1, and event times non-decreasing
//     in sequence order (the pipeline takes a call's time inside its write
//     transaction, and Append keeps it no earlier than the last event's);
//   - every idempotency record but a pending one (whose call is on its
//     way, with no event yet) points at the audit event of its principal,
//     key and digest, an unknown record at one of outcome unknown;
//   - one event per live record: for each record not expired at now,
//     exactly one audit event of its principal and key lies at or after
//     the record's creation, and it is the record's event (an unknown
//     record's resolution event aside).
//
// It reads the whole log and every record, in tx. A backend adds its own
// physical checks (a file's pages, an index against what it indexes);
// the built-in tools' domain has handlers.Check. Tests run all three
// after each test, and writerd check runs them on a store at rest.
func Check[D any](tx Tx[D], now time.Time) error {
	var events []*auditlog.Event
	err := auditlog.All(tx.Audit(), func(e *auditlog.Event) error {
		events = append(events, e)
		return nil
	})
	if err != nil {
		// The events read before the failure are checked as far as they
		// go; the records are not checked against part of the log.
		return errors.Join(append(checkLog(events), fmt.Errorf("audit events: %w", err))...)
	}
	return CheckEvents(tx, events, now)
}

// CheckEvents is Check on events, every event of tx's log in sequence
// order as the caller read it, so that a caller that needs the events for
// its own checks too (handlers.CheckStore) decodes the log once. It reads
// every idempotency record in tx.
func CheckEvents[D any](tx Tx[D], events []*auditlog.Event, now time.Time) error {
	errs := checkLog(events)
	byID := make(map[string]*auditlog.Event, len(events))
	byKey := map[[2]string][]*auditlog.Event{}
	for _, e := range events {
		byID[e.ID] = e
		k := [2]string{e.Principal, e.IdempotencyKey}
		byKey[k] = append(byKey[k], e)
	}
	err := tx.Keys().ForEach(func(r *idempotency.Record) error {
		if r.State == idempotency.Pending {
			return nil // its call is on its way: no event yet
		}
		if e := byID[r.AuditID]; e == nil || e.IdempotencyKey != r.Key || e.Principal != r.Principal || e.Digest != r.Digest {
			errs = append(errs, fmt.Errorf("idempotency record %s/%s has no audit event of its key and digest", r.Principal, r.Key))
		} else if r.State == idempotency.Unknown && e.Outcome != auditlog.Unknown {
			errs = append(errs, fmt.Errorf("idempotency record %s/%s is unknown, its audit event %s", r.Principal, r.Key, e.Outcome))
		}
		if r.Expired(now) {
			return nil
		}
		var since []*auditlog.Event
		for _, e := range byKey[[2]string{r.Principal, r.Key}] {
			if !e.Time.Before(r.CreatedAt) && (r.ResolutionID == "" || e.ID != r.ResolutionID) {
				since = append(since, e)
			}
		}
		switch {
		case len(since) == 0:
			errs = append(errs, fmt.Errorf("idempotency record %s/%s has no audit event since it was created", r.Principal, r.Key))
		case len(since) > 1:
			errs = append(errs, fmt.Errorf("idempotency record %s/%s has %d audit events since it was created, want one", r.Principal, r.Key, len(since)))
		case since[0].ID != r.AuditID:
			errs = append(errs, fmt.Errorf("the audit event since idempotency record %s/%s was created is not the record's own", r.Principal, r.Key))
		}
		return nil
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("idempotency records: %w", err))
	}
	return errors.Join(errs...)
}

// checkLog returns the problems of the log's own order: sequence numbers
// dense from 1, and times non-decreasing, one problem per event.
func checkLog(events []*auditlog.Event) []error {
	var errs []error
	var want uint64 = 1
	var last *auditlog.Event
	for _, e := range events {
		if e.Seq != want {
			errs = append(errs, fmt.Errorf("audit event %s has seq %d, want %d", e.ID, e.Seq, want))
		}
		if last != nil && e.Time.Before(last.Time) {
			errs = append(errs, fmt.Errorf("audit event %d is dated %s, before event %d (%s)",
				e.Seq, e.Time.Format(time.RFC3339Nano), last.Seq, last.Time.Format(time.RFC3339Nano)))
		}
		want, last = e.Seq+1, e
	}
	return errs
}
