//go:build writerd_testtools

package main

// This file is compiled only with -tags writerd_testtools, into the binary
// the end-to-end tests build: it adds tools that fail on purpose and a
// storage fault, so that the tests can show what a client sees then.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
)

// TestFaultEnv names the fault to inject: "failure-audit" makes every
// append of a failure event fail, as a full or broken disk would;
// "file-size-limit" caps the size of every file the process writes at
// fileSizeLimit (RLIMIT_FSIZE), so that once the database must grow, each
// commit fails in bbolt with an error naming the file by its path, which
// must reach the log as <data>/writerd.db.
const TestFaultEnv = "WRITERD_TEST_FAULT"

// TestFailpointEnv names the failpoint of a write outside the store at
// which the process kills itself with SIGKILL (pipeline.FailpointPending,
// FailpointAnswered, FailpointCompleting): no shutdown, no last fsync,
// as a crash there would.
const TestFailpointEnv = "WRITERD_TEST_FAILPOINT"

// TestLeaseEnv gives a pending write's lease (a Go duration, such as
// "2s"); the takeover sweep runs every quarter of it. A crash trial on
// PostgreSQL, where a pending record is taken over only past its lease,
// settles in seconds with it instead of a minute.
const TestLeaseEnv = "WRITERD_TEST_LEASE"

// fileSizeLimit is the cap of the "file-size-limit" fault: room for the
// new database and a few dozen writes.
const fileSizeLimit = 256 << 10

type testIn struct {
	pipeline.Key
	Marker string `json:"marker,omitempty" jsonschema:"maxLength=100"`
}

type testOut struct {
	OK bool `json:"ok"`
}

func init() {
	if os.Getenv(TestFaultEnv) == "file-size-limit" {
		// Past the limit, write and truncate fail with EFBIG, and the
		// kernel sends SIGXFSZ, which would end the process.
		signal.Ignore(syscall.SIGXFSZ)
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
			panic(err)
		}
		lim.Cur = fileSizeLimit
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
			panic(err)
		}
	}
	if at := os.Getenv(TestFailpointEnv); at != "" {
		failpoint = func(name string) {
			if name == at {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // SIGKILL is not handled: nothing runs after it
			}
		}
	}
	if v := os.Getenv(TestLeaseEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			panic(fmt.Sprintf("%s=%q: want a positive duration", TestLeaseEnv, v))
		}
		testLease = d
	}
	extraTools = func() []*pipeline.Tool[handlers.Store] {
		return []*pipeline.Tool[handlers.Store]{
			pipeline.MustDefine(pipeline.Spec[handlers.Store, testIn, testOut]{
				Name: "test_panic", Description: "Panics (test build only).",
				Run: func(context.Context, *pipeline.Op[handlers.Store], *testIn) (*testOut, error) {
					panic("test_panic: secret-panic-marker")
				},
			}),
			pipeline.MustDefine(pipeline.Spec[handlers.Store, testIn, testOut]{
				Name: "test_error", Description: "Fails with an unexpected error (test build only).",
				Run: func(_ context.Context, _ *pipeline.Op[handlers.Store], in *testIn) (*testOut, error) {
					return nil, fmt.Errorf("driver failed at /var/lib/secret-path-marker: %s", in.Marker)
				},
			}),
		}
	}
	wrapStorage = func(s pipeline.Storage[handlers.Store]) pipeline.Storage[handlers.Store] {
		if os.Getenv(TestFaultEnv) == "failure-audit" {
			return failingStorage{s}
		}
		return s
	}
}

// failingStorage hands out, with each transaction, an audit log that
// cannot append a failure.
type failingStorage struct {
	pipeline.Storage[handlers.Store]
}

func (f failingStorage) Update(ctx context.Context, fn func(pipeline.Tx[handlers.Store]) error) error {
	return f.Storage.Update(ctx, func(tx pipeline.Tx[handlers.Store]) error { return fn(failingTx{tx}) })
}

type failingTx struct{ pipeline.Tx[handlers.Store] }

func (t failingTx) Audit() pipeline.Audit { return failingAudit{t.Tx.Audit()} }

type failingAudit struct{ pipeline.Audit }

func (f failingAudit) Append(e *auditlog.Event) error {
	if e.Outcome == auditlog.Failed {
		return errors.New("injected fault: cannot append at /var/lib/secret-path-marker")
	}
	return f.Audit.Append(e)
}
