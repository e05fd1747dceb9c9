package idempotency

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrInUse is returned by Locks.Acquire when another call still holds the
// key after the wait.
var ErrInUse = errors.New("idempotency: key in use")

// Locks serialises the calls of one process that share a principal and key.
// The zero value is ready to use.
type Locks struct {
	mu   sync.Mutex
	held map[string]chan struct{} // closed when released
}

// Held reports whether a call of this process holds principal's key.
func (l *Locks) Held(principal, key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, held := l.held[principal+"\x00"+key]
	return held
}

// Acquire waits at most wait for principal's key to be free and takes it. It
// returns ErrInUse after the wait, or ctx's error if ctx ends first. The
// returned release frees the key; calling it
// again does nothing.
func (l *Locks) Acquire(ctx context.Context, principal, key string, wait time.Duration) (release func(), err error) {
	k := principal + "\x00" + key // a principal holds no NUL (its token name)
	var timer *time.Timer
	for {
		l.mu.Lock()
		done, busy := l.held[k]
		if !busy {
			if l.held == nil {
				l.held = make(map[string]chan struct{})
			}
			mine := make(chan struct{})
			l.held[k] = mine
			l.mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
			var once sync.Once
			return func() {
				once.Do(func() {
					l.mu.Lock()
					if l.held[k] == mine { // never another holder's
						delete(l.held, k)
					}
					l.mu.Unlock()
					close(mine)
				})
			}, nil
		}
		l.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(wait)
		}
		select {
		case <-done:
		case <-timer.C:
			return nil, ErrInUse
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		}
	}
}
