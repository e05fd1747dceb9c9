package boltstore

import (
	"errors"
	"fmt"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// Check runs the physical checks of the domain's buckets, and returns
// every problem found, joined: each project and record can be decoded
// and is stored under its own ids, and each record's project exists. What
// the tools promise of their store whatever its backend is handlers.Check.
func Check(tx *kv.Tx) error {
	b, err := Store{tx}.open()
	if err != nil {
		return err
	}
	var errs []error
	projects := map[string]bool{}
	err = b.projects.ForEach(func(k, v []byte) error {
		p, err := decode[handlers.Project](v)
		if err != nil || p.ID != string(k) {
			errs = append(errs, fmt.Errorf("project %s cannot be read back", printable(k)))
			return nil
		}
		projects[p.ID] = true
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
		if !projects[r.ProjectID] {
			errs = append(errs, fmt.Errorf("record %s belongs to project %s, which does not exist", r.ID, r.ProjectID))
		}
		return nil
	})
	if err != nil {
		return err
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
