// Package bolttest damages a bbolt store on purpose, for the tests
// outside the backend that show what writerd makes of damage: an edited
// audit log (verify, show), a project changed behind the tools' back
// (check), a page of the file broken (start-up, check). It writes the
// file with bbolt itself, or byte by byte, bypassing every store, as
// someone who can write the file would. It also appends events as an
// earlier writerd stored them (AppendEarlier), for the tests of a log
// that mixes event formats.
//
// It is imported by tests only; it knows the backend's layout (its
// buckets, how an event is stored, bbolt's pages) so that they need not.
package bolttest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/storage/bolt"
)

// File is the database file of a data directory.
func File(dir string) string { return filepath.Join(dir, bolt.FileName) }

// Tx is a bbolt transaction on a stopped store's file, with its buckets
// by what they hold.
type Tx struct{ *bbolt.Tx }

// Events is the audit log's events: SeqKey(seq) → the event's stored
// value (its leaf check, the inner tree hashes its append completed, then
// its canonical JSON, from JSONStart(seq) on).
func (tx Tx) Events() *bbolt.Bucket { return tx.Bucket([]byte("audit_events")) }

// Checkpoints is the audit log's signed checkpoints: SeqKey(size) → the
// note.
func (tx Tx) Checkpoints() *bbolt.Bucket { return tx.Bucket([]byte("audit_checkpoints")) }

// Projects is the built-in tools' projects: id → the project's JSON.
func (tx Tx) Projects() *bbolt.Bucket { return tx.Bucket([]byte("projects")) }

// Event returns a copy of event seq's stored value, failing the test if
// its JSON does not start at JSONStart(seq).
func (tx Tx) Event(t testing.TB, seq uint64) []byte {
	t.Helper()
	v := bytes.Clone(tx.Events().Get(SeqKey(seq)))
	if start := JSONStart(seq); len(v) <= start || v[start] != '{' {
		t.Fatalf("event %d's value does not have its JSON at %d: the stored layout changed", seq, start)
	}
	return v
}

// SeqKey is the key of an event or a checkpoint: 8 bytes, big-endian.
func SeqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// JSONStart is where the canonical JSON of event seq starts in its stored
// value: after the 8-byte check of its leaf hash and the inner tree hashes
// its append completed, whose number follows from its sequence number.
func JSONStart(seq uint64) int {
	n := int64(seq)
	inner := tlog.StoredHashCount(n) - tlog.StoredHashCount(n-1) - 1
	return 8 + int(inner)*tlog.HashSize
}

// AppendEarlier appends e as a writerd of event format 1 did, before the
// events said their format: it gives e its place after the last event
// stored (auditlog.Event.Follow, as boltlog's Append does), then clears
// its format and stores its canonical JSON, which then has no "format"
// member, with the tree hashes its append adds (the layout of Events).
// Those are the bytes the earlier writerd stored: the event's canonical
// JSON without the member is the earlier encoding (auditlog's
// TestEvent_Format1KeepsItsBytes holds it to a stored event of that time).
// It returns the bytes stored.
func (tx Tx) AppendEarlier(t testing.TB, e *auditlog.Event) []byte {
	t.Helper()
	b := tx.Events()
	var prevID string
	var prevTime time.Time
	if k, v := b.Cursor().Last(); k != nil {
		prev, err := auditlog.DecodeEvent(v[JSONStart(binary.BigEndian.Uint64(k)):])
		if err != nil {
			t.Fatalf("the last event stored: %v", err)
		}
		prevID, prevTime = prev.ID, prev.Time
	}
	if err := e.Follow(prevID, prevTime); err != nil {
		t.Fatal(err)
	}
	e.Format = 0 // format 1: no member
	seq, err := b.NextSequence()
	if err != nil {
		t.Fatal(err)
	}
	e.Seq = seq
	c, err := e.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	tx.put(t, seq, c)
	return c
}

// AppendCanonical appends an event's bytes as given, under the next
// sequence number (which the bytes' seq member should hold), with the
// tree hashes its append adds: an event no writerd of this format would
// write, such as one of a later format.
func (tx Tx) AppendCanonical(t testing.TB, canonical []byte) uint64 {
	t.Helper()
	seq, err := tx.Events().NextSequence()
	if err != nil {
		t.Fatal(err)
	}
	tx.put(t, seq, canonical)
	return seq
}

// put stores event seq's canonical JSON with the tree hashes its append
// adds.
func (tx Tx) put(t testing.TB, seq uint64, c []byte) {
	t.Helper()
	b := tx.Events()
	hashes, err := tlog.StoredHashes(int64(seq-1), c, hashReader{b})
	if err != nil {
		t.Fatalf("the tree hashes of event %d: %v", seq, err)
	}
	v := append([]byte(nil), hashes[0][:8]...)
	for _, h := range hashes[1:] {
		v = append(v, h[:]...)
	}
	if err := b.Put(SeqKey(seq), append(v, c...)); err != nil {
		t.Fatal(err)
	}
}

// hashReader reads the tree's stored hashes out of the events bucket as
// boltlog keeps them: an inner hash in the value of the event that
// completed its subtree, a leaf's from the event's bytes.
type hashReader struct{ b *bbolt.Bucket }

