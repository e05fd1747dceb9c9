package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/writerd/writerd/digest"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/metrics"
)

// Config wires a Pipeline to its storage, whose transactions hand out the
// key store, the audit log and the domain store D.
type Config[D any] struct {
	Storage Storage[D]

	Limits Limits // zero: DefaultLimits
	// KeyTTL is how long an idempotency record holds its key (default 24h).
	KeyTTL time.Duration
	// KeyWait bounds how long a call waits for a concurrent call with the
	// same key before it answers IDEMPOTENCY_KEY_IN_USE (default 5s).
	KeyWait time.Duration
	// CollectEvery is how often Run collects expired records (default 1m).
	CollectEvery time.Duration
	// StoreWait bounds how long each write transaction waits for the
	// store, for its turn and its commit, before its call is answered
	// UNAVAILABLE with retry same_key (default DefaultStoreWait;
	// storewait.go).
	StoreWait time.Duration

	// Refuse, if set, is asked before each write runs (stage 7): an error
	// it returns, UNAVAILABLE with the sentence saying why, answers the
	// write, which then runs nothing and records nothing (its key stays
	// unused, and the same call with the same key is its retry). Replays
	// and reads still answer. The daemon refuses so while its audit log
	// fails its self-check, whose events no checkpoint would cover.
	Refuse func() error

	// Writes outside the store (docs/DESIGN.md section 5b). Origin
	// returns the audit log's origin, which upstream keys are made over
	// (a function: a store may find its log's origin only once it opens;
	// nil is ""). Lease is how
	// long a pending record's owner may go without renewing it before
	// another process may take it over (default DefaultLease); its owner
	// renews it every third of it. Sends bounds the sendings of one
	// attempt of a tool that may be re-driven, Attempts the attempts of
	// one write (defaults DefaultSends, DefaultAttempts).
	Origin   func() string
	Lease    time.Duration
	Sends    int
	Attempts int
	// Failpoint, if set, is called at the named points of a write outside
	// the store (FailpointPending, FailpointAnswered, FailpointCompleting):
	// the test build's crash trials end the process there.
	Failpoint func(name string)
	// Unsettled, if set, is told by each takeover sweep how many writes
	// outside the store are pending and how many unknown and unresolved
	// (for the metrics).
	Unsettled func(pending, unknown int)

	Logger  *slog.Logger     // default: discard
	Metrics *metrics.Metrics // default: nil, which counts nothing
	Now     func() time.Time // default: time.Now
}

// Defaults published in the README.
const (
	DefaultKeyTTL       = 24 * time.Hour
	DefaultKeyWait      = 5 * time.Second
	DefaultCollectEvery = time.Minute
	collectStep         = 1000 // records examined per collection transaction
)

// Service is what a transport needs of a pipeline: the tools to list and
// the one call path. *Pipeline[D] is one, whatever its D.
type Service interface {
	// Call runs a call through every stage; see Pipeline.Call.
	Call(ctx context.Context, c Caller, tool string, args []byte) *Result
	// Tools returns the registered tools agents are offered, sorted by
	// name.
	Tools() []*ToolInfo
	// Tool returns the registered tool of this name, or nil.
	Tool(name string) *ToolInfo
}

// Pipeline runs every call through the stages of docs/DESIGN.md section 1,
// for tools whose handlers work on the domain store D. It is safe for
// concurrent use.
type Pipeline[D any] struct {
	cfg   Config[D]
	log   *slog.Logger
	locks idempotency.Locks

	mu      sync.RWMutex
	tools   map[string]*Tool[D]
	changed map[*int]func() // told after each change of tools (OnToolsChanged)

	clockMu sync.Mutex
	last    time.Time // the latest time now gave

	// owner names this pipeline as the owner of the pending records it
	// makes and takes over.
	owner string

	// claimLookup is the store, if its writes may look their keys up in
	// their claim alone (ClaimLookup), asked at each call: a store opened
	// after the pipeline knows only then.
	claimLookup ClaimLookup
}

var _ Service = (*Pipeline[any])(nil)

// New returns a Pipeline with two tools registered, which every pipeline
// answers alike: the outcome tool (get_write_outcome, outcome.go) and the
// resolution of an unknown outcome (resolve_write_outcome, resolve.go).
func New[D any](cfg Config[D]) *Pipeline[D] {
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits
	}
	if cfg.KeyTTL <= 0 {
		cfg.KeyTTL = DefaultKeyTTL
	}
	if cfg.KeyWait <= 0 {
		cfg.KeyWait = DefaultKeyWait
	}
	if cfg.CollectEvery <= 0 {
		cfg.CollectEvery = DefaultCollectEvery
	}
	if cfg.StoreWait <= 0 {
		cfg.StoreWait = DefaultStoreWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Sends <= 0 {
		cfg.Sends = DefaultSends
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = DefaultAttempts
	}
	p := &Pipeline[D]{cfg: cfg, log: cfg.Logger, tools: make(map[string]*Tool[D]), owner: ulid.Make().String()}
	p.claimLookup, _ = cfg.Storage.(ClaimLookup)
	p.tools[OutcomeToolName] = outcomeTool[D]()
	p.tools[ResolveToolName] = resolveTool[D](p)
	return p
}

