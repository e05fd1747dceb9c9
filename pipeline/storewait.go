package pipeline

import (
	"context"
	"errors"
	"time"
)

// A write waits for its store a bounded time (docs/DESIGN.md sections 11
// and 14): each transaction the pipeline submits carries a deadline,
// Config.StoreWait from its submission, which the store honours
// (Storage.Update) while the write waits for its turn and for its commit;
// a call's read transactions are bounded alike (Pipeline.view). At the
// deadline the call is answered UNAVAILABLE with retry same_key: a store
// that is slow, stalled or cut off makes callers retry, never hang. A
// write not yet run when its deadline passes never runs; one that ran may
// still commit, and its key makes the retry safe, as for any commit whose
// outcome is unknown.

// DefaultStoreWait is Config.StoreWait's default: under the HTTP write
// timeout and the SDKs' request timeout (60 s each), so that a caller is
// answered before it gives up.
const DefaultStoreWait = 10 * time.Second

// ErrStoreWait is in the chain of the error of a write whose store did
// not take it within its wait (StoreWaitExpired).
var ErrStoreWait = errors.New("pipeline: the store did not commit the write within its wait")

const storeWaitMessage = "The store did not commit this call in time, and it may or may not have been recorded; send it again with the same key in a little while."

// StoreWaitExpired is the answer to a write whose store did not take it
// within its wait: UNAVAILABLE with retry same_key.
func StoreWaitExpired() *Error { return Wrap(Unavailable, ErrStoreWait, storeWaitMessage) }

type storeDeadlineKey struct{}

// WithStoreDeadline returns ctx carrying the deadline of a write's wait
// for its store.
func WithStoreDeadline(ctx context.Context, deadline time.Time) context.Context {
	return context.WithValue(ctx, storeDeadlineKey{}, deadline)
}

// StoreDeadline returns the deadline ctx carries for a write's wait for
// its store, if it carries one: a Storage's Update answers
// StoreWaitExpired once it passes, whatever ctx's own cancellation.
func StoreDeadline(ctx context.Context) (time.Time, bool) {
	d, ok := ctx.Value(storeDeadlineKey{}).(time.Time)
	return d, ok
}
