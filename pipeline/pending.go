package pipeline

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/idempotency"
)

// The three steps of a write outside the store (docs/DESIGN.md section
// 5b): the pending record, committed before anything is sent; the call,
// outside any transaction, the record's lease renewed while it runs; and
// the completion, one transaction fenced by the record's owner and
// attempt, which settles the record and appends the write's one event.
//
// Only the owner of a pending record completes, renews or deletes it
// (Powertools #5675): every such transaction claims the key and checks
// the fence first, and one whose fence was lost writes nothing. Nothing
// expires a pending record (Powertools #8049): a record whose owner died
// or stalled past its lease is taken over (Takeover), fenced by its
// attempt, and re-driven under the same upstream key only where the tool
// allows; otherwise its outcome is recorded as unknown. writerd never
// guesses an outcome.

// Defaults of the pending record's lease and its re-drives.
const (
	DefaultLease = 60 * time.Second
	// DefaultSends bounds the sendings of one attempt of a tool that may
	// be re-driven; DefaultAttempts bounds the attempts (takeovers) of
	// one write. When either runs out, the outcome is unknown.
	DefaultSends    = 3
	DefaultAttempts = 5
)

// The failpoints of a write outside the store (Config.Failpoint).
const (
	FailpointPending    = "pending-committed" // its pending record committed, nothing sent
	FailpointAnswered   = "answered"          // the upstream answered, the completion not begun
	FailpointCompleting = "completing"        // inside the completion's transaction, before its commit
)

// hit calls the failpoint name, if any.
func (p *Pipeline[D]) hit(name string) {
	if p.cfg.Failpoint != nil {
		p.cfg.Failpoint(name)
	}
}

// errFenced rolls back a transaction of a pending record whose fence (its
// owner and attempt) was lost to a takeover: it writes nothing.
var errFenced = errors.New("pipeline: pending record taken over")

