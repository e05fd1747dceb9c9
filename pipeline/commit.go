package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/idempotency"
)

// errSettled rolls back the write transaction of a call whose key already
// has a live record: it wrote nothing, and is answered from the record.
var errSettled = errors.New("pipeline: key already settled")

// update is the one commit function: every write of the pipeline (a
// successful call, a failure receipt, key collection) goes through it.
// The storage may commit it together with others (group commit); its
// commits are measured there. It waits for the store at most
// Config.StoreWait (storewait.go).
func (p *Pipeline[D]) update(ctx context.Context, fn func(Tx[D]) error) error {
	err := p.cfg.Storage.Update(WithStoreDeadline(ctx, time.Now().Add(p.cfg.StoreWait)), fn)
	if errors.Is(err, ErrStoreWait) {
		p.cfg.Metrics.StoreWaitExpired()
	}
	return err
}

// view runs fn in a read transaction, waiting for the store at most
// Config.StoreWait, as a write does (storewait.go): a call's lookup of its
// key, its preview and a read tool are answered UNAVAILABLE with retry
// same_key past it, rather than held by a store gone silent.
func (p *Pipeline[D]) view(ctx context.Context, fn func(Tx[D]) error) error {
	vctx, cancel := context.WithTimeout(ctx, p.cfg.StoreWait)
	defer cancel()
	err := p.cfg.Storage.View(vctx, fn)
	if err != nil && ctx.Err() == nil && errors.Is(vctx.Err(), context.DeadlineExceeded) {
		p.cfg.Metrics.StoreWaitExpired()
		return StoreWaitExpired()
	}
	return err
}

// write runs stages 7 and 8 for a write tool: under the key's lock, the
// key is looked up again inside the write transaction, the handler runs,
// and its change, the idempotency record and the audit event commit
// together. A panic anywhere in the transaction rolls it back and is
// recorded as a failure.
func (p *Pipeline[D]) write(ctx context.Context, c Caller, t *Tool[D], in any, digest string, start time.Time) *Result {
	reqID := RequestID(ctx)
	key := in.(keyed).idempotencyKey()
	if err := p.refused(); err != nil {
		// A refused write never reaches its claim: where the claim was to
		// be its lookup (lookupFirst), a replay is looked up here, since
		// replays still answer while writes are refused.
		if !p.lookupFirst(t, in) {
			if res := p.lookup(ctx, c, key, digest); res != nil {
				return res
			}
		}
		return &Result{RequestID: reqID, Outcome: OutcomeError, Err: err}
	}
	// One wait for the key in all: for the calls of this process (the
	// lock), then for those of others sharing the store (the claim).
	deadline := time.Now().Add(p.cfg.KeyWait)
	release, err := p.locks.Acquire(ctx, c.Principal, key, p.cfg.KeyWait)
	if err != nil {
		if errors.Is(err, idempotency.ErrInUse) {
			return p.inUse(reqID)
		}
		return &Result{RequestID: reqID, Outcome: OutcomeError, Err: Cancelled(err)}
	}
	defer release()

	op := &Op[D]{Caller: c}
	ev := &auditlog.Event{
		RequestID: reqID, Principal: c.Principal, Transport: c.Transport,
		Tool: t.Name, IdempotencyKey: key, Digest: digest,
	}
	var rec *idempotency.Record
	var out []byte
	err = p.update(ctx, func(tx Tx[D]) (err error) {
		defer recoverInto(&err)
		op.Store, op.Now, op.targets, op.keys = tx.Domain(), p.now(), nil, tx.Keys()
		op.resolves, op.appended = nil, nil
		if rec, err = p.claim(tx, c.Principal, key, digest, op.Now, deadline); rec != nil || err != nil {
			return err
		}
		// The write is the store's now: it completes whatever its caller
		// does (a handler that honoured the caller's going away would fail
		// a write that reached its commit, and spend its key).
		if out, err = p.dispatch(context.WithoutCancel(ctx), t, op, in); err != nil {
			return err
		}
		p.finishEvent(ev, op.Now, op.targets, start, nil)
		ev.Resolves = op.resolves
		if err := tx.Audit().Append(ev); err != nil {
			return err
		}
		if op.appended != nil {
			if err := op.appended(ev); err != nil {
				return err
			}
		}
		return tx.Keys().Put(p.record(ev, op.Now, idempotency.Completed, out, ""))
	})
	switch {
	case errors.Is(err, errSettled):
		return p.settled(reqID, rec, digest, op.Now)
	case errors.Is(err, idempotency.ErrInUse):
		return p.inUse(reqID)
	case errors.Is(err, ErrCancelled):
		// Its caller went away before it ran: nothing ran, nothing was
		// recorded, and the key is unused.
		return &Result{RequestID: reqID, Outcome: OutcomeError, Err: Public(err)}
	}
	p.cfg.Metrics.Idempotency("new")
	if err != nil {
		return p.fail(ctx, ev, op, start, deadline, err)
	}
	p.cfg.Metrics.AuditAppend(true)
	return &Result{RequestID: reqID, Outcome: OutcomeOK, Output: out, AuditID: ev.ID}
}