// Owner is the name this pipeline writes as the owner of its pending
// records: the process's identity among replicas (Replicas).
func (p *Pipeline[D]) Owner() string { return p.owner }

// Register adds tools, at start or while calls run. A name may be
// registered once (until Unregister removes it); a tool whose name is
// taken adds none of ts.
func (p *Pipeline[D]) Register(ts ...*Tool[D]) error {
	p.mu.Lock()
	seen := make(map[string]bool, len(ts))
	for _, t := range ts {
		if _, dup := p.tools[t.Name]; dup || seen[t.Name] {
			p.mu.Unlock()
			return fmt.Errorf("pipeline: tool %s registered twice", t.Name)
		}
		seen[t.Name] = true
	}
	for _, t := range ts {
		p.tools[t.Name] = t
	}
	p.mu.Unlock()
	if len(ts) > 0 {
		p.toolsChanged()
	}
	return nil
}

// Unregister removes the tools of these names, while calls run: a call
// that found its tool before finishes with it; a later one finds no tool
// of its name (NOT_FOUND here; a transport that lists tools answers it
// as it answers any name it does not know). The tools New registers stay.
func (p *Pipeline[D]) Unregister(names ...string) {
	p.mu.Lock()
	n := 0
	for _, name := range names {
		if _, ok := p.tools[name]; ok && name != OutcomeToolName && name != ResolveToolName {
			delete(p.tools, name)
			n++
		}
	}
	p.mu.Unlock()
	if n > 0 {
		p.toolsChanged()
	}
}

// OnToolsChanged calls fn after each Register or Unregister that changed
// the tools, until the returned stop is called; fn then reads Tools. Calls
// of fn may overlap, and fn must not register tools.
func (p *Pipeline[D]) OnToolsChanged(fn func()) (stop func()) {
	k := new(int)
	p.mu.Lock()
	if p.changed == nil {
		p.changed = map[*int]func(){}
	}
	p.changed[k] = fn
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.changed, k)
		p.mu.Unlock()
	}
}

func (p *Pipeline[D]) toolsChanged() {
	p.mu.RLock()
	fns := make([]func(), 0, len(p.changed))
	for _, fn := range p.changed {
		fns = append(fns, fn)
	}
	p.mu.RUnlock()
	for _, fn := range fns {
		fn()
	}
}

// Tool returns the registered tool of this name, or nil.
func (p *Pipeline[D]) Tool(name string) *ToolInfo {
	if t := p.tool(name); t != nil {
		return t.ToolInfo
	}
	return nil
}

func (p *Pipeline[D]) tool(name string) *Tool[D] {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.tools[name]
}

// Tools returns the registered tools that agents are offered, sorted by
// name: every one but the operator's (resolve_write_outcome, which needs
// the admin scope and is called through the direct API by writerd
// outcome resolve).
func (p *Pipeline[D]) Tools() []*ToolInfo {
	p.mu.RLock()
	defer p.mu.RUnlock()
	ts := make([]*ToolInfo, 0, len(p.tools))
	for _, t := range p.tools {
		if t.need == ScopeAdmin {
			continue
		}
		ts = append(ts, t.ToolInfo)
	}
	sortTools(ts)
	return ts
}

