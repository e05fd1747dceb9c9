package witness

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/metrics"
)

// Defaults of the Cosigner's timing.
const (
	DefaultPoll       = 500 * time.Millisecond
	DefaultRetryFirst = 5 * time.Second
	DefaultRetryMost  = time.Minute
)

// Cosigner sends the log's latest checkpoint to its witnesses and keeps
// their cosignatures with it in the store. Set its fields, then call Run;
// Round runs one round, for tests and for the last one at shutdown.
type Cosigner struct {
	Storage   auditlog.Storage
	Key       *auditlog.Key // the log's: a stored checkpoint it does not verify is not sent
	Witnesses []*Witness    // distinct keys
	// Quorum is how many of the Witnesses must cosign each checkpoint; 0
	// means all of them. It only decides what is logged and counted: the
	// checkpoint is stored and served with whatever cosignatures it has.
	Quorum int
	// Lead, if set, says whether this process signs now (the
	// checkpointer's Lead): only the signing replica sends.
	Lead    func(ctx context.Context) bool
	Logger  *slog.Logger
	Metrics *metrics.Witnesses // may be nil
	HTTP    *http.Client       // default: NewClient()
	// Poll is how often the store's latest checkpoint is read (default
	// DefaultPoll); Poke starts a round at once. A witness that fails is
	// retried after RetryFirst, doubling to RetryMost.
	Poll, RetryFirst, RetryMost time.Duration

	once  sync.Once
	poke  chan struct{}
	mu    sync.Mutex // one round at a time; guards what follows
	peers []*peer
	// believed: the peers' sizes were read from the stored checkpoints.
	believed bool
	// The quorum's state, so that a checkpoint without its quorum is
	// counted once and logged once per change, not once per retry.
	lacking bool
	missing string
	counted uint64
	judged  uint64    // the latest size a round judged
	notLead time.Time // Lead said no: not asked again before
	bad     uint64    // the latest size logged as not verifying
	// For Status: whether the last round that asked led, the
	// cosignatures of the latest size judged, and the checkpoints found
	// without their quorum.
	leads   bool
	have    int
	without uint64
	recent  []uint64
	status  atomic.Pointer[Status]
}

// Status is what the cosigner knows of the witnesses, as its last round
// left it: for the audit console, which must not wait for a round that
// waits for a witness.
type Status struct {
	// Leads reports whether this process sends to the witnesses: it led
	// at the last round that asked (always, without Lead). A replica that
	// does not lead knows only what it read of the store before.
	Leads bool
	// Latest is the size of the latest checkpoint a round judged, 0 if
	// none yet; Cosignatures how many of the witnesses cosigned it, of the
	// Quorum it needs; Lacking whether it lacks its quorum.
	Latest       uint64
	Cosignatures int
	Quorum       int
	Lacking      bool
	// WithoutQuorum counts the checkpoints found without their quorum
	// since the process started, each once; Recent holds the sizes of the
	// latest of them (at most RecentWithoutQuorum), newest first.
	WithoutQuorum uint64
	Recent        []uint64
	// Witnesses is each witness, in the order configured.
	Witnesses []WitnessStatus
}

// RecentWithoutQuorum bounds Status.Recent.
const RecentWithoutQuorum = 16

// WitnessStatus is what the cosigner knows of one witness.
type WitnessStatus struct {
	Name        string // its key's name
	VerifierKey string
	// Cosigned is the size of the largest checkpoint it cosigned that the
	// cosigner saw (in the store at its first round, or answered since),
	// 0 if none; At is the time that cosignature carries (the witness's
	// own clock, to the second), zero if none.
	Cosigned uint64
	At       time.Time
	// Failing is the kind of its last failure, as the metrics name a
	// result ("failed", "conflict", "fork 12", …), "" if its last request
	// succeeded or none failed; Retry is when it is asked again then.
	Failing string
	Retry   time.Time
}

// Lag is how many events the latest checkpoint holds that the witness
// has not cosigned.
func (s Status) Lag(w WitnessStatus) uint64 {
	if w.Cosigned >= s.Latest {
		return 0
	}
	return s.Latest - w.Cosigned
}

// Status returns what the last round left; it never waits for one. A nil
// Cosigner (no witnesses) has the zero Status.
func (c *Cosigner) Status() Status {
	if c == nil {
		return Status{}
	}
	c.init()
	if s := c.status.Load(); s != nil {
		return *s
	}
	s := Status{Leads: c.Lead == nil, Quorum: c.Quorum}
	for _, w := range c.Witnesses {
		s.Witnesses = append(s.Witnesses, WitnessStatus{Name: w.Name(), VerifierKey: w.VerifierKey()})
	}
	return s
}

