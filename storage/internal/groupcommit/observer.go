package groupcommit

import (
	"sync/atomic"
	"time"
)

// Observer holds the function a backend tells of every commit that
// succeeds (its ObserveCommits: the metrics, the checkpointer's
// wake-up), which may be set while commits run. The zero Observer tells
// no one.
type Observer struct {
	f atomic.Pointer[func(d time.Duration, writes int)]
}

// Set has f told of every later commit; nil tells no one.
func (o *Observer) Set(f func(d time.Duration, writes int)) {
	if f == nil {
		o.f.Store(nil)
		return
	}
	o.f.Store(&f)
}

// Observe tells the function set, if any, of a commit of writes that
// took d.
func (o *Observer) Observe(d time.Duration, writes int) {
	if f := o.f.Load(); f != nil {
		(*f)(d, writes)
	}
}
