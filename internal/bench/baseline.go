package bench

import (
	"context"
	encbin "encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	bbolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// The baselines of writerd bench --baseline: the raw store doing the puts
// of one write, with nothing of the pipeline around them. A write's puts
// are three values of ArgBytes: the entity under a new ULID, the
// key's record under principal 0x00 key, the audit event under the next
// sequence number, each in a bucket of its own, in one transaction. Every
// baseline runs on a fresh data directory, with writerd's page size and
// bbolt's defaults otherwise (fsync on), for the same duration and agents
// as writerd's run.

var (
	baseEntities = []byte("entities")
	baseKeys     = []byte("keys")
	baseEvents   = []byte("events")
)

// baseValue is every put's value.
var baseValue = []byte(strings.Repeat("x", ArgBytes))

// baseline is one way of committing the puts.
type baseline struct {
	name string
	// open opens a store in dir and returns its write, which commits one
	// write's puts durably, and a count of the commits so far.
	open func(dir string) (write func(key []byte) error, commits func() tally, close func() error, err error)
}

func baselines() []baseline {
	return []baseline{
		{"db.Update", boltBaseline(func(db *bbolt.DB) func(func(*bbolt.Tx) error) error { return db.Update })},
		{"db.Batch 10ms", boltBaseline(func(db *bbolt.DB) func(func(*bbolt.Tx) error) error {
			return db.Batch // its default MaxBatchDelay, 10 ms
		})},
		{"db.Batch 1ms", boltBaseline(func(db *bbolt.DB) func(func(*bbolt.Tx) error) error {
			db.MaxBatchDelay = time.Millisecond
			return db.Batch
		})},
		{"group commit", groupBaseline},
	}
}

// runBaselines runs every baseline, one after the other, each on a fresh
// data directory removed after it.
func (b *bench) runBaselines(ctx context.Context) ([]*Result, error) {
	var runs []*Result
	for _, bl := range baselines() {
		run, err := b.runBaseline(ctx, bl)
		if err != nil {
			return nil, err
		}
		runs = append(runs, run)
	}
	return runs, nil
}

func (b *bench) runBaseline(ctx context.Context, bl baseline) (*Result, error) {
	dir, err := os.MkdirTemp("", "writerd-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	write, commits, closeStore, err := bl.open(dir)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	w := newWorkload(b.tool, b.agents)
	runtime.GC()
	c0 := commits()
	cpu0, cpuOK := cpuTime()
	run, err := drive(ctx, b.progress, bl.name, b.agents, b.duration, func(a int, i int64) string {
		if err := write([]byte("bench\x00" + w.key(a, i))); err != nil {
			return "STORE"
		}
		return ""
	})
	cpu1, _ := cpuTime()
	if err != nil {
		return nil, err
	}
	t := commits().sub(c0)
	if t.writes == 0 { // bbolt's: every write counted is in a commit
		t.writes = run.Writes
	}
	run.setCommits(t)
	if cpuOK {
		run.setCPU(cpu1 - cpu0)
	}
	return run, nil
}

// boltBaseline commits through a bbolt method, db.Update or db.Batch,
// which txn returns for the open database. Commits are counted by the
// transaction ids the writes meet: every write transaction has its own.
func boltBaseline(txn func(*bbolt.DB) func(func(*bbolt.Tx) error) error) func(string) (func([]byte) error, func() tally, func() error, error) {
	return func(dir string) (func([]byte) error, func() tally, func() error, error) {
		db, err := bbolt.Open(filepath.Join(dir, bolt.FileName), 0o600, &bbolt.Options{PageSize: bolt.PageSize})
		if err != nil {
			return nil, nil, nil, err
		}
		err = db.Update(func(tx *bbolt.Tx) error { return createBaseBuckets(tx) })
		if err != nil {
			db.Close()
			return nil, nil, nil, err
		}
		var last, commits atomic.Int64
		do := txn(db)
		write := func(key []byte) error {
			return do(func(tx *bbolt.Tx) error {
				if id := int64(tx.ID()); last.Swap(id) != id {
					commits.Add(1)
				}
				return basePuts(tx.Bucket, key)
			})
		}
		return write, func() tally { return tally{commits: commits.Load()} }, db.Close, nil
	}
}

// groupBaseline commits through writerd's group commit, bolt.DB.Update,
// each write's puts through the savepointed transaction its stores use.
func groupBaseline(dir string) (func([]byte) error, func() tally, func() error, error) {
	db, err := bolt.Open(dir, func(tx *kv.Tx) error { return createBaseBuckets(tx.Bolt()) })
	if err != nil {
		return nil, nil, nil, err
	}
	var commits tallier
	db.ObserveCommits(commits.observe)
	write := func(key []byte) error {
		return db.Update(context.Background(), func(tx *kv.Tx) error { return basePuts(tx.Bucket, key) })
	}
	return write, commits.load, db.Close, nil
}

func createBaseBuckets(tx *bbolt.Tx) error {
	for _, name := range [][]byte{baseEntities, baseKeys, baseEvents} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	return nil
}

// putter is what basePuts needs of a bucket: bbolt's, or kv's.
type putter interface {
	Put(key, value []byte) error
	NextSequence() (uint64, error)
}

// basePuts puts one write's three values in the buckets bucket returns.
func basePuts[B putter](bucket func([]byte) B, key []byte) error {
	if err := bucket(baseEntities).Put([]byte(ulid.Make().String()), baseValue); err != nil {
		return err
	}
	if err := bucket(baseKeys).Put(key, baseValue); err != nil {
		return err
	}
	events := bucket(baseEvents)
	seq, err := events.NextSequence()
	if err != nil {
		return err
	}
	return events.Put(encbin.BigEndian.AppendUint64(nil, seq), baseValue)
}

// The bare SDK server's store (sdkserver.go): a project under its
// id and its name in an index, in one durable db.Update, as a user's own
// MCP server on bbolt would keep them; writerd's page size and bbolt's
// defaults otherwise (fsync on).

var (
	sdkProjects = []byte("projects")
	sdkNames    = []byte("project_names")
)

// sdkStore is the bare SDK server's store.
type sdkStore struct {
	db            *bbolt.DB
	last, commits atomic.Int64
}

func openSDKStore(dir string) (*sdkStore, error) {
	db, err := bbolt.Open(filepath.Join(dir, bolt.FileName), 0o600, &bbolt.Options{PageSize: bolt.PageSize})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, name := range [][]byte{sdkProjects, sdkNames} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &sdkStore{db: db}, nil
}

// createProject puts the project's value under id and id under its name,
// in one transaction, unless the name is taken: then it reports so and
// puts nothing.
func (s *sdkStore) createProject(id, name string, value []byte) (taken bool, err error) {
	err = s.db.Update(func(tx *bbolt.Tx) error {
		if n := int64(tx.ID()); s.last.Swap(n) != n {
			s.commits.Add(1)
		}
		names := tx.Bucket(sdkNames)
		if names.Get([]byte(name)) != nil {
			taken = true
			return nil
		}
		if err := tx.Bucket(sdkProjects).Put([]byte(id), value); err != nil {
			return err
		}
		return names.Put([]byte(name), []byte(id))
	})
	return taken, err
}

func (s *sdkStore) tally() tally { return tally{commits: s.commits.Load()} }

func (s *sdkStore) close() error { return s.db.Close() }
