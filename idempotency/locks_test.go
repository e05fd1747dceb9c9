package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writerd/writerd/idempotency"
)

// MustAcquire takes principal's key without waiting and returns its release.
func MustAcquire(t testing.TB, l *idempotency.Locks, principal, key string) func() {
	t.Helper()
	release, err := l.Acquire(context.Background(), principal, key, 0)
	if err != nil {
		t.Fatalf("Acquire(%q, %q): %v", principal, key, err)
	}
	return release
}

// acquireAsync calls Acquire in a goroutine; the channel yields its error
// and, on success, the lock is released at once.
func acquireAsync(ctx context.Context, l *idempotency.Locks, principal, key string, wait time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		release, err := l.Acquire(ctx, principal, key, wait)
		if err == nil {
			release()
		}
		done <- err
	}()
	return done
}

// Ensure that many calls sharing a key run one at a time, each getting its
// turn, while calls on other keys (and other principals' same key) run
// alongside.
func TestLocks_Exclusive(t *testing.T) {
	var l idempotency.Locks
	const keys, callers = 8, 25
	var inside [keys]atomic.Int32
	var ran [keys]int // guarded by the lock under test
	var overlap atomic.Int32
	var wg sync.WaitGroup
	for k := range keys {
		for range callers {
			wg.Go(func() {
				// Principals "p" and "pk-0" join differently with their
				// keys; they must not share a lock.
				principal, key := "p", fmt.Sprintf("k-%d", k)
				if k%2 == 1 {
					principal, key = fmt.Sprintf("pk-%d", k-1), ""
				}
				release, err := l.Acquire(context.Background(), principal, key, 30*time.Second)
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				if inside[k].Add(1) != 1 {
					overlap.Add(1)
				}
				ran[k]++
				time.Sleep(100 * time.Microsecond)
				inside[k].Add(-1)
				release()
			})
		}
	}
	wg.Wait()
	if n := overlap.Load(); n != 0 {
		t.Errorf("%d calls held a key together with another", n)
	}
	for k, n := range ran {
		if n != callers {
			t.Errorf("key %d ran %d calls, want %d", k, n, callers)
		}
	}
}

// Ensure different keys, and the same key of different principals, never
// wait for one another.
func TestLocks_DifferentKeysDoNotBlock(t *testing.T) {
	var l idempotency.Locks
	defer MustAcquire(t, &l, "a", "key")()
	defer MustAcquire(t, &l, "a", "key2")()
	defer MustAcquire(t, &l, "b", "key")()
	defer MustAcquire(t, &l, "ak", "ey")()
	defer MustAcquire(t, &l, "", "akey")()
}

// Ensure a waiter gets the key as soon as its holder releases it.
func TestLocks_WaiterGetsKeyAfterRelease(t *testing.T) {
	var l idempotency.Locks
	release := MustAcquire(t, &l, "p", "k")
	done := acquireAsync(context.Background(), &l, "p", "k", 30*time.Second)
	select {
	case err := <-done:
		t.Fatalf("Acquire returned %v while the key was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiter: %v, want the key", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter still waiting after the release")
	}
	// The waiter released in turn: the key is free.
	MustAcquire(t, &l, "p", "k")()
}

// Ensure a call still held up after the wait answers ErrInUse, and that the
// holder keeps the key.
func TestLocks_InUseAfterWait(t *testing.T) {
	var l idempotency.Locks
	release := MustAcquire(t, &l, "p", "k")
	const wait = 50 * time.Millisecond
	start := time.Now()
	_, err := l.Acquire(context.Background(), "p", "k", wait)
	if !errors.Is(err, idempotency.ErrInUse) {
		t.Fatalf("Acquire: err = %v, want ErrInUse", err)
	}
	if d := time.Since(start); d < wait {
		t.Errorf("ErrInUse after %v, before the wait of %v", d, wait)
	}
	if _, err := l.Acquire(context.Background(), "p", "k", 0); !errors.Is(err, idempotency.ErrInUse) {
		t.Errorf("after a timed-out waiter: err = %v, want ErrInUse (still held)", err)
	}
	release()
	MustAcquire(t, &l, "p", "k")()
}

// Ensure a waiter whose context ends returns the context's error at once,
// without taking the key.
func TestLocks_ContextEnds(t *testing.T) {
	var l idempotency.Locks
	release := MustAcquire(t, &l, "p", "k")
	defer release()

	ctx, cancel := context.WithCancel(context.Background())
	done := acquireAsync(ctx, &l, "p", "k", time.Minute)
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled waiter: err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled waiter still waiting")
	}

	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(ctx, "p", "k", time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiter past its deadline: err = %v, want context.DeadlineExceeded", err)
	}
	if _, err := l.Acquire(context.Background(), "p", "k", 0); !errors.Is(err, idempotency.ErrInUse) {
		t.Errorf("after cancelled waiters: err = %v, want ErrInUse (still held)", err)
	}
}

// Ensure a crowd of waiters on one key, some of them giving up, all end
// with the key free and every patient one served.
func TestLocks_CrowdWithTimeouts(t *testing.T) {
	var l idempotency.Locks
	var served, gaveUp atomic.Int32
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			wait := 30 * time.Second
			if i%4 == 0 {
				wait = time.Millisecond
			}
			release, err := l.Acquire(ctx, "p", "k", wait)
			switch {
			case err == nil:
				served.Add(1)
				release()
			case errors.Is(err, idempotency.ErrInUse) && i%4 == 0:
				gaveUp.Add(1)
			default:
				t.Errorf("waiter %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if s, g := served.Load(), gaveUp.Load(); s+g != 200 || s < 150 {
		t.Errorf("served %d, gave up %d; want all 150 patient waiters served", s, g)
	}
	MustAcquire(t, &l, "p", "k")()
}

// Ensure a release called twice is harmless: the second call neither
// frees the key for a later holder's waiters nor panics.
func TestLocks_ReleaseTwiceIsHarmless(t *testing.T) {
	var l idempotency.Locks
	ctx := context.Background()
	first, err := l.Acquire(ctx, "p", "k-00000001", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	first()
	second, err := l.Acquire(ctx, "p", "k-00000001", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("a second release panicked: %v", r)
			}
		}()
		first()
	}()
	if _, err := l.Acquire(ctx, "p", "k-00000001", 10*time.Millisecond); !errors.Is(err, idempotency.ErrInUse) {
		t.Fatalf("after a stale release, Acquire = %v, want ErrInUse: the second holder still holds the key", err)
	}
	second()
	second()
	third, err := l.Acquire(ctx, "p", "k-00000001", time.Second)
	if err != nil {
		t.Fatalf("after the holder released: %v", err)
	}
	third()
}
