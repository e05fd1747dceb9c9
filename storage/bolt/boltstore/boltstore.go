package boltstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/bolt/kv"
)

var (
	projectsBucket = []byte("projects")
	namesBucket    = []byte("project_names")
	recordsBucket  = []byte("records")
)

// Store implements handlers.Store on bbolt, bound to one transaction: its
// writes join it, through kv, so that a failed write's changes roll back
// with its savepoint.
type Store struct{ tx *kv.Tx }

var _ handlers.Store = Store{}

// Bind returns the store bound to tx: the domain store bolt.NewStorage
// hands out with each transaction.
func Bind(tx *kv.Tx) handlers.Store { return Store{tx} }

// Domain is the built-in tools' domain on bbolt, for bolt.OpenStorage.
var Domain = bolt.Domain[handlers.Store]{Init: Init, Bind: Bind, Check: Check}

// Open opens (creating if needed) the store of the built-in tools in dir:
// the bbolt backend's store, as the daemon runs on it.
func Open(dir string) (*bolt.Storage[handlers.Store], error) {
	return bolt.OpenStorage(dir, Domain)
}

// Init creates the buckets; call it once in a writable transaction (it is
// a bolt.Open init).
func Init(t *kv.Tx) error {
	btx := t.Bolt()
	for _, name := range [][]byte{projectsBucket, namesBucket, recordsBucket} {
		if _, err := btx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	return nil
}

type buckets struct {
	projects, names, records *kv.Bucket
}

func (s Store) open() (*buckets, error) {
	t := s.tx
	b := &buckets{t.Bucket(projectsBucket), t.Bucket(namesBucket), t.Bucket(recordsBucket)}
	if b.projects == nil || b.names == nil || b.records == nil {
		return nil, errors.New("boltstore: buckets missing")
	}
	// Ids are ULIDs, which grow with time: a new project lands at the end
	// of its bucket, a new record at the end of its project's range. bbolt
	// splits a page at FillPercent, and what lies left of the split is
	// never filled again, so its default of one half would leave half of
	// every page empty; 0.9 leaves room for updates that grow a value.
	// The name index is keyed by names, which arrive in no order: it keeps
	// the default.
	b.projects.SetFillPercent(0.9)
	b.records.SetFillPercent(0.9)
	return b, nil
}

// recordKey is the key of a record: its project's id, then its own.
func recordKey(projectID, id string) []byte {
	return append([]byte(projectID), id...)
}

// get decodes the value at key, or returns nil if there is none.
func get[T any](b *kv.Bucket, key []byte) (*T, error) {
	v := b.Get(key)
	if v == nil {
		return nil, nil
	}
	return decode[T](v)
}

func decode[T any](v []byte) (*T, error) {
	e := new(T)
	if err := json.Unmarshal(v, e); err != nil {
		return nil, fmt.Errorf("boltstore: decode %T: %w", e, err)
	}
	return e, nil
}

func put(b *kv.Bucket, key []byte, e any) error {
	v, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("boltstore: encode %T: %w", e, err)
	}
	return b.Put(key, v)
}

// list decodes up to limit values whose keys start with prefix and follow
// prefix+after, and reports whether another such key follows them.
func list[T any](b *kv.Bucket, prefix []byte, after string, limit int) ([]*T, bool, error) {
	c := b.Cursor()
	from := append(bytes.Clone(prefix), after...)
	k, v := c.Seek(from)
	if after != "" && bytes.Equal(k, from) {
		k, v = c.Next()
	}
	page := make([]*T, 0, limit)
	for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if len(page) == limit {
			return page, true, nil
		}
		e, err := decode[T](v)
		if err != nil {
			return nil, false, err
		}
		page = append(page, e)
	}
	return page, false, nil
}

// Project implements handlers.Store.
func (s Store) Project(id string) (*handlers.Project, error) {
	b, err := s.open()
	if err != nil {
		return nil, err
	}
	p, err := get[handlers.Project](b.projects, []byte(id))
	if err == nil && p == nil {
		err = handlers.ProjectNotFound()
	}
	return p, err
}