// publish makes the state Status returns; c.mu is held.
func (c *Cosigner) publish() {
	s := &Status{Leads: c.leads, Latest: c.judged, Cosignatures: c.have, Quorum: c.Quorum, Lacking: c.lacking,
		WithoutQuorum: c.without, Recent: append([]uint64(nil), c.recent...)}
	for _, p := range c.peers {
		s.Witnesses = append(s.Witnesses, WitnessStatus{Name: p.w.Name(), VerifierKey: p.w.VerifierKey(),
			Cosigned: p.cosigned, At: p.at, Failing: p.logged, Retry: p.next})
	}
	c.status.Store(s)
}

// peer is what the cosigner believes of a witness, in memory.
type peer struct {
	w     *Witness
	known uint64    // the size it is believed to know
	next  time.Time // no request before
	delay time.Duration
	// logged is what its last failure logged, so that a retry that fails
	// alike logs at debug level only.
	logged string
	// cosigned is the largest size it is known to have cosigned, at the
	// time its cosignature carries (Status).
	cosigned uint64
	at       time.Time
}

func (c *Cosigner) init() {
	c.once.Do(func() {
		c.poke = make(chan struct{}, 1)
		if c.HTTP == nil {
			c.HTTP = NewClient()
		}
		if c.Logger == nil {
			c.Logger = slog.New(slog.DiscardHandler)
		}
		if c.Poll <= 0 {
			c.Poll = DefaultPoll
		}
		if c.RetryFirst <= 0 {
			c.RetryFirst = DefaultRetryFirst
		}
		if c.RetryMost < c.RetryFirst {
			c.RetryMost = max(DefaultRetryMost, c.RetryFirst)
		}
		if c.Quorum <= 0 || c.Quorum > len(c.Witnesses) {
			c.Quorum = len(c.Witnesses)
		}
		c.leads = c.Lead == nil
		for _, w := range c.Witnesses {
			c.peers = append(c.peers, &peer{w: w})
		}
	})
}

// Poke asks for a round at once, as after a checkpoint was signed. It
// never blocks; a nil Cosigner ignores it.
func (c *Cosigner) Poke() {
	if c == nil {
		return
	}
	c.init()
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// Run runs rounds until ctx ends: every Poll, and at once when poked. A
// nil Cosigner returns at once.
func (c *Cosigner) Run(ctx context.Context) {
	if c == nil {
		return
	}
	c.init()
	tick := time.NewTicker(c.Poll)
	defer tick.Stop()
	for {
		c.Round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-c.poke:
		}
	}
}

// Round sends the latest stored checkpoint to each witness that has not
// cosigned it and whose retry is due, stores the cosignatures it gets,
// and logs and counts whether the checkpoint has its quorum. It does
// nothing unless this process leads; it asks (Lead) only when there is
// something to do, a checkpoint it has not judged or a retry due, so that
// a quiet log costs one read a Poll. A nil Cosigner does nothing.
func (c *Cosigner) Round(ctx context.Context) {
	if c == nil {
		return
	}
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.publish()
	var size uint64
	var signed []byte
	err := c.Storage.View(ctx, func(r auditlog.Reader) error {
		var err error
		size, signed, err = r.LatestCheckpoint()
		return err
	})
	switch {
	case errors.Is(err, auditlog.ErrNotFound):
		return
	case err != nil:
		if ctx.Err() == nil {
			c.Logger.Error("read the latest audit checkpoint for the witnesses", "cause", err.Error())
		}
		return
	}
	have := Cosigners(signed, c.Witnesses)
	now := time.Now()
	due := false
	for i, p := range c.peers {
		due = due || (!have[i] && !now.Before(p.next))
	}
	if size == c.judged && !due {
		return
	}
	if c.Lead != nil {
		// Asked at most once a second, as the checkpointer asks: where the
		// store elects the signer, asking costs a round trip.
		if now.Before(c.notLead) {
			return
		}
		if !c.Lead(ctx) {
			c.notLead = now.Add(time.Second)
			c.leads = false
			return
		}
		c.leads = true
	}
	cp, err := auditlog.OpenCheckpoint(signed, c.Key.Verifier)
	if err != nil || cp.Size != size {
		if c.bad != size {
			c.bad = size
			c.Logger.Error("the latest audit checkpoint does not verify with the log's key; it is not sent to the witnesses", "size", size, "advice", "run writerd audit verify")
		}
		return
	}
	if !c.believed {
		if err := c.believe(ctx); err != nil {
			if ctx.Err() == nil {
				c.Logger.Error("read the audit checkpoints the witnesses cosigned", "cause", err.Error())
			}
			return
		}
		c.believed = true
	}
	text, _, _ := split(signed)
	got := make([][]byte, len(c.peers))
	var wg sync.WaitGroup
	for i, p := range c.peers {
		if have[i] || now.Before(p.next) {
			continue
		}
		wg.Go(func() { got[i] = c.send(ctx, p, cp, signed) })
	}
	wg.Wait()
	var added []byte
	for _, lines := range got {
		added = append(added, lines...)
	}
	if len(added) > 0 {
		if err := c.store(ctx, size, text, added); err != nil {
			// Asked for again next round: a witness cosigns the tree it
			// knows again.
			c.Logger.Error("store the witnesses' cosignatures of an audit checkpoint", "size", size, "cause", err.Error())
		} else {
			for i := range got {
				have[i] = have[i] || got[i] != nil
			}
		}
	}
	if ctx.Err() == nil {
		c.judge(size, have)
	}
}

