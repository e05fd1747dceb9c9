package boltlog_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/storage/bolt/boltlog"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// MustAppendN appends n events, one transaction each, at times one second
// apart from t0, and returns them.
func MustAppendN(t testing.TB, db *bolt.DB, n int) []*auditlog.Event {
	t.Helper()
	evs := make([]*auditlog.Event, n)
	for i := range evs {
		e := okEvent(t0.Add(time.Duration(i) * time.Second))
		e.Tool = []string{"create_project", "update_record", "delete_record"}[i%3]
		e.IdempotencyKey = fmt.Sprintf("k-%08d", i)
		evs[i] = e
		MustAppend(t, db, e)
	}
	return evs
}

// memTree recomputes the tree independently, with tlog's own functions
// over hashes kept in memory.
type memTree []tlog.Hash

func (m memTree) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		out[i] = m[x]
	}
	return out, nil
}

// Ensure the tree kept in the events' values has, at every size, the root
// tlog computes independently over the same leaves, and that inclusion and
// consistency proofs from it check.
func TestTree_RootsAndProofs(t *testing.T) {
	db := MustOpen(t)
	const n = 70
	MustAppendN(t, db, n)
	var mem memTree
	roots := []tlog.Hash{}
	leaves := map[uint64][]byte{}
	MustView(t, db, func(tx *bolt.Tx) error {
		return raw(kv.Wrap(tx), func(seq uint64, c []byte) error {
			leaves[seq] = bytes.Clone(c)
			return nil
		})
	})
	for i := range n + 1 {
		h, _ := tlog.TreeHash(int64(i), mem)
		roots = append(roots, h)
		if i < n {
			hs, err := tlog.StoredHashes(int64(i), leaves[uint64(i+1)], mem)
			if err != nil {
				t.Fatal(err)
			}
			mem = append(mem, hs...)
		}
	}
	MustView(t, db, func(tx *bolt.Tx) error {
		for size := range uint64(n + 1) {
			got, err := auditlog.TreeHash(boltlog.Bind(kv.Wrap(tx)), size)
			if err != nil || got != roots[size] {
				t.Fatalf("TreeHash(%d) = %v, %v, want %v", size, got, err, roots[size])
			}
		}
		for size := uint64(1); size <= n; size += 7 {
			for seq := uint64(1); seq <= size; seq += 3 {
				p, err := auditlog.InclusionProof(boltlog.Bind(kv.Wrap(tx)), size, seq)
				if err != nil {
					t.Fatal(err)
				}
				if err := tlog.CheckRecord(p, int64(size), roots[size], int64(seq-1), tlog.RecordHash(leaves[seq])); err != nil {
					t.Errorf("inclusion of %d in %d: %v", seq, size, err)
				}
			}
			for old := uint64(1); old <= size; old += 5 {
				p, err := auditlog.ConsistencyProof(boltlog.Bind(kv.Wrap(tx)), old, size)
				if err != nil {
					t.Fatal(err)
				}
				if err := tlog.CheckTree(p, int64(size), roots[size], int64(old), roots[old]); err != nil {
					t.Errorf("consistency of %d with %d: %v", old, size, err)
				}
			}
		}
		if _, err := auditlog.InclusionProof(boltlog.Bind(kv.Wrap(tx)), n, n+1); !errors.Is(err, auditlog.ErrNotFound) {
			t.Errorf("a proof of an event past the tree: %v, want ErrNotFound", err)
		}
		return nil
	})
}

// Ensure ids and times never decrease along the log, even when the clock
// steps back, so that ByID's binary search finds every event.
func TestAppend_IDsAndTimesFollowTheSequence(t *testing.T) {
	db := MustOpen(t)
	var evs []*auditlog.Event
	for i, d := range []time.Duration{0, time.Hour, -time.Hour, 0, -2 * time.Hour, time.Millisecond} {
		e := okEvent(t0.Add(d))
		e.IdempotencyKey = fmt.Sprintf("k-%08d", i)
		MustAppend(t, db, e)
		evs = append(evs, e)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Time.Before(evs[i-1].Time) || evs[i].ID <= evs[i-1].ID {
			t.Errorf("event %d (%v, %s) comes before event %d (%v, %s)", evs[i].Seq, evs[i].Time, evs[i].ID, evs[i-1].Seq, evs[i-1].Time, evs[i-1].ID)
		}
	}
	MustView(t, db, func(tx *bolt.Tx) error {
		for _, want := range evs {
			if got, err := auditlog.ByID(boltlog.Bind(kv.Wrap(tx)), want.ID); err != nil || got.Seq != want.Seq {
				t.Errorf("ByID(%s) = %v, %v, want event %d", want.ID, got, err, want.Seq)
			}
		}
		return nil
	})
}

