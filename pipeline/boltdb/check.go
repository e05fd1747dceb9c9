package boltdb

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/idempotency"
)

// Check verifies what the pipeline promises of a database: the file's own
// consistency (bbolt's Tx.Check), audit sequence numbers dense from 1, and
// every idempotency record pointing at the audit event of its key and
// digest. It returns every problem found, joined. Tests run it after each
// test, as bbolt's own tests do; it reads the whole database.
func Check(tx *bolt.Tx) error {
	var errs []error
	for err := range tx.Check() {
		errs = append(errs, err)
	}
	events := map[string]*auditlog.Event{}
	var want uint64 = 1
	err := auditlog.Bolt{}.ForEach(tx, func(e *auditlog.Event) error {
		if e.Seq != want {
			errs = append(errs, fmt.Errorf("audit event %s has seq %d, want %d", e.ID, e.Seq, want))
		}
		want = e.Seq + 1
		events[e.ID] = e
		return nil
	})
	if err != nil {
		return err
	}
	err = idempotency.Bolt{}.ForEach(tx, func(r *idempotency.Record) error {
		if e := events[r.AuditID]; e == nil || e.IdempotencyKey != r.Key || e.Principal != r.Principal || e.Digest != r.Digest {
			errs = append(errs, fmt.Errorf("idempotency record %s/%s has no audit event of its key and digest", r.Principal, r.Key))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return errors.Join(errs...)
}