// believe sets each witness's believed size to the largest among the
// stored checkpoints it cosigned, else 0 (a 409 corrects either).
func (c *Cosigner) believe(ctx context.Context) error {
	var cps [][]byte
	if err := c.Storage.View(ctx, func(r auditlog.Reader) error {
		var err error
		cps, err = r.Checkpoints()
		return err
	}); err != nil {
		return err
	}
	left := len(c.peers)
	found := make([]bool, len(c.peers))
	for i := len(cps) - 1; i >= 0 && left > 0; i-- { // largest first
		cp, err := auditlog.ParseSigned(cps[i])
		if err != nil {
			continue
		}
		for j, ok := range Cosigners(cps[i], c.Witnesses) {
			if ok && !found[j] {
				found[j] = true
				c.peers[j].known = cp.Size
				c.peers[j].cosigned, c.peers[j].at = cp.Size, cosignedAt(cps[i], c.peers[j].w)
				left--
			}
		}
	}
	for _, p := range c.peers {
		c.Metrics.Known(p.w.Name(), p.known)
	}
	return nil
}

// send sends the checkpoint to one witness from the size it is believed
// to know, and once more from the size a 409 says it knows; it returns the
// cosignature lines, or nil after logging the failure.
func (c *Cosigner) send(ctx context.Context, p *peer, cp auditlog.Checkpoint, signed []byte) []byte {
	old := p.known
	for attempt := 0; ; attempt++ {
		if old > cp.Size {
			c.failed(p, cp, old, fmt.Errorf("witness %s knows the log at size %d, larger than its latest checkpoint's %d: the log was rolled back (a backup restored?) or another log signs with its key", p.w.Name(), old, cp.Size))
			return nil
		}
		proof, err := c.proof(ctx, old, cp.Size)
		if err != nil {
			if ctx.Err() == nil {
				c.failed(p, cp, old, fmt.Errorf("prove the log's tree at %d extends the tree at %d: %w", cp.Size, old, err))
			}
			return nil
		}
		lines, err := p.w.AddCheckpoint(ctx, c.HTTP, old, proof, signed)
		if err == nil {
			c.Metrics.Request(p.w.Name(), metrics.WitnessCosigned)
			c.cosigned(p, cp.Size, lines)
			return lines
		}
		if ctx.Err() != nil {
			return nil // shutting down: not the witness's failure
		}
		var e *Error
		if !errors.As(err, &e) {
			e = &Error{Witness: p.w.Name(), Kind: Failed, Err: err}
		}
		c.Metrics.Request(p.w.Name(), e.Kind.Result())
		if e.Kind == Conflict {
			p.known = e.Known
			c.Metrics.Known(p.w.Name(), p.known)
			if attempt == 0 {
				old = e.Known
				continue
			}
		}
		c.failed(p, cp, old, e)
		return nil
	}
}

// proof is the consistency proof from old to size; none from 0 (every
// tree extends the empty one) or from size itself.
func (c *Cosigner) proof(ctx context.Context, old, size uint64) (tlog.TreeProof, error) {
	if old == 0 || old == size {
		return nil, nil
	}
	var proof tlog.TreeProof
	err := c.Storage.View(ctx, func(r auditlog.Reader) error {
		var err error
		proof, err = auditlog.ConsistencyProof(r, old, size)
		return err
	})
	return proof, err
}

// cosigned notes a witness's success, its cosignature lines: it knows
// size now, and is due again at once.
func (c *Cosigner) cosigned(p *peer, size uint64, lines []byte) {
	if p.logged != "" {
		c.Logger.Info("a witness cosigns the audit log again", "witness", p.w.Name(), "size", size)
	}
	p.known, p.delay, p.next, p.logged = size, 0, time.Time{}, ""
	p.cosigned, p.at = size, cosignedAt(lines, p.w)
	c.Metrics.Known(p.w.Name(), size)
}