// Call is the one path to a handler. Every transport, and any Go program
// embedding the pipeline, calls it with a tool name and the raw argument
// bytes. It never panics and never returns nil, whatever a tool or a store
// does: a panic outside the recovered write becomes the fixed INTERNAL
// error with retry same_key, since nothing is known to be recorded.
func (p *Pipeline[D]) Call(ctx context.Context, c Caller, tool string, args []byte) (res *Result) {
	start := time.Now()
	if RequestID(ctx) == "" {
		ctx = WithRequestID(ctx, ulid.Make().String())
	}
	var t *Tool[D]
	defer func() {
		if r := recover(); r != nil {
			res = p.reject(ctx, Wrap(Internal, PanicError(r), InternalMessage))
		}
		if res == nil {
			res = p.reject(ctx, Wrap(Internal, errors.New("pipeline: call returned no result"), InternalMessage))
		}
		var info *ToolInfo
		if t != nil {
			info = t.ToolInfo
			if t.ReadOnly {
				res.Err = readRetry(res.Err)
			}
		}
		p.logResult(p.callLog(ctx, c, info), res, start)
		p.count(info, res, start)
	}()

	t, err := p.authorize(c, tool)
	if err != nil {
		return p.reject(ctx, err)
	}
	in, canonical, err := t.parse(args, p.cfg.Limits) // stages 2 and 3
	if err != nil {
		return p.reject(ctx, err)
	}
	if t.external != nil {
		switch in := in.(type) {
		case *readInput:
			in.args = canonical.Request()
			return p.readExternal(ctx, c, t, in)
		case *externalInput:
			in.args = canonical.Request()
		}
	}
	if t.ReadOnly {
		return p.read(ctx, c, t, in)
	}
	d := digest.Request(tool, canonical) // stage 4
	key := in.(keyed).idempotencyKey()
	if p.lookupFirst(t, in) {
		if res := p.lookup(ctx, c, key, d); res != nil { // stage 5
			return res
		}
	}
	if err := p.confirm(ctx, c, t, in); err != nil { // stage 6
		return p.reject(ctx, err)
	}
	if t.external != nil {
		return p.writeExternal(ctx, c, t, in.(*externalInput), d, start)
	}
	// Idempotency, the handler and the audit event, through the one commit
	// path; a failed handler's changes roll back and its receipt and audit
	// event are committed instead.
	return p.write(ctx, c, t, in, d, start)
}

// callLog is the logger of one call. The tool is named only if it is
// registered: an unknown name is the caller's text.
func (p *Pipeline[D]) callLog(ctx context.Context, c Caller, t *ToolInfo) *slog.Logger {
	tool := "unknown"
	if t != nil {
		tool = t.Name
	}
	return p.log.With("request_id", RequestID(ctx), "principal", c.Principal, "tool", tool, "transport", c.Transport)
}

// lookup is stage 5, before confirmation: a key with a live record answers
// from it (the replay, or a conflict) without running anything, so that a
// confirmed delete resent without "confirm" replays instead of previewing.
// It reads in a read transaction; a key with no live record returns nil,
// and the write looks it up again inside its own transaction.
//
// A pending record (a write outside the store whose call is in flight,
// on any process) is waited for, within the key's wait, and then
// answered from, or IDEMPOTENCY_KEY_IN_USE.
func (p *Pipeline[D]) lookup(ctx context.Context, c Caller, key, digest string) *Result {
	deadline := time.Now().Add(p.cfg.KeyWait)
	for {
		var rec *idempotency.Record
		err := p.view(ctx, func(tx Tx[D]) error {
			var err error
			rec, err = tx.Keys().Get(c.Principal, key)
			return err
		})
		if err != nil {
			return p.reject(ctx, err)
		}
		now := p.now()
		switch rec.Match(digest, now) {
		case idempotency.Run:
			return nil
		case idempotency.Wait:
			if time.Now().Before(deadline) && p.pause(ctx, deadline) {
				continue
			}
		}
		return p.settled(RequestID(ctx), rec, digest, now)
	}
}

// lookupFirst reports whether stage 5 reads the key in a read transaction
// of its own before the write, or leaves it to the write's claim
// (ClaimLookup): a call to an upstream waits there for a pending record,
// and a destructive call without "confirm" must be answered from its
// record before stage 6 would preview it.
func (p *Pipeline[D]) lookupFirst(t *Tool[D], in any) bool {
	return p.claimLookup == nil || t.external != nil || t.Destructive && !in.(confirmable).confirmed() ||
		!p.claimLookup.ClaimLookup()
}

// now is the pipeline's clock: Config.Now, never earlier than a time it
// gave before. Writes take their time inside their transaction, so that
// audit times follow the order of commits even if the wall clock steps
// back.
func (p *Pipeline[D]) now() time.Time {
	t := p.cfg.Now()
	p.clockMu.Lock()
	defer p.clockMu.Unlock()
	if t.Before(p.last) {
		t = p.last
	}
	p.last = t
	return t
}

// Allowed reports whether c's scopes allow the tool t (stage 1): what
// tools/list offers a caller.
func Allowed(c Caller, t *ToolInfo) bool {
	need := ScopeWrite
	if t.ReadOnly {
		need = ScopeRead
	}
	if t.need != 0 {
		need = t.need
	}
	return c.Scopes.Has(need) && (t.Scope == "" || c.Holds(t.Scope))
}