// UpstreamKey is the key a write outside the store sends upstream: an
// HMAC-SHA-256 under the store's secret over the log's origin, the
// principal, the key and the pending record's creation time, as 43
// characters of base64url. It is the same on every replica and after a
// restart, differs for two principals and for a key used again after its
// TTL, and reveals neither.
func UpstreamKey(secret []byte, origin, principal, key string, created time.Time) string {
	m := hmac.New(sha256.New, secret)
	for _, part := range []string{"writerd-upstream-key-v1", origin, principal, key} {
		m.Write([]byte(part))
		m.Write([]byte{0})
	}
	m.Write(strconv.AppendInt(nil, created.UnixNano(), 10))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// origin is Config.Origin's answer, or "".
func (p *Pipeline[D]) origin() string {
	if p.cfg.Origin == nil {
		return ""
	}
	return p.cfg.Origin()
}

// writeExternal runs a write tool whose effect is outside the store.
func (p *Pipeline[D]) writeExternal(ctx context.Context, c Caller, t *Tool[D], in *externalInput, digest string, start time.Time) *Result {
	reqID := RequestID(ctx)
	if e := t.external.check(in.args); e != nil {
		return &Result{RequestID: reqID, Outcome: OutcomeRejected, Err: e}
	}
	if err := p.refused(); err != nil {
		return &Result{RequestID: reqID, Outcome: OutcomeError, Err: err}
	}
	deadline := time.Now().Add(p.cfg.KeyWait)
	release, err := p.locks.Acquire(ctx, c.Principal, in.Key, p.cfg.KeyWait)
	if err != nil {
		if errors.Is(err, idempotency.ErrInUse) {
			return p.inUse(reqID)
		}
		return &Result{RequestID: reqID, Outcome: OutcomeError, Err: Cancelled(err)}
	}
	defer release()
	// A slot of the upstream before anything is recorded: a call that
	// finds none has spent nothing.
	free, err := t.external.ext.Slot(ctx, time.Until(deadline))
	if err != nil {
		return &Result{RequestID: reqID, Outcome: OutcomeError, Err: noSlot(err)}
	}
	defer free()

	// (a) The pending record, durable before anything leaves.
	var rec, pend *idempotency.Record
	for {
		err = p.update(ctx, func(tx Tx[D]) (err error) {
			defer recoverInto(&err)
			now := p.now()
			if rec, err = p.claim(tx, c.Principal, in.Key, digest, now, deadline); rec != nil || err != nil {
				return err
			}
			secret, err := tx.Keys().Secret()
			if err != nil {
				return err
			}
			if len(secret) == 0 {
				return errors.New("pipeline: the store has no upstream key secret")
			}
			pend = &idempotency.Record{
				Principal: c.Principal, Key: in.Key, Tool: t.Name, Digest: digest,
				State: idempotency.Pending, Owner: p.owner, Attempt: 1,
				LeaseUntil:  now.Add(p.cfg.Lease),
				UpstreamKey: UpstreamKey(secret, p.origin(), c.Principal, in.Key, now),
				Args:        in.args, CreatedAt: now, ExpiresAt: idempotency.Never,
			}
			return tx.Keys().Put(pend)
		})
		// A pending record of another process: wait for it to settle,
		// within the key's wait.
		if errors.Is(err, errSettled) && rec.Match(digest, p.now()) == idempotency.Wait {
			if time.Now().Before(deadline) && p.pause(ctx, deadline) {
				continue
			}
			return p.inUse(reqID)
		}
		break
	}
	switch {
	case errors.Is(err, errSettled):
		return p.settled(reqID, rec, digest, p.now())
	case errors.Is(err, idempotency.ErrInUse):
		return p.inUse(reqID)
	case errors.Is(err, ErrCancelled):
		return &Result{RequestID: reqID, Outcome: OutcomeError, Err: Public(err)}
	case err != nil:
		// Nothing was sent. A commit whose outcome is unknown may have
		// left the record: take it back, so that a retry need not wait
		// for a takeover; if that fails too, the takeover finds it.
		if pend != nil {
			p.release(context.WithoutCancel(ctx), pend)
		}
		e := Public(err)
		if e.Code != Unavailable {
			e = Wrap(Internal, fmt.Errorf("commit pending record: %w", err), InternalMessage)
			e.Retry = RetrySameKey
		}
		return &Result{RequestID: reqID, Outcome: OutcomeError, Err: e}
	}
	p.cfg.Metrics.Idempotency("new")
	p.hit(FailpointPending)
	ev := &auditlog.Event{
		RequestID: reqID, Principal: c.Principal, Transport: c.Transport,
		Tool: t.Name, IdempotencyKey: in.Key, Digest: digest,
	}
	// (b) and (c): the call, which the caller's going away does not end,
	// and its completion.
	return p.drive(context.WithoutCancel(ctx), t, pend, ev, start, false)
}

// pause waits a little for a pending record of another process, at most
// until deadline; false if ctx ended.
func (p *Pipeline[D]) pause(ctx context.Context, deadline time.Time) bool {
	return p.wait(ctx, max(min(50*time.Millisecond, time.Until(deadline)), 0))
}

// drive sends the call of the pending record rec, which this process
// owns, and completes it. uncertain says an earlier attempt may have
// reached the upstream (a takeover): then no answer proves it was never
// sent, and the record is never deleted.
func (p *Pipeline[D]) drive(ctx context.Context, t *Tool[D], rec *idempotency.Record, ev *auditlog.Event, start time.Time, uncertain bool) *Result {
	x := t.external
	var ans *ExternalAnswer
	sends := 0
	for {
		sends++
		ans = p.send(ctx, x, rec, &ExternalCall{
			Args: rec.Args, UpstreamKey: rec.UpstreamKey, Principal: rec.Principal,
			Attempt: rec.Attempt, Send: sends,
		})
		if ans.Cause != nil {
			p.log.Debug("upstream call", "request_id", ev.RequestID, "tool", t.Name,
				"attempt", rec.Attempt, "send", sends, "end", ans.End, "cause", ans.Cause.Error())
		}
		if ans.Disposition == Done {
			if err := t.checkResult(ans.Output); err != nil {
				// The rule and place it broke may quote the answer's
				// member names, the upstream's text: debug only.
				p.log.Warn("an upstream's answer breaks its tool's output schema; its outcome is unknown",
					"request_id", ev.RequestID, "tool", t.Name)
				p.log.Debug("upstream answer refused", "request_id", ev.RequestID, "tool", t.Name, "cause", err.Error())
				ans = &ExternalAnswer{Disposition: Uncertain, End: "bad_answer", AnswerDigest: ans.AnswerDigest, Duration: ans.Duration}
				break // the upstream acted: never sent again
			}
		}
		if ans.Disposition == InFlight && !x.redrive {
			ans = &ExternalAnswer{Disposition: Uncertain, End: ans.End, Duration: ans.Duration, Cause: ans.Cause, Status: ans.Status}
		}
		if ans.Disposition == NotSent && uncertain {
			ans = &ExternalAnswer{Disposition: Uncertain, End: ans.End, Duration: ans.Duration, Cause: ans.Cause}
		}
		if ans.Disposition != Uncertain || !x.redrive || sends >= p.cfg.Sends || x.expired(rec, p.now()) {
			break
		}
		uncertain = true
		if !p.wait(ctx, time.Duration(sends)*100*time.Millisecond) {
			break
		}
	}
	if ans.Disposition == NotSent {
		if err := p.release(ctx, rec); err != nil {
			// The record stays pending, and the takeover that finds it
			// cannot know the call never left: it records it unknown.
			p.log.Error("delete a pending record whose call was never sent", "request_id", ev.RequestID, "cause", err.Error())
		}
		msg := notSentMessage
		if ans.Credential {
			msg = credentialMessage
		}
		return &Result{RequestID: ev.RequestID, Outcome: OutcomeError, Err: Wrap(Unavailable, ans.Cause, msg)}
	}
	if ans.Disposition == InFlight {
		// The key's first request still runs upstream: the record stays
		// pending, and the sweep re-drives it under its key once its
		// lease, moved to the upstream's Retry-After, runs out.
		if err := p.postpone(ctx, rec, ans.RetryAfter); err != nil {
			p.log.Warn("postpone a pending write the upstream still runs", "request_id", ev.RequestID, "cause", err.Error())
		}
		return p.inUse(ev.RequestID)
	}
	p.hit(FailpointAnswered)
	return p.complete(ctx, t, rec, ev, start, ans)
}

// minPostpone is the least wait an in-flight answer moves a lease by.
const minPostpone = time.Second

// postpone moves the lease of rec, a pending record this process owns,
// to after the upstream's Retry-After (at least minPostpone, at most the
// lease), fenced: the takeover sweep then re-drives it.
func (p *Pipeline[D]) postpone(ctx context.Context, rec *idempotency.Record, after time.Duration) error {
	after = min(max(after, minPostpone), p.cfg.Lease)
	return p.fenced(ctx, rec, func(tx Tx[D], cur *idempotency.Record) error {
		later := *cur
		later.LeaseUntil = p.now().Add(after)
		return tx.Keys().Put(&later)
	})
}

// fenced runs fn in a transaction on rec, a pending record this process
// owns, if its fence (owner and attempt) still holds; a record taken over
// is left to its new owner, and that is no error.
func (p *Pipeline[D]) fenced(ctx context.Context, rec *idempotency.Record, fn func(tx Tx[D], cur *idempotency.Record) error) error {
	err := p.update(ctx, func(tx Tx[D]) error {
		cur, err := tx.Keys().Claim(rec.Principal, rec.Key, p.cfg.KeyWait)
		if err != nil {
			return err
		}
		if !cur.Fenced(rec.Owner, rec.Attempt) {
			return errFenced
		}
		return fn(tx, cur)
	})
	if errors.Is(err, errFenced) {
		return nil
	}
	return err
}

// send sends one attempt of rec's call with its lease renewed meanwhile.
// A panic in the External, or no answer, is an uncertain sending: the
// call may have left.
func (p *Pipeline[D]) send(ctx context.Context, x *external, rec *idempotency.Record, call *ExternalCall) (ans *ExternalAnswer) {
	renewing := p.renew(ctx, rec)
	defer renewing()
	defer func() {
		if r := recover(); r != nil {
			ans = &ExternalAnswer{Disposition: Uncertain, End: "error", Cause: PanicError(r)}
		}
	}()
	if ans = x.ext.Send(ctx, call); ans == nil {
		ans = &ExternalAnswer{Disposition: Uncertain, End: "error", Cause: errors.New("pipeline: no answer")}
	}
	return ans
}

// wait sleeps d unless ctx ends first.
func (p *Pipeline[D]) wait(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// renew keeps rec's lease while its call runs: every third of the lease
// it moves LeaseUntil on, fenced. The returned stop ends it.
func (p *Pipeline[D]) renew(ctx context.Context, rec *idempotency.Record) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(p.cfg.Lease / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			err := p.update(ctx, func(tx Tx[D]) error {
				cur, err := tx.Keys().Claim(rec.Principal, rec.Key, 0)
				if err != nil {
					return err
				}
				if !cur.Fenced(rec.Owner, rec.Attempt) {
					return errFenced
				}
				renewed := *cur
				renewed.LeaseUntil = p.now().Add(p.cfg.Lease)
				return tx.Keys().Put(&renewed)
			})
			if errors.Is(err, errFenced) {
				p.log.Warn("a pending write was taken over while its call ran", "tool", rec.Tool, "attempt", rec.Attempt)
				return
			}
			if err != nil && ctx.Err() == nil {
				p.log.Warn("renew a pending write's lease", "tool", rec.Tool, "cause", err.Error())
			}
		}
	}()
	return func() { cancel(); <-done }
}

