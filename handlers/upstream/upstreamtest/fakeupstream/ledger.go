package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
)

// ledger is the fake's durable state: the ledger file, guarded across
// processes by an flock of LEDGER.lock and within this one by mu, and the
// tickets replayed from it. Writes are group-committed: the calls waiting
// while one batch is fsynced go in the next batch, under one fsync.
type ledger struct {
	path    string
	lock    *os.File
	file    *os.File
	noFsync bool // -no-fsync: written, never fsynced (writerd bench)

	ops chan *op

	mu    sync.Mutex // the replayed state below, and the file's offset
	off   int64      // how much of the file is replayed
	keys  map[string]upstreamtest.Entry
	tix   map[string]*upstreamtest.Ticket
	count int // tickets created
}

// op is one call's turn at the ledger: run sees the state (under the
// lock, caught up) and returns the entry to append, or nil if nothing
// executed, and its answer.
type op struct {
	key, digest string
	run         func(l *ledger) (*upstreamtest.Entry, *mcp.CallToolResult, error)

	replay bool                // answered from the ledger: result, as first sent
	answer *mcp.CallToolResult // the answer made now (nil for a replay)
	result json.RawMessage     // the answer, as the ledger keeps it
	entry  *upstreamtest.Entry
	err    error
	done   chan struct{}
}

func openLedger(path string) (*ledger, error) {
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	l := &ledger{
		path: path, lock: lock, file: f,
		ops:  make(chan *op, 1024),
		keys: make(map[string]upstreamtest.Entry),
		tix:  make(map[string]*upstreamtest.Ticket),
	}
	go l.commitLoop()
	return l, nil
}

// do runs o at the ledger and waits for it to be durable.
func (l *ledger) do(o *op) *op {
	o.done = make(chan struct{})
	l.ops <- o
	<-o.done
	return o
}

func (l *ledger) commitLoop() {
	for first := range l.ops {
		batch := []*op{first}
	drain:
		for len(batch) < 256 {
			select {
			case o := <-l.ops:
				batch = append(batch, o)
			default:
				break drain
			}
		}
		l.commit(batch)
	}
}

func (l *ledger) commit(batch []*op) {
	fail := func(err error) {
		for _, o := range batch {
			o.err = err
			close(o.done)
		}
	}
	if err := syscall.Flock(int(l.lock.Fd()), syscall.LOCK_EX); err != nil {
		fail(fmt.Errorf("flock: %w", err))
		return
	}
	defer syscall.Flock(int(l.lock.Fd()), syscall.LOCK_UN)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.catchUp(); err != nil {
		fail(err)
		return
	}
	var buf bytes.Buffer
	for _, o := range batch {
		if o.key != "" {
			if e, ok := l.keys[o.key]; ok {
				if e.ArgsDigest != o.digest {
					o.answer, o.err = refusal("This idempotency key was already used with other arguments.")
				} else {
					o.replay, o.result = true, e.Result
				}
				continue
			}
		}
		e, answer, err := o.run(l)
		o.answer, o.err = answer, err
		if e == nil || err != nil {
			continue
		}
		res, err := json.Marshal(answer)
		if err != nil {
			o.err = err
			continue
		}
		o.result = res
		e.Time = time.Now().UTC()
		e.UpstreamKey, e.ArgsDigest, e.AttemptID, e.Instance = o.key, o.digest, newID(), os.Getpid()
		e.Result = res
		line, err := json.Marshal(e)
		if err != nil {
			o.err = err
			continue
		}
		buf.Write(line)
		buf.WriteByte('\n')
		l.apply(*e)
		o.entry = e
	}
	if buf.Len() > 0 {
		if _, err := l.file.WriteAt(buf.Bytes(), l.off); err != nil {
			fail(fmt.Errorf("ledger: %w", err))
			os.Exit(1) // the replayed state is ahead of the file
		}
		if l.noFsync {
			// writerd bench's upstream answering at once: no flush.
		} else if err := l.file.Sync(); err != nil {
			fail(fmt.Errorf("ledger: fsync: %w", err))
			os.Exit(1)
		}
		l.off += int64(buf.Len())
	}
	for _, o := range batch {
		close(o.done)
	}
}

// read runs f on the state, caught up with the file.
func (l *ledger) read(f func(l *ledger)) error {
	if err := syscall.Flock(int(l.lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(l.lock.Fd()), syscall.LOCK_UN)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.catchUp(); err != nil {
		return err
	}
	f(l)
	return nil
}

// catchUp replays what other instances appended since; a last line
// without its newline (a write a crash cut, never answered) is cut off.
func (l *ledger) catchUp() error {
	st, err := l.file.Stat()
	if err != nil {
		return err
	}
	if st.Size() == l.off {
		return nil
	}
	b := make([]byte, st.Size()-l.off)
	if _, err := l.file.ReadAt(b, l.off); err != nil && err != io.EOF {
		return err
	}
	end := bytes.LastIndexByte(b, '\n') + 1
	if end < len(b) {
		if err := l.file.Truncate(l.off + int64(end)); err != nil {
			return err
		}
	}
	for _, line := range bytes.Split(b[:end], []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var e upstreamtest.Entry
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		l.apply(e)
	}
	l.off += int64(end)
	return nil
}

// apply replays one entry into the state.
func (l *ledger) apply(e upstreamtest.Entry) {
	if e.UpstreamKey != "" {
		l.keys[e.UpstreamKey] = e
	}
	if e.Ticket != nil {
		t := *e.Ticket
		if _, ok := l.tix[t.ID]; !ok {
			l.count++
		}
		l.tix[t.ID] = &t
	}
}

func newID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}