// authorize is stage 1. It returns the tool whenever it exists, a denied
// call's too, so that the call counts under its tool.
func (p *Pipeline[D]) authorize(c Caller, name string) (*Tool[D], error) {
	t := p.tool(name)
	if t == nil {
		return nil, Errorf(NotFound, "There is no tool of this name.")
	}
	need := ScopeWrite
	if t.ReadOnly {
		need = ScopeRead
	}
	if t.need != 0 {
		need = t.need
	}
	if need == ScopeAdmin && !c.Scopes.Has(need) {
		return t, Errorf(PermissionDenied, "The caller's scopes do not allow this tool; it needs a token with the admin scope.")
	}
	if !c.Scopes.Has(need) {
		if t.ReadOnly {
			return t, Errorf(PermissionDenied, "The caller's scopes do not allow this tool; it needs a token with the read scope.")
		}
		return t, Errorf(PermissionDenied, "The caller's scopes do not allow this tool; it needs a token with the write scope.")
	}
	if t.Scope != "" && !c.Holds(t.Scope) {
		return t, Errorf(PermissionDenied, "The caller's scopes do not allow this tool; it needs a token with the %s scope as well.", t.Scope)
	}
	return t, nil
}

// readRetry is the retry hint of a read tool's error. A read takes no
// key, so "new_key" (change the call, or its key) reads "never": the same
// call again cannot help; "same_key" reads "send the same call again",
// which can (docs/DESIGN.md section 3).
func readRetry(e *Error) *Error {
	if e == nil || e.Retry != RetryNewKey {
		return e
	}
	c := *e
	c.Retry = RetryNever
	return &c
}

// confirm is stage 6: an unconfirmed destructive call answers with a
// preview of what it would do, read in a read-only transaction; or, if the
// confirmed call would be refused, with that refusal.
func (p *Pipeline[D]) confirm(ctx context.Context, c Caller, t *Tool[D], in any) error {
	if !t.Destructive || in.(confirmable).confirmed() {
		return nil
	}
	op := &Op[D]{Caller: c}
	var preview any
	err := p.view(ctx, func(tx Tx[D]) error {
		op.Store, op.Now = tx.Domain(), p.now()
		var err error
		preview, err = callSafely(func() (any, error) { return t.preview(ctx, op, in) })
		return err
	})
	if err != nil {
		return err
	}
	e := Errorf(ConfirmationRequired, `This call deletes data: send the same call again with "confirm": true and the same idempotency key to carry it out.`)
	e.Preview = preview
	return e
}

// read runs a read tool: no key, no audit event, a read-only transaction.
func (p *Pipeline[D]) read(ctx context.Context, c Caller, t *Tool[D], in any) *Result {
	op := &Op[D]{Caller: c}
	var out []byte
	err := p.view(ctx, func(tx Tx[D]) error {
		op.Store, op.Now = tx.Domain(), p.now()
		op.keys, op.running = tx.Keys(), p.locks.Held
		var err error
		out, err = p.dispatch(ctx, t, op, in)
		return err
	})
	if err != nil {
		e := handlerError(err)
		return &Result{RequestID: RequestID(ctx), Outcome: outcomeOf(e), Err: e}
	}
	return &Result{RequestID: RequestID(ctx), Outcome: OutcomeOK, Output: out}
}

func (p *Pipeline[D]) reject(ctx context.Context, err error) *Result {
	e := Public(err)
	o := OutcomeRejected
	if e.Code == Internal || e.Code == Unavailable {
		o = OutcomeError
	}
	return &Result{RequestID: RequestID(ctx), Outcome: o, Err: e}
}

// logResult writes the one log line of a call, with the private cause of an
// error. Argument values are never logged.
func (p *Pipeline[D]) logResult(log *slog.Logger, res *Result, start time.Time) {
	attrs := []any{"outcome", res.Outcome, "duration_ms", msSince(start)}
	if res.AuditID != "" {
		attrs = append(attrs, "audit_id", res.AuditID)
	}
	if res.Err == nil {
		log.Info("call", attrs...)
		return
	}
	attrs = append(attrs, "code", res.Err.Code)
	if res.Outcome == OutcomeError {
		if res.Err.Err != nil {
			attrs = append(attrs, "cause", res.Err.Err.Error())
		}
		log.Error("call", attrs...)
		return
	}
	log.Info("call", attrs...)
}

// count records a finished call in the metrics. A call for no registered
// tool (t nil) counts as "unknown", so that the tool label stays bounded.
func (p *Pipeline[D]) count(t *ToolInfo, res *Result, start time.Time) {
	tool := "unknown"
	if t != nil {
		tool = t.Name
	}
	p.cfg.Metrics.Call(tool, string(res.Outcome), time.Since(start))
	if res.Err != nil && res.Err.rule != "" {
		p.cfg.Metrics.Rejection(res.Err.rule)
	}
}

func msSince(start time.Time) float64 {
	return float64(time.Since(start).Microseconds()) / 1000
}