// release deletes rec, a pending record this process owns whose call was
// never sent: fenced, so that a record taken over is left to its new
// owner.
func (p *Pipeline[D]) release(ctx context.Context, rec *idempotency.Record) error {
	return p.fenced(ctx, rec, func(tx Tx[D], _ *idempotency.Record) error {
		return tx.Keys().Delete(rec.Principal, rec.Key)
	})
}

// complete is step (c): one transaction, fenced by rec's owner and
// attempt, that settles the record as ans says and appends the write's
// one audit event.
func (p *Pipeline[D]) complete(ctx context.Context, t *Tool[D], rec *idempotency.Record, ev *auditlog.Event, start time.Time, ans *ExternalAnswer) *Result {
	var e *Error
	state := idempotency.Completed
	switch ans.Disposition {
	case Refused:
		e, state = Errorf(UpstreamRefused, upstreamRefusedMessage), idempotency.Failed
		if ans.Status > 0 {
			e = Errorf(UpstreamRefused, upstreamStatusMessage, ans.Status)
		}
	case UpstreamKeyReused:
		// Not the upstream's refusal: writerd sent one key for two
		// payloads. The key is spent; the write did not run.
		p.log.Error("an upstream says a key writerd derived was used before with another payload: a fault of the upstream key's derivation; the write failed and did not run",
			"request_id", ev.RequestID, "tool", t.Name, "upstream", t.external.upstream)
		e, state = Errorf(Internal, "%s", InternalMessage), idempotency.Failed
		e.Retry = RetryNewKey
	case Uncertain:
		// The event's code and status; the answer, below, names the event.
		e, state = Errorf(UnknownOutcome, "%s", unknownMessage("", nil)), idempotency.Unknown
	}
	var settled *idempotency.Record
	err := p.update(ctx, func(tx Tx[D]) (err error) {
		defer recoverInto(&err)
		cur, err := tx.Keys().Claim(rec.Principal, rec.Key, p.cfg.KeyWait)
		if err != nil {
			return err
		}
		if !cur.Fenced(rec.Owner, rec.Attempt) {
			return errFenced
		}
		now := p.now()
		p.finishEvent(ev, now, ans.Targets, start, e)
		if state == idempotency.Unknown {
			ev.Outcome = auditlog.Unknown
		}
		ev.Upstream = &auditlog.Upstream{
			Name: t.external.upstream, Tool: t.external.tool, Attempt: rec.Attempt,
			End: ans.End, DurationMS: float64(ans.Duration.Microseconds()) / 1000,
			AnswerDigest: ans.AnswerDigest,
			Method:       t.external.method, Path: t.external.path, HTTPStatus: ans.Status,
		}
		if err := tx.Audit().Append(ev); err != nil {
			return err
		}
		p.hit(FailpointCompleting)
		settled = p.record(ev, now, state, nil, "")
		settled.CreatedAt = rec.CreatedAt
		settled.Owner, settled.Attempt, settled.UpstreamKey = rec.Owner, rec.Attempt, rec.UpstreamKey
		switch state {
		case idempotency.Completed:
			settled.Result = ans.Output
		case idempotency.Failed:
			settled.Code = string(e.Code)
		case idempotency.Unknown:
			settled.Code, settled.ExpiresAt = string(UnknownOutcome), idempotency.Never
		}
		return tx.Keys().Put(settled)
	})
	switch {
	case errors.Is(err, errFenced):
		// Another process took the record over: its completion answers
		// the key.
		return p.inUse(ev.RequestID)
	case err != nil:
		// The call ran and its outcome is not recorded: the record stays
		// pending until a takeover settles it, and the same key is safe
		// to send again (it waits, and never runs twice).
		p.cfg.Metrics.AuditAppend(false)
		p.log.Error("complete a write outside the store", "request_id", ev.RequestID, "cause", err.Error())
		return &Result{RequestID: ev.RequestID, Outcome: OutcomeError,
			Err: Wrap(Unavailable, err, "The call was sent but its outcome could not be recorded yet; ask get_write_outcome, or send the same call again with the same key later.")}
	}
	p.cfg.Metrics.AuditAppend(true)
	switch state {
	case idempotency.Completed:
		return &Result{RequestID: ev.RequestID, Outcome: OutcomeOK, Output: ans.Output, AuditID: ev.ID}
	case idempotency.Failed:
		recorded := *e
		outcome := OutcomeRefused
		if e.Code == Internal {
			outcome = OutcomeError
		}
		return &Result{RequestID: ev.RequestID, Outcome: outcome, AuditID: ev.ID, Err: &recorded}
	default:
		return &Result{RequestID: ev.RequestID, Outcome: OutcomeUnknown, AuditID: ev.ID,
			Err: Errorf(UnknownOutcome, "%s", unknownMessage(ev.ID, nil))}
	}
}