// nameKey is the key of a name in the names bucket: its comparison key,
// so that names the same as NameKey compares them share one entry.
func nameKey(name string) ([]byte, error) {
	k, err := handlers.NameKey(name)
	if err != nil {
		return nil, fmt.Errorf("boltstore: a project name has no comparison key: %w", err)
	}
	return []byte(k), nil
}

// ProjectByName implements handlers.Store.
func (s Store) ProjectByName(name string) (*handlers.Project, error) {
	b, err := s.open()
	if err != nil {
		return nil, err
	}
	key, err := nameKey(name)
	if err != nil {
		return nil, err
	}
	id := b.names.Get(key)
	if id == nil {
		return nil, nil
	}
	p, err := get[handlers.Project](b.projects, id)
	if err == nil && p == nil {
		err = fmt.Errorf("boltstore: a name points at missing project %s", id)
	}
	return p, err
}

// PutProject implements handlers.Store.
func (s Store) PutProject(p *handlers.Project) error {
	b, err := s.open()
	if err != nil {
		return err
	}
	key, err := nameKey(p.Name)
	if err != nil {
		return err
	}
	if holder := b.names.Get(key); holder != nil && string(holder) != p.ID {
		return handlers.NameTaken()
	}
	old, err := get[handlers.Project](b.projects, []byte(p.ID))
	if err != nil {
		return err
	}
	if old != nil {
		// A rename frees the old name's key, unless the new name has the
		// same key (a change of case, say).
		oldKey, err := nameKey(old.Name)
		if err != nil {
			return err
		}
		if !bytes.Equal(oldKey, key) {
			if err := b.names.Delete(oldKey); err != nil {
				return err
			}
		}
	}
	if err := b.names.Put(key, []byte(p.ID)); err != nil {
		return err
	}
	return put(b.projects, []byte(p.ID), p)
}

// DeleteProject implements handlers.Store.
func (s Store) DeleteProject(id string) error {
	b, err := s.open()
	if err != nil {
		return err
	}
	p, err := get[handlers.Project](b.projects, []byte(id))
	switch {
	case err != nil:
		return err
	case p == nil:
		return handlers.ProjectNotFound()
	}
	if hasRecords(b, id) {
		return handlers.ProjectNotEmpty()
	}
	key, err := nameKey(p.Name)
	if err != nil {
		return err
	}
	if err := b.names.Delete(key); err != nil {
		return err
	}
	return b.projects.Delete([]byte(id))
}

// Projects implements handlers.Store.
func (s Store) Projects(after string, limit int) ([]*handlers.Project, bool, error) {
	b, err := s.open()
	if err != nil {
		return nil, false, err
	}
	return list[handlers.Project](b.projects, nil, after, limit)
}

// Record implements handlers.Store.
func (s Store) Record(projectID, id string) (*handlers.Record, error) {
	b, err := s.open()
	if err != nil {
		return nil, err
	}
	r, err := get[handlers.Record](b.records, recordKey(projectID, id))
	if err == nil && r == nil {
		err = handlers.RecordNotFound()
	}
	return r, err
}

// PutRecord implements handlers.Store.
func (s Store) PutRecord(r *handlers.Record) error {
	b, err := s.open()
	if err != nil {
		return err
	}
	return put(b.records, recordKey(r.ProjectID, r.ID), r)
}

// DeleteRecord implements handlers.Store.
func (s Store) DeleteRecord(projectID, id string) error {
	b, err := s.open()
	if err != nil {
		return err
	}
	key := recordKey(projectID, id)
	if b.records.Get(key) == nil {
		return handlers.RecordNotFound()
	}
	return b.records.Delete(key)
}

// Records implements handlers.Store.
func (s Store) Records(projectID, after string, limit int) ([]*handlers.Record, bool, error) {
	b, err := s.open()
	if err != nil {
		return nil, false, err
	}
	return list[handlers.Record](b.records, []byte(projectID), after, limit)
}

// HasRecords implements handlers.Store, with one seek.
func (s Store) HasRecords(projectID string) (bool, error) {
	b, err := s.open()
	if err != nil {
		return false, err
	}
	return hasRecords(b, projectID), nil
}

// hasRecords reports whether the project's key range holds a record.
func hasRecords(b *buckets, projectID string) bool {
	k, _ := b.records.Cursor().Seek([]byte(projectID))
	return bytes.HasPrefix(k, []byte(projectID))
}
