package boltstore

import (
	"errors"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline/boltdb/boltlog"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

// Event is what Check needs of one audit event; EventsOf reads them from
// the audit log.
type Event struct {
	Seq     uint64
	Tool    string
	OK      bool // the write succeeded (outcome "ok")
	Targets []Target
}

// Target is an entity an event names: "project" or "record", its id, and
// its revision after the write (a delete names the revision it deleted).
type Target struct {
	Kind     string
	ID       string
	Revision int64
}

// EventsOf reads the audit log's events, in sequence order, as Check takes
// them.
func EventsOf(tx *bolt.Tx) ([]Event, error) {
	var events []Event
	err := auditlog.All(boltlog.Bind(kv.Wrap(tx)), func(e *auditlog.Event) error {
		ev := Event{Seq: e.Seq, Tool: e.Tool, OK: e.Outcome == auditlog.OK}
		for _, t := range e.Targets {
			ev.Targets = append(ev.Targets, Target{Kind: t.Kind, ID: t.ID, Revision: t.Revision})
		}
		events = append(events, ev)
		return nil
	})
	return events, err
}

// The kinds of entity the built-in tools name in their events.
const (
	kindProject = "project"
	kindRecord  = "record"
)

// Check verifies the domain store against the audit log's events, given in
// sequence order, and returns every problem found, joined:
//
//   - every entity's event is present: each project and record in the
//     store at revision N has an ok event that targets it at revision N;
//   - every event's write is present: each ok event's project and record
//     targets exist now at a revision at least the event's, or an ok event
//     of a delete_* tool at or after it targets them (a delete's own
//     target is gone by that delete);
//   - each record's key matches its own ids, and its project exists.
//
// It reads the whole store; writerd check runs it beside boltdb.Check.
func Check(tx *bolt.Tx, events []Event) error {
	b, err := Store{kv.Wrap(tx)}.open()
	if err != nil {
		return err
	}
	var errs []error
	type entity struct {
		kind, id string
	}
	revision := map[entity]int64{} // what the store holds now
	var stored []entity            // in store order, for a stable report
	err = b.projects.ForEach(func(k, v []byte) error {
		p, err := decode[handlers.Project](v)
		if err != nil || p.ID != string(k) {
			errs = append(errs, fmt.Errorf("project %s cannot be read back", printable(k)))
			return nil
		}
		revision[entity{kindProject, p.ID}] = p.Revision
		stored = append(stored, entity{kindProject, p.ID})
		return nil
	})
	if err != nil {
		return err
	}
	err = b.records.ForEach(func(k, v []byte) error {
		r, err := decode[handlers.Record](v)
		if err != nil || string(recordKey(r.ProjectID, r.ID)) != string(k) {
			errs = append(errs, fmt.Errorf("record %s cannot be read back", printable(k)))
			return nil
		}
		if _, ok := revision[entity{kindProject, r.ProjectID}]; !ok {
			errs = append(errs, fmt.Errorf("record %s belongs to project %s, which does not exist", r.ID, r.ProjectID))
		}
		revision[entity{kindRecord, r.ID}] = r.Revision
		stored = append(stored, entity{kindRecord, r.ID})
		return nil
	})
	if err != nil {
		return err
	}

	audited := map[entity]map[int64]bool{} // revisions an ok event targets
	deleted := map[entity]uint64{}         // the last ok delete_* event targeting each
	for _, e := range events {
		if !e.OK {
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
		if !e.OK {
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

// printable shows a key that could not be decoded: its bytes if they are
// printable ASCII, else hex.
func printable(k []byte) string {
	for _, c := range k {
		if c < 0x21 || c > 0x7e {
			return fmt.Sprintf("%x", k)
		}
	}
	return string(k)
}