// unknownMessage is the answer of a write whose outcome is unknown, and of
// every retry of its key: it names the write's audit event and, once an
// operator resolved it, the finding.
func unknownMessage(auditID string, rec *idempotency.Record) string {
	msg := "The call may have reached the upstream, and its outcome cannot be known; it will not be sent again. Ask get_write_outcome for its resolution"
	if auditID != "" {
		msg = fmt.Sprintf("The call may have reached the upstream, and its outcome cannot be known (audit event %s); it will not be sent again. Ask get_write_outcome for its resolution", auditID)
	}
	if rec != nil && rec.Resolution != "" {
		finding := "it took effect"
		if rec.Resolution == idempotency.NotApplied {
			finding = "it did not take effect"
		}
		return fmt.Sprintf("The call's outcome was unknown (audit event %s); an operator found that %s (audit event %s). It will not be sent again: send a new call with a new key if one is still needed.", auditID, finding, rec.ResolutionID)
	}
	return msg + ", or send a new call with a new key if the write is still needed once it is known."
}

// Takeover settles the pending records no process is driving: those
// whose lease ran out, or, with all, every one this process does not
// hold (a store only one process opens: its lock proves their owner
// gone). Each is taken over in a transaction fenced by its attempt, then
// re-driven under its upstream key where its tool allows and attempts
// remain, or otherwise recorded as unknown with its one event. It returns
// how many it took over.
func (p *Pipeline[D]) Takeover(ctx context.Context, all bool) (int, error) {
	var due []*idempotency.Record
	now := p.now()
	pending, unknown := 0, 0
	err := p.view(ctx, func(tx Tx[D]) error {
		pending, unknown, due = 0, 0, nil
		return tx.Keys().Unsettled(func(r *idempotency.Record) error {
			if r.State != idempotency.Pending {
				unknown++
				return nil
			}
			pending++
			if all || !now.Before(r.LeaseUntil) {
				due = append(due, r)
			}
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	if p.cfg.Unsettled != nil {
		p.cfg.Unsettled(pending, unknown)
	}
	n := 0
	for _, r := range due {
		if ctx.Err() != nil {
			break
		}
		ok, err := p.takeOver(ctx, r, all)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// takeOver takes one pending record over and settles it. It skips a
// record this process is driving (it holds the key), whose fence moved
// since it was read, or, unless all, whose owner renewed its lease
// meanwhile (the sweep read it before re-driving others).
func (p *Pipeline[D]) takeOver(ctx context.Context, old *idempotency.Record, all bool) (bool, error) {
	release, err := p.locks.Acquire(ctx, old.Principal, old.Key, 0)
	if err != nil {
		return false, nil // this process is driving it
	}
	defer release()
	t := p.tool(old.Tool)
	var x *external
	if t != nil {
		x = t.external
	}
	mine := &idempotency.Record{}
	expired := x != nil && x.redrive && x.expired(old, p.now())
	redrive := x != nil && x.redrive && old.Attempt < p.cfg.Attempts && !expired
	if redrive {
		// A re-drive takes one of the upstream's slots as a call does;
		// with none free the record is left for the next sweep, its
		// attempts unspent.
		free, err := x.ext.Slot(ctx, p.cfg.KeyWait)
		if err != nil {
			return false, nil
		}
		defer free()
	}
	ev := &auditlog.Event{
		RequestID: ulid.Make().String(), Principal: old.Principal, Transport: TransportTakeover,
		Tool: old.Tool, IdempotencyKey: old.Key, Digest: old.Digest,
	}
	err = p.update(ctx, func(tx Tx[D]) (err error) {
		defer recoverInto(&err)
		cur, err := tx.Keys().Claim(old.Principal, old.Key, 0)
		if err != nil {
			return err
		}
		now := p.now()
		if !cur.Fenced(old.Owner, old.Attempt) || !all && now.Before(cur.LeaseUntil) {
			return errFenced
		}
		*mine = *cur
		mine.Owner, mine.Attempt, mine.LeaseUntil = p.owner, cur.Attempt+1, now.Add(p.cfg.Lease)
		if redrive {
			return tx.Keys().Put(mine)
		}
		// Not to be sent again: its outcome is unknown, recorded now with
		// its one event.
		p.finishEvent(ev, now, nil, cur.CreatedAt, Errorf(UnknownOutcome, "%s", unknownMessage("", nil)))
		ev.Outcome = auditlog.Unknown
		ev.DurationMS = float64(now.Sub(cur.CreatedAt).Microseconds()) / 1000
		ev.Upstream = &auditlog.Upstream{Attempt: mine.Attempt, End: EndTakenOver}
		if expired {
			ev.Upstream.End = EndKeyExpired
		}
		if x != nil {
			ev.Upstream.Name, ev.Upstream.Tool = x.upstream, x.tool
			ev.Upstream.Method, ev.Upstream.Path = x.method, x.path
		}
		if err := tx.Audit().Append(ev); err != nil {
			return err
		}
		unknown := p.record(ev, now, idempotency.Unknown, nil, UnknownOutcome)
		unknown.CreatedAt, unknown.ExpiresAt = cur.CreatedAt, idempotency.Never
		unknown.Owner, unknown.Attempt, unknown.UpstreamKey = mine.Owner, mine.Attempt, cur.UpstreamKey
		return tx.Keys().Put(unknown)
	})
	switch {
	case errors.Is(err, errFenced), errors.Is(err, idempotency.ErrInUse):
		return false, nil
	case err != nil:
		return false, err
	}
	p.log.Warn("took over a pending write", "tool", old.Tool, "attempt", mine.Attempt, "redrive", redrive)
	if redrive {
		p.drive(context.WithoutCancel(ctx), t, mine, ev, mine.CreatedAt, true)
	}
	return true, nil
}

// TransportTakeover is the transport of the event a takeover writes: no
// caller is waiting for it.
const TransportTakeover = "takeover"

// EndTakenOver is the upstream.end of a write a takeover recorded as
// unknown without sending it again.
const EndTakenOver = "taken_over"

// EndKeyExpired is the upstream.end of a write a takeover would have
// re-driven, recorded unknown instead: the upstream keeps its key no
// longer (ExternalSpec.RedriveWithin), so a re-drive could run it twice.
const EndKeyExpired = "key_expired"

// expired reports whether a re-drive of rec under its key is past what
// x's upstream keeps a key for.
func (x *external) expired(rec *idempotency.Record, now time.Time) bool {
	return x.within > 0 && !now.Before(rec.CreatedAt.Add(x.within))
}

// RunTakeovers sweeps for pending records no process drives, every
// every, until ctx ends (Takeover). With sole (a store only this process
// opens), its first sweep takes over every pending record at once: the
// store's lock proves their owner gone. Failures are logged, once while
// the store is unavailable.
func (p *Pipeline[D]) RunTakeovers(ctx context.Context, every time.Duration, sole bool) {
	all := sole
	unavailable := false
	for {
		_, err := p.Takeover(ctx, all)
		switch {
		case ctx.Err() != nil:
			return // stopping: the sweep's transaction was cut short
		case err == nil:
			all, unavailable = false, false
		case Public(err).Code == Unavailable:
			if !unavailable {
				p.log.Warn("take over pending writes", "cause", privateCause(err))
			}
			unavailable = true
		default:
			p.log.Error("take over pending writes", "cause", privateCause(err))
		}
		if !p.wait(ctx, every) {
			return
		}
	}
}

// privateCause is what the log says of err: the private cause of an
// *Error, which its Error() keeps to the public sentence.
func privateCause(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Err != nil {
		return e.Err.Error()
	}
	return err.Error()
}
