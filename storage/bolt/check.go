package bolt

import (
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/storage/bolt/boltkeys"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// Check runs the physical checks of a database, those of the bbolt
// backend alone, and returns every problem found, joined (errors.Join:
// one problem per line):
//
//   - the file's own consistency (bbolt's Tx.Check: every page reachable
//     once or free, keys in order);
//   - the idempotency index names each record once, by its principal and
//     key, every record decodes, and the unsettled index names each
//     pending record and unknown one without a resolution once.
//
// What every backend promises is checked through the interfaces, by
// pipeline.Check and the domain's own check (handlers.Check); a domain on
// bbolt adds its physical checks through its Domain. Storage.Check runs
// them all but the domain's promises.
func Check(btx *bolt.Tx) error {
	var errs []error
	for err := range btx.Check() {
		errs = append(errs, err)
	}
	if err := (boltkeys.Store{}).Check(kv.Wrap(btx)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