func (r hashReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, index := range indexes {
		level, n := tlog.SplitStoredHashIndex(index)
		seq := uint64((n + 1) << level)
		v := r.b.Get(SeqKey(seq))
		if len(v) < JSONStart(seq) {
			return nil, fmt.Errorf("event %d is missing or short", seq)
		}
		if level == 0 {
			out[i] = tlog.RecordHash(v[JSONStart(seq):])
			continue
		}
		copy(out[i][:], v[8+(level-1)*tlog.HashSize:])
	}
	return out, nil
}

// Update opens the file of a stopped store in dir read-write and changes
// it with fn, in one bbolt transaction.
func Update(t testing.TB, dir string, fn func(Tx) error) {
	t.Helper()
	db, err := bbolt.Open(File(dir), 0o600, &bbolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bbolt.Tx) error { return fn(Tx{tx}) }); err != nil {
		t.Fatal(err)
	}
}

// Pages is where a stopped store's file keeps what the damage tests
// break, as bbolt lays it out: every page begins with a 16-byte header
// (id, flags, count, overflow), pages 0 and 1 are the meta pages, and the
// elements of a branch or leaf page follow its header, 16 bytes each.
type Pages struct {
	Path     string
	PageSize int64
	HWM      int64  // pages in use
	Branch   uint64 // the projects bucket's root, a branch page
	Leaf     uint64 // its first child, a leaf page
	Older    int64  // the meta page bbolt does not use
}

var native = binary.NativeEndian

// FindPages reads where the pages are in the file of a stopped store in
// dir, whose projects bucket must span a branch page over leaves.
func FindPages(t testing.TB, dir string) Pages {
	t.Helper()
	p := Pages{Path: File(dir)}
	db, err := bbolt.Open(p.Path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p.PageSize = int64(db.Info().PageSize)
	db.View(func(tx *bbolt.Tx) error {
		p.HWM = tx.Size() / p.PageSize
		p.Branch = uint64(tx.Bucket([]byte("projects")).Root())
		return nil
	})
	db.Close()
	b := p.Read(t)
	if flags := native.Uint16(b[int64(p.Branch)*p.PageSize+8:]); flags != 0x01 {
		t.Fatalf("the projects bucket's root, page %d, has flags %#x, want a branch page", p.Branch, flags)
	}
	p.Leaf = native.Uint64(b[int64(p.Branch)*p.PageSize+16+8:])
	if native.Uint64(b[16+48:]) > native.Uint64(b[p.PageSize+16+48:]) { // txids
		p.Older = 1
	}
	return p
}

// Read returns the whole file.
func (p Pages) Read(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(p.Path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Patch writes b at page id, offset off.
func (p Pages) Patch(t testing.TB, id uint64, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(p.Path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, int64(id)*p.PageSize+off); err != nil {
		t.Fatal(err)
	}
}

// Value returns the offset, in its page, of the value of a leaf element.
func (p Pages) Value(t testing.TB, leaf uint64, element int64) int64 {
	t.Helper()
	b := p.Read(t)
	e := int64(leaf)*p.PageSize + 16 + 16*element
	return 16 + 16*element + int64(native.Uint32(b[e+4:])) + int64(native.Uint32(b[e+8:]))
}

// Truncate cuts the file to size bytes.
func (p Pages) Truncate(t testing.TB, size int64) {
	t.Helper()
	if err := os.Truncate(p.Path, size); err != nil {
		t.Fatal(err)
	}
}

// PutFormat1 stores r in the file as the writerd before writes outside
// the store did (format 1 of boltkeys, in the buckets of that layout,
// which had no unsettled index): for the tests of an upgrade. It knows
// that format byte by byte, independent of the current encoder.
func PutFormat1(tx Tx, r *idempotency.Record) error {
	state := map[idempotency.State]byte{idempotency.Completed: 1, idempotency.Failed: 2}[r.State]
	if state == 0 {
		return fmt.Errorf("bolttest: format 1 has no state %q", r.State)
	}
	b := []byte{1}
	for _, s := range []string{r.Principal, r.Key, r.Tool, r.Digest, r.Code, r.AuditID} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = append(b, state)
	for _, t := range []time.Time{r.CreatedAt, r.ExpiresAt} {
		tb, err := t.MarshalBinary()
		if err != nil {
			return err
		}
		b = binary.AppendUvarint(b, uint64(len(tb)))
		b = append(b, tb...)
	}
	b = append(b, r.Result...)
	index, records := tx.Bucket([]byte("idempotency")), tx.Bucket([]byte("idempotency_records"))
	if index == nil || records == nil {
		return errors.New("bolttest: no idempotency buckets")
	}
	seq, err := records.NextSequence()
	if err != nil {
		return err
	}
	rk := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(r.ExpiresAt.UnixNano())), seq)
	if err := records.Put(rk, b); err != nil {
		return err
	}
	return index.Put(append(append([]byte(r.Principal), 0), r.Key...), rk)
}

// DropUnsettledIndex deletes the unsettled index of the idempotency
// records, which the writerd before writes outside the store did not
// have: with PutFormat1, a file of that writerd.
func DropUnsettledIndex(tx Tx) error {
	if tx.Bucket([]byte("idempotency_unsettled")) == nil {
		return nil
	}
	return tx.DeleteBucket([]byte("idempotency_unsettled"))
}