// cosignedAt returns the time of w's cosignature among the signature
// lines of b (a note, or the lines a witness answered), zero if it has
// none: a cosignature/v1 signature is the key's hash (4 bytes), the time
// in seconds since 1970 (8 bytes, big-endian), then the Ed25519
// signature (c2sp.org/tlog-cosignature). It reads the time only; the
// cosignature was verified before it was kept.
func cosignedAt(b []byte, w *Witness) time.Time {
	for _, l := range strings.SplitAfter(string(b), "\n") {
		name, hash, ok := lineKey(l)
		if !ok || name != w.Name() || hash != w.Verifier.KeyHash() {
			continue
		}
		_, b64, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(l, sigPrefix), "\n"), " ")
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(sig) < 12 {
			continue
		}
		return time.Unix(int64(binary.BigEndian.Uint64(sig[4:12])), 0).UTC()
	}
	return time.Time{}
}

// failed logs a witness's failure, the first of its kind at warn or error
// level and its repetitions at debug level, and sets its retry, backing
// off.
func (c *Cosigner) failed(p *peer, cp auditlog.Checkpoint, old uint64, err error) {
	p.delay = min(max(2*p.delay, c.RetryFirst), c.RetryMost)
	p.next = time.Now().Add(p.delay)
	level, msg, kind := slog.LevelWarn, "a witness did not cosign the audit checkpoint; retrying", "failed"
	var e *Error
	args := []any{"witness", p.w.Name(), "size", cp.Size, "from", old}
	if errors.As(err, &e) {
		kind = e.Kind.Result()
		if e.Detail != "" {
			args = append(args, "witness_said", e.Detail)
		}
		switch e.Kind {
		case Fork:
			// Once per checkpoint: the operator must not miss it.
			kind = fmt.Sprintf("fork %d", cp.Size)
			level, msg = slog.LevelError, "FORK: a witness refuses the audit log's checkpoint: it cosigned another tree under this log's origin, or this log was rewritten; do not trust this log until that is explained"
			args = append(args, "advice", "compare the witness's tree (witnessctl list-logs) with writerd audit verify's")
		case UnknownKey, UnknownLog:
			level, msg = slog.LevelError, "a witness does not know this audit log; on the witness, add it"
			args = append(args, "advice", "witnessctl add-log -db DB -origin "+cp.Origin+" && witnessctl add-key -db DB -origin "+cp.Origin+" -key "+c.Key.VerifierKey)
		}
	} else {
		level, msg, kind = slog.LevelError, "a witness knows a larger tree than the audit log's latest checkpoint; retrying", "behind"
	}
	if p.logged == kind {
		level = slog.LevelDebug
	}
	p.logged = kind
	args = append(args, "cause", err.Error(), "retry_in", p.delay.String())
	c.Logger.Log(context.Background(), level, msg, args...)
}

// store merges the cosignature lines into the stored checkpoint of size,
// whose text must still be text: the one they sign.
func (c *Cosigner) store(ctx context.Context, size uint64, text string, added []byte) error {
	return c.Storage.Update(ctx, func(w auditlog.Writer) error {
		s, signed, err := w.LatestCheckpoint()
		if err != nil {
			return err
		}
		if s != size { // signed after the round began: find ours
			cps, err := w.Checkpoints()
			if err != nil {
				return err
			}
			signed = nil
			for _, cp := range cps {
				if p, err := auditlog.ParseSigned(cp); err == nil && p.Size == size {
					signed = cp
				}
			}
			if signed == nil {
				return fmt.Errorf("witness: the checkpoint of size %d is no longer stored", size)
			}
		}
		if t, _, ok := split(signed); !ok || t != text {
			return fmt.Errorf("witness: the stored checkpoint of size %d is not the one the witnesses cosigned", size)
		}
		merged, _ := Merge(signed, added)
		if string(merged) == string(signed) {
			return nil
		}
		return w.PutCheckpoint(size, merged)
	})
}

// judge sets the metrics of the latest checkpoint, counts it once if it
// lacks its quorum, and logs when that starts, changes or ends.
func (c *Cosigner) judge(size uint64, have []bool) {
	n := 0
	var missing []string
	for i, ok := range have {
		if ok {
			n++
		} else {
			missing = append(missing, c.peers[i].w.Name())
		}
	}
	lacking := n < c.Quorum
	c.judged, c.have = size, n
	c.Metrics.Latest(n, lacking)
	if !lacking {
		if c.lacking {
			c.Logger.Info("the audit log's latest checkpoint has its witness quorum again", "size", size, "cosignatures", n, "quorum", c.Quorum)
		}
		c.lacking, c.missing = false, ""
		return
	}
	if c.counted != size {
		c.counted = size
		c.Metrics.WithoutQuorum()
		c.without++
		c.recent = append([]uint64{size}, c.recent[:min(len(c.recent), RecentWithoutQuorum-1)]...)
	}
	m := strings.Join(missing, ", ")
	if !c.lacking || m != c.missing {
		c.Logger.Warn("an audit checkpoint lacks its witness quorum; it is retried, and writes and checkpoints go on", "size", size, "cosignatures", n, "quorum", c.Quorum, "missing", m)
	}
	c.lacking, c.missing = true, m
}
