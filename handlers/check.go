package handlers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/pipeline"
)

// checkPage is how many projects or records Check reads at a time.
const checkPage = 1000

// Check verifies the built-in tools' store against the audit log's
// events, given in sequence order, through the Store interface, and
// returns every problem found, joined (one per line):
//
//   - every entity's event is present: each project and record in the
//     store at revision N has an ok event that targets it at revision N;
//   - every event's write is present: each ok event's project and record
//     targets exist now at a revision at least the event's, or an ok event
//     of a delete_* tool at or after it targets them (a delete's own
//     target is gone by that delete).
//
// It reads every project and every record of each. A store that cannot
// be read is one problem, and nothing is checked against the events: a
// backend's own checks name the damage.
func Check(s Store, events []*auditlog.Event) error {
	type entity struct {
		kind, id string
	}
	revision := map[entity]int64{} // what the store holds now
	var stored []entity            // in store order, for a stable report
	read := func() error {
		for after, more := "", true; more; {
			var page []*Project
			var err error
			if page, more, err = s.Projects(after, checkPage); err != nil {
				return err
			}
			for _, p := range page {
				revision[entity{kindProject, p.ID}] = p.Revision
				stored = append(stored, entity{kindProject, p.ID})
				after = p.ID
			}
		}
		projects := len(stored)
		for _, p := range stored[:projects] {
			for after, more := "", true; more; {
				var page []*Record
				var err error
				if page, more, err = s.Records(p.id, after, checkPage); err != nil {
					return err
				}
				for _, r := range page {
					revision[entity{kindRecord, r.ID}] = r.Revision
					stored = append(stored, entity{kindRecord, r.ID})
					after = r.ID
				}
			}
		}
		return nil
	}
	if err := read(); err != nil {
		return fmt.Errorf("the projects and records cannot be read: %w", err)
	}

	var errs []error
	audited := map[entity]map[int64]bool{} // revisions an ok event targets
	deleted := map[entity]uint64{}         // the last ok delete_* event targeting each
	for _, e := range events {
		if e.Outcome != auditlog.OK {
			continue
		}
		for _, t := range e.Targets {
			en := entity{t.Kind, t.ID}
			if audited[en] == nil {
				audited[en] = map[int64]bool{}
			}
			audited[en][t.Revision] = true
			if strings.HasPrefix(e.Tool, "delete_") {
				deleted[en] = e.Seq
			}
		}
	}
	for _, en := range stored {
		if rev := revision[en]; !audited[en][rev] {
			errs = append(errs, fmt.Errorf("%s %s at revision %d has no ok audit event", en.kind, en.id, rev))
		}
	}
	for _, e := range events {
		if e.Outcome != auditlog.OK {
			continue
		}
		for _, t := range e.Targets {
			if t.Kind != kindProject && t.Kind != kindRecord {
				continue // another tool's entity: not this store's
			}
			en := entity{t.Kind, t.ID}
			rev, exists := revision[en]
			switch {
			case exists && rev >= t.Revision:
			case exists:
				errs = append(errs, fmt.Errorf("audit event %d (%s) wrote %s %s at revision %d, but the store holds revision %d", e.Seq, e.Tool, t.Kind, t.ID, t.Revision, rev))
			case deleted[en] < e.Seq:
				errs = append(errs, fmt.Errorf("audit event %d (%s) wrote %s %s at revision %d, which is gone without a delete event", e.Seq, e.Tool, t.Kind, t.ID, t.Revision))
			}
		}
	}
	return errors.Join(errs...)
}

// CheckStore runs every check of a store of the built-in tools, on any
// backend, in one read transaction but the backend's own: its physical
// checks (pipeline.Store's Check), the pipeline's invariants
// (pipeline.CheckEvents, with now for which records are live) and the
// tools' (Check), the last two on the events of one read of the log. It
// returns what the backend read, as a phrase, the number of audit
// events, and every problem, one error each; err is a failure to read at
// all.
func CheckStore(ctx context.Context, s pipeline.Store[Store], now time.Time) (checked string, events uint64, problems []error, err error) {
	checked, physical := s.Check(ctx)
	problems = split(physical)
	err = s.View(ctx, func(tx pipeline.Tx[Store]) error {
		// The log is decoded once, for both checks that need it.
		var all []*auditlog.Event
		if err := auditlog.All(tx.Audit(), func(e *auditlog.Event) error {
			all = append(all, e)
			return nil
		}); err != nil {
			// pipeline.Check names the failure with the problems of the
			// events before it, as it does on its own; the tools' check
			// does not run on part of the log. Only this failed read is
			// read again.
			problems = append(problems, split(pipeline.Check(tx, now))...)
			return nil
		}
		events = uint64(len(all))
		problems = append(problems, split(pipeline.CheckEvents(tx, all, now))...)
		problems = append(problems, split(Check(tx.Domain(), all))...)
		return nil
	})
	return checked, events, problems, err
}

// split returns the errors joined in err, one per problem.
func split(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
