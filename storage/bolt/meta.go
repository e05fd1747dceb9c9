package bolt

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/storage/bolt/boltlog"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// The store's knowledge of itself: the audit log's origin, the name its
// checkpoints are signed under, by which the daemon finds the log's key
// outside the data directory (auditlog.KeyPath). It is public, as every
// checkpoint's first line is, and it is recorded once: a second claim of
// another origin is answered with the first, so that a log never changes
// its key unnoticed.
//
// It keeps the secret of upstream keys too (docs/DESIGN.md section 5b),
// under secretKey: 32 random bytes made by the first write transaction
// that asks for them and never changed, never logged, and copied with
// the file by a backup.
var (
	metaBucket = []byte("writerd_meta")
	originKey  = []byte("origin")
	secretKey  = []byte("upstream_secret")
)

// secretSize is the size of the secret of upstream keys.
const secretSize = 32

// secret returns the store's secret of upstream keys, making and storing
// it in a write transaction if there is none; a read transaction gets nil
// then.
func secret(tx *kv.Tx) ([]byte, error) {
	b := tx.Bucket(metaBucket)
	if b != nil {
		if v := b.Get(secretKey); v != nil {
			return bytes.Clone(v), nil
		}
	}
	if !tx.Writable() {
		return nil, nil
	}
	if b == nil {
		return nil, errors.New("bolt: meta bucket missing")
	}
	s := make([]byte, secretSize)
	if _, err := rand.Read(s); err != nil {
		return nil, fmt.Errorf("bolt: make the secret: %w", err)
	}
	if err := b.Put(secretKey, s); err != nil {
		return nil, err
	}
	return bytes.Clone(s), nil
}

// initMeta creates the meta bucket in Open's transaction and, in a file an
// earlier writerd wrote, which records no origin, records the one its
// latest checkpoint names.
func initMeta(tx *kv.Tx) error {
	b, err := tx.Bolt().CreateBucketIfNotExists(metaBucket)
	if err != nil || b.Get(originKey) != nil {
		return err
	}
	if origin := checkpointOrigin(tx.Bolt()); origin != "" {
		return b.Put(originKey, []byte(origin))
	}
	return nil
}

// checkpointOrigin returns the origin line of the log's latest
// checkpoint, or "" if it has none that parses.
func checkpointOrigin(btx *bolt.Tx) string {
	if btx.Bucket([]byte("audit_checkpoints")) == nil {
		return ""
	}
	_, signed, err := boltlog.Bind(kv.Wrap(btx)).LatestCheckpoint()
	if err != nil {
		return ""
	}
	c, err := auditlog.ParseSigned(signed)
	if err != nil {
		return ""
	}
	return c.Origin
}

// Origin returns the audit log's origin the file records, or "" if it
// records none yet. A file an earlier writerd wrote, opened read-only and
// so not given one by Open, answers with the origin its latest checkpoint
// names.
func (s *Storage[D]) Origin(context.Context) (string, error) {
	var origin string
	err := s.db.db.View(func(btx *bolt.Tx) error {
		if b := btx.Bucket(metaBucket); b != nil && b.Get(originKey) != nil {
			origin = string(b.Get(originKey))
			return nil
		}
		origin = checkpointOrigin(btx)
		return nil
	})
	return origin, classify(redact(s.db.dir, err))
}

// ClaimOrigin records origin as the audit log's if the file records none
// yet, durably, and returns the one it records: the first claimed.
func (s *Storage[D]) ClaimOrigin(ctx context.Context, origin string) (string, error) {
	var have string
	err := s.db.Update(ctx, func(tx *kv.Tx) error {
		b := tx.Bucket(metaBucket)
		if v := b.Get(originKey); v != nil {
			have = string(v)
			return nil
		}
		have = origin
		return b.Put(originKey, []byte(origin))
	})
	return have, err
}