// refused asks Config.Refuse whether writes are refused now: nil, or the
// error every write is answered with (an error that is no *Error is the
// fixed INTERNAL one; either way with retry same_key, since nothing is
// recorded).
func (p *Pipeline[D]) refused() *Error {
	if p.cfg.Refuse == nil {
		return nil
	}
	if err := p.cfg.Refuse(); err != nil {
		e := Public(err)
		if e.Retry != RetrySameKey {
			c := *e
			c.Retry = RetrySameKey
			e = &c
		}
		return e
	}
	return nil
}

// claim looks the key up inside a write transaction and claims it for
// the transaction (Keys' claim rule), waiting for another process's write
// of the key until deadline at most. It returns the record and errSettled
// if the key has a live record, so that the transaction writes nothing
// and the call is answered from the record; idempotency.ErrInUse if the
// key is still claimed elsewhere after the wait.
func (p *Pipeline[D]) claim(tx Tx[D], principal, key, digest string, now, deadline time.Time) (*idempotency.Record, error) {
	rec, err := tx.Keys().Claim(principal, key, time.Until(deadline))
	if err != nil {
		return nil, err
	}
	if rec.Match(digest, now) == idempotency.Run {
		return nil, nil
	}
	return rec, errSettled
}

// inUse answers a call whose key another call holds, in this process or,
// through the claim, in another: nothing ran and nothing was recorded.
func (p *Pipeline[D]) inUse(reqID string) *Result {
	p.cfg.Metrics.Idempotency("in_use")
	return &Result{RequestID: reqID, Outcome: OutcomeConflict,
		Err: Errorf(KeyInUse, "Another call with this idempotency key is still running; send the same call again with the same key shortly.")}
}

// settled answers a call whose key has a live record: the replay or one of
// the two conflicts. None of them writes anything.
func (p *Pipeline[D]) settled(reqID string, rec *idempotency.Record, digest string, now time.Time) *Result {
	switch rec.Match(digest, now) {
	case idempotency.Replay:
		p.cfg.Metrics.Idempotency("replayed")
		return &Result{RequestID: reqID, Outcome: OutcomeReplayed, Output: rec.Result, AuditID: rec.AuditID, Replayed: true}
	case idempotency.Unsure:
		p.cfg.Metrics.Idempotency("unknown")
		return &Result{RequestID: reqID, Outcome: OutcomeConflict, AuditID: rec.AuditID,
			Err: Errorf(UnknownOutcome, "%s", unknownMessage(rec.AuditID, rec))}
	case idempotency.Wait:
		return p.inUse(reqID)
	case idempotency.Refail:
		p.cfg.Metrics.Idempotency("failed")
		return &Result{RequestID: reqID, Outcome: OutcomeConflict, Err: Errorf(KeyFailed,
			"This idempotency key was spent on an identical call that failed with %s; do what that error said and send the call with a new key.", rec.Code)}
	default:
		p.cfg.Metrics.Idempotency("reused")
		return &Result{RequestID: reqID, Outcome: OutcomeConflict, Err: Errorf(KeyReused,
			"This idempotency key was already used for a different request; send this request with a new key.")}
	}
}