// signedLog is a log with checkpoints signed by a key of its own.
type signedLog struct {
	t   testing.TB
	db  *bolt.DB
	key *auditlog.Key
	cp  *auditlog.Checkpointer
}

func MustSignedLog(t testing.TB, origin string) *signedLog {
	t.Helper()
	key, err := auditlog.LoadKey(filepath.Join(t.TempDir(), "key"), origin, true)
	if err != nil {
		t.Fatal(err)
	}
	l := &signedLog{t: t, db: MustOpen(t), key: key}
	l.cp = &auditlog.Checkpointer{Storage: boltStorage{l.db}, Key: key, Every: 1, Interval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	return l
}

// boltStorage runs the log of a bare bbolt file as an auditlog.Storage.
type boltStorage struct{ db *bolt.DB }

func (s boltStorage) Update(_ context.Context, fn func(auditlog.Writer) error) error {
	return s.db.Update(func(tx *bolt.Tx) error { return fn(boltlog.Bind(kv.Wrap(tx))) })
}

func (s boltStorage) View(_ context.Context, fn func(auditlog.Reader) error) error {
	return s.db.View(func(tx *bolt.Tx) error { return fn(boltlog.Bind(kv.Wrap(tx))) })
}

func (l *signedLog) sign() {
	l.t.Helper()
	if _, err := l.cp.Sign(context.Background()); err != nil {
		l.t.Fatal(err)
	}
}

// verify runs Verify over the stored log.
func (l *signedLog) verify(against []byte) *auditlog.Verification {
	l.t.Helper()
	var v *auditlog.Verification
	MustView(l.t, l.db, func(tx *bolt.Tx) error {
		cps, err := boltlog.Bind(kv.Wrap(tx)).Checkpoints()
		if err != nil {
			return err
		}
		in := auditlog.Input{Key: l.key.Verifier, Checkpoints: cps, Events: boltlog.Bind(kv.Wrap(tx)).Leaves(1)}
		if against != nil {
			in.Against = [][]byte{against}
		}
		v, err = auditlog.Verify(in)
		return err
	})
	return v
}

func (l *signedLog) latest() []byte {
	l.t.Helper()
	var signed []byte
	MustView(l.t, l.db, func(tx *bolt.Tx) error {
		var err error
		_, signed, err = boltlog.Bind(kv.Wrap(tx)).LatestCheckpoint()
		return err
	})
	return signed
}

// tamper changes the stored log directly, as someone with the file could.
func (l *signedLog) tamper(fn func(events, checkpoints *bolt.Bucket) error) {
	l.t.Helper()
	if err := l.db.Update(func(tx *bolt.Tx) error {
		return fn(tx.Bucket([]byte("audit_events")), tx.Bucket([]byte("audit_checkpoints")))
	}); err != nil {
		l.t.Fatal(err)
	}
}

func key8(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// Ensure Verify passes an untouched log, and names the first bad sequence
// number of each kind of tampering: an edited byte, a deleted event, two
// events swapped, the tail cut behind a checkpoint, a forged signature.
func TestVerify_FindsTampering(t *testing.T) {
	build := func(t *testing.T) *signedLog {
		l := MustSignedLog(t, "writerd/test-log")
		MustAppendN(t, l.db, 5)
		l.sign()
		MustAppendN(t, l.db, 5)
		l.sign()
		return l
	}
	if v := build(t).verify(nil); !v.OK() || v.Events != 10 || v.Checkpoints != 2 {
		t.Fatalf("an untouched log: %+v", v)
	}
	tests := []struct {
		name   string
		tamper func(events, cps *bolt.Bucket) error
		seq    uint64
		kind   string
	}{
		{"one byte of one event", func(ev, _ *bolt.Bucket) error {
			v := bytes.Clone(ev.Get(key8(4)))
			i := bytes.Index(v, []byte(`"principal":"local"`)) + len(`"principal":"`)
			v[i] = 'L'
			return ev.Put(key8(4), v)
		}, 4, auditlog.ProblemEdited},
		{"one event deleted", func(ev, _ *bolt.Bucket) error { return ev.Delete(key8(6)) }, 6, auditlog.ProblemMissing},
		{"two events swapped", func(ev, _ *bolt.Bucket) error {
			a, b := bytes.Clone(ev.Get(key8(2))), bytes.Clone(ev.Get(key8(3)))
			if err := ev.Put(key8(2), b); err != nil {
				return err
			}
			return ev.Put(key8(3), a)
		}, 2, auditlog.ProblemReordered},
		{"the tail cut behind a checkpoint", func(ev, _ *bolt.Bucket) error {
			for i := uint64(8); i <= 10; i++ {
				if err := ev.Delete(key8(i)); err != nil {
					return err
				}
			}
			return nil
		}, 8, auditlog.ProblemMissing},
		{"a checkpoint's signature replaced", func(_, cps *bolt.Bucket) error {
			v := string(cps.Get(key8(10)))
			i := strings.LastIndex(v, " ")
			forged := v[:i+1] + strings.Repeat("A", len(v)-i-2) + "\n"
			return cps.Put(key8(10), []byte(forged))
		}, 10, auditlog.ProblemBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := build(t)
			l.tamper(tt.tamper)
			v := l.verify(nil)
			if v.OK() || v.Problems[0].Seq != tt.seq || v.Problems[0].Kind != tt.kind {
				t.Fatalf("problems %+v, want first %s at %d", v.Problems, tt.kind, tt.seq)
			}
		})
	}
}

// Ensure a checkpoint saved before more writes verifies as extended, and
// one from another log does not.
func TestVerify_Against(t *testing.T) {
	l := MustSignedLog(t, "writerd/test-log")
	MustAppendN(t, l.db, 3)
	l.sign()
	saved := l.latest()
	MustAppendN(t, l.db, 4)
	l.sign()
	if v := l.verify(saved); !v.OK() {
		t.Fatalf("against an earlier checkpoint: %+v", v.Problems)
	}
	other := MustSignedLog(t, "writerd/other-log")
	MustAppendN(t, other.db, 3)
	other.sign()
	if v := l.verify(other.latest()); v.OK() || v.Problems[0].Kind != auditlog.ProblemNotExtension {
		t.Fatalf("against another log's checkpoint: %+v, want not_extension", v.Problems)
	}
}

// Ensure a range verifies from its prefix alone (as an export carries it),
// and fails if one of its events changes.
func TestVerify_FromPrefix(t *testing.T) {
	l := MustSignedLog(t, "writerd/test-log")
	MustAppendN(t, l.db, 13)
	l.sign()
	for _, from := range []uint64{1, 2, 8, 13} {
		var prefix auditlog.Prefix
		var lines [][]byte
		MustView(t, l.db, func(tx *bolt.Tx) error {
			var err error
			if prefix, err = auditlog.PrefixOf(boltlog.Bind(kv.Wrap(tx)), from-1); err != nil {
				return err
			}
			return raw(kv.Wrap(tx), func(seq uint64, c []byte) error {
				if seq >= from {
					lines = append(lines, bytes.Clone(c))
				}
				return nil
			})
		})
		run := func(lines [][]byte) *auditlog.Verification {
			v, err := auditlog.Verify(auditlog.Input{Key: l.key.Verifier, Checkpoints: [][]byte{l.latest()}, Prefix: prefix,
				Events: func(yield func(uint64, []byte, []byte) bool) error {
					for i, c := range lines {
						if !yield(from+uint64(i), c, nil) {
							break
						}
					}
					return nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		if v := run(lines); !v.OK() || v.Checkpoints != 1 {
			t.Errorf("from %d: %+v", from, v)
		}
		edited := append([][]byte(nil), lines...)
		edited[len(edited)-1] = bytes.Replace(edited[len(edited)-1], []byte(`"local"`), []byte(`"LOCAL"`), 1)
		if v := run(edited); v.OK() {
			t.Errorf("from %d: an edited event verified", from)
		}
	}
}

// Ensure a log of the format before the tree (seq → canonical JSON, and an
// id index) is converted by Init: the same leaves, their tree hashes
// added, the index dropped, and appends go on.
func TestInit_ConvertsTheFormatBeforeTheTree(t *testing.T) {
	db := MustOpen(t)
	MustAppendN(t, db, 6)
	want := stored(t, db)
	err := db.Update(func(tx *bolt.Tx) error {
		ev := tx.Bucket([]byte("audit_events"))
		ids, err := tx.CreateBucket([]byte("audit_ids"))
		if err != nil {
			return err
		}
		for seq, c := range want {
			if err := ev.Put(key8(seq), c); err != nil {
				return err
			}
			if err := ids.Put([]byte(fmt.Sprint(seq)), key8(seq)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return boltlog.Init(kv.Wrap(tx)) }); err != nil {
		t.Fatal(err)
	}
	MustAppendN(t, db, 1)
	got := stored(t, db)
	for seq, c := range want {
		if !bytes.Equal(got[seq], c) {
			t.Errorf("event %d changed in the conversion", seq)
		}
	}
	l := &signedLog{t: t, db: db}
	key, _ := auditlog.LoadKey(filepath.Join(t.TempDir(), "key"), "writerd/test-log", true)
	l.key = key
	l.cp = &auditlog.Checkpointer{Storage: boltStorage{db}, Key: key, Every: 1, Interval: time.Hour}
	l.sign()
	if v := l.verify(nil); !v.OK() || v.Events != 7 {
		t.Fatalf("the converted log: %+v", v)
	}
	MustView(t, db, func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("audit_ids")) != nil {
			t.Error("the old id index is still there")
		}
		return nil
	})
}