// fail is the failure path of stage 8: the handler's changes are rolled
// back; a failure receipt and exactly one audit event are committed instead.
// A failure of the store itself (UNAVAILABLE) records nothing: the key
// stays unused, and the same call with the same key is its retry. The key
// is looked up again first: a commit reported as failed may still have
// reached the store (bbolt can fail fdatasync after writing the commit's
// pages), and then the call is answered from its record. If even the
// receipt cannot be saved, the client gets the fixed INTERNAL error and
// the key stays unused; if another process claimed the key meanwhile, the
// call is answered IDEMPOTENCY_KEY_IN_USE and the other call's record will
// answer its retry.
func (p *Pipeline[D]) fail(ctx context.Context, ev *auditlog.Event, op *Op[D], start, deadline time.Time, cause error) *Result {
	e := handlerError(cause)
	if e.Code == Unavailable {
		// The store failed the write, not the call: its transaction was
		// rolled back whole, or its commit's outcome is unknown and the
		// key decides it. No receipt spends the key on the store's fault:
		// the same call with the same key is the retry, and replays the
		// write if it was committed after all. As far as this call knows,
		// its event was lost with its transaction: the append counts as
		// failed. Every UNAVAILABLE is made by Errorf or Wrap, which give
		// it the catalogue's retry same_key, so e is answered as it is.
		p.cfg.Metrics.AuditAppend(false)
		return &Result{RequestID: ev.RequestID, Outcome: OutcomeError, Err: e}
	}
	var rec *idempotency.Record
	// The write ran: its receipt is saved whatever its caller does.
	err := p.update(context.WithoutCancel(ctx), func(tx Tx[D]) (err error) {
		defer recoverInto(&err)
		op.Now = p.now()
		if rec, err = p.claim(tx, ev.Principal, ev.IdempotencyKey, ev.Digest, op.Now, deadline); rec != nil || err != nil {
			return err
		}
		p.finishEvent(ev, op.Now, op.targets, start, e)
		if err := tx.Audit().Append(ev); err != nil {
			return err
		}
		return tx.Keys().Put(p.record(ev, op.Now, idempotency.Failed, nil, e.Code))
	})
	switch {
	case errors.Is(err, errSettled):
		p.log.Warn("a write reported as failed was committed; answered from its record",
			"request_id", ev.RequestID, "cause", cause.Error())
		return p.settled(ev.RequestID, rec, ev.Digest, op.Now)
	case errors.Is(err, idempotency.ErrInUse):
		return p.inUse(ev.RequestID)
	}
	p.cfg.Metrics.AuditAppend(err == nil)
	if err != nil {
		lost := Wrap(Internal, fmt.Errorf("save failure receipt: %w (after: %w)", err, cause), InternalMessage)
		lost.Retry = RetrySameKey
		return &Result{RequestID: ev.RequestID, Outcome: OutcomeError, Err: lost}
	}
	recorded := *e
	recorded.Retry = RetryNewKey // the key is spent on this failure
	return &Result{RequestID: ev.RequestID, Outcome: outcomeOf(e), AuditID: ev.ID, Err: &recorded}
}

func (p *Pipeline[D]) finishEvent(ev *auditlog.Event, now time.Time, targets []auditlog.Target, start time.Time, e *Error) {
	ev.Time = now.UTC()
	ev.Targets = targets
	ev.DurationMS = msSince(start)
	ev.Outcome = auditlog.OK
	if e != nil {
		ev.Outcome, ev.Code, ev.Status = auditlog.Failed, string(e.Code), e.Status()
	}
}

func (p *Pipeline[D]) record(ev *auditlog.Event, now time.Time, state idempotency.State, out []byte, code Code) *idempotency.Record {
	return &idempotency.Record{
		Principal: ev.Principal, Key: ev.IdempotencyKey, Tool: ev.Tool, Digest: ev.Digest,
		State: state, Result: out, Code: string(code), AuditID: ev.ID,
		CreatedAt: now, ExpiresAt: now.Add(p.cfg.KeyTTL),
	}
}

// dispatch is stage 7 and the check of stage 9: it runs the handler,
// encodes its result and checks it against the output schema, turning a
// panic in any of them into an error.
func (p *Pipeline[D]) dispatch(ctx context.Context, t *Tool[D], op *Op[D], in any) ([]byte, error) {
	return callSafely(func() ([]byte, error) {
		out, err := t.run(ctx, op, in)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("encode result: %w", err)
		}
		if err := t.checkResult(b); err != nil {
			return nil, fmt.Errorf("tool %s: result breaks its output schema: %w", t.Name, err)
		}
		return b, nil
	})
}

// callSafely turns a panic in fn into an error carrying the panic value and
// stack, for the logs.
func callSafely[T any](fn func() (T, error)) (v T, err error) {
	defer recoverInto(&err)
	return fn()
}

// recoverInto, deferred, turns a panic into *err.
func recoverInto(err *error) {
	if r := recover(); r != nil {
		*err = PanicError(r)
	}
}

// PanicError is the one error a recovered panic becomes, here and in the
// backends' group commit: the panic's value and the stack, for the logs.
func PanicError(r any) error {
	return fmt.Errorf("panic: %v\n%s", r, debug.Stack())
}

// handlerError is what a client may see of an error from a handler or the
// store: a domain refusal or UNAVAILABLE as it is, anything else INTERNAL.
func handlerError(err error) *Error {
	e := Public(err)
	if catalogue[e.Code].domain || e.Code == Unavailable || e.Code == Internal {
		return e
	}
	// A handler may not answer with the pipeline's own codes.
	return Wrap(Internal, fmt.Errorf("handler returned %s: %w", e.Code, err), InternalMessage)
}

func outcomeOf(e *Error) Outcome {
	if catalogue[e.Code].domain {
		return OutcomeRefused
	}
	return OutcomeError
}
