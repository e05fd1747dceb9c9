package upstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/metrics"
	"github.com/writerd/writerd/pipeline"
)

// The tools that export an upstream's: each a pipeline tool whose effect
// is the upstream's (pipeline.DefineExternal), its input schema the
// upstream's as the operator bounded it, its definition pinned.

// Caller sends one call to an upstream: a *Client.
type Caller interface {
	Call(ctx context.Context, tool string, args json.RawMessage, meta map[string]any) *Answer
}

// MetaPrincipal is the _meta member that carries the caller's principal
// to an upstream whose block sets send_principal.
const MetaPrincipal = "writerd/principal"

// Slots are an upstream's call slots (max_concurrent), shared by its
// tools: a call waits for one before anything of it is recorded.
type Slots chan struct{}

// NewSlots returns n slots.
func NewSlots(n int) Slots { return make(Slots, max(n, 1)) }

// Take waits at most wait for a slot and returns its release;
// pipeline.ErrNoSlot after the wait, ctx's error if ctx ends first.
func (s Slots) Take(ctx context.Context, wait time.Duration) (func(), error) {
	select {
	case s <- struct{}{}:
		return func() { <-s }, nil
	default:
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case s <- struct{}{}:
		return func() { <-s }, nil
	case <-timer.C:
		return nil, pipeline.ErrNoSlot
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// DefineOptions are what Define needs beside the config and the listing.
type DefineOptions struct {
	Caller  Caller
	Slots   Slots
	Metrics *metrics.Upstreams // nil counts nothing
	// TaskSupport is the tool's execution.taskSupport in the listing.
	TaskSupport string
	// Exports, if set, keeps the tool, so that a later listing that
	// changes its definition withdraws it.
	Exports *Exports
}

// Exports are the exported tools of the upstreams, by upstream and tool:
// a later listing (a reconnection, notifications/tools/list_changed)
// whose definition of one no longer matches its pin withdraws it, with
// one log line; its calls are then refused before anything is recorded
// and nothing is sent. A listing that matches again restores it. (The
// daemon also unregisters such a tool, so that agents no longer see it,
// and defines it anew when it matches again: internal/daemon/upstreams.go;
// the refusal here covers the calls that found it before.)
type Exports struct {
	log *slog.Logger
	mu  sync.Mutex
	by  map[string]map[string]*exported // upstream, then its tool
}

// NewExports returns an empty set that logs to log.
func NewExports(log *slog.Logger) *Exports {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Exports{log: log, by: map[string]map[string]*exported{}}
}

func (e *Exports) add(x *exported) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.by[x.u.Name] == nil {
		e.by[x.u.Name] = map[string]*exported{}
	}
	e.by[x.u.Name][x.t.Name] = x
}

// Listed checks a new listing of an upstream's tools against the pins of
// its exported tools, withdrawing those that changed or are gone and
// restoring those that match again.
func (e *Exports) Listed(upstream string, defs []*mcp.Tool) {
	byName := make(map[string]*mcp.Tool, len(defs))
	for _, d := range defs {
		byName[d.Name] = d
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for name, x := range e.by[upstream] {
		d := byName[name]
		ok := d != nil && Pin(d) == x.t.Pin
		if was := !x.withdrawn.Swap(!ok); was != ok {
			if ok {
				e.log.Info("an upstream's tool matches its pin again and is served", "upstream", upstream, "tool", name, "export", x.t.Export)
			} else {
				e.log.Error("an upstream's tool changed its definition or is gone; it is withdrawn and never called until its pin is reviewed", "upstream", upstream, "tool", name, "export", x.t.Export)
			}
		}
	}
}

// Define builds the pipeline tool that exports tool t of upstream u from
// def, the definition the upstream listed. It refuses, with an error for
// the operator's log naming the upstream and the tool: a definition
// whose pin is not t's (a changed definition is never called), a tool
// declared read whose annotations say it writes (unless the block says
// read_despite_annotations), one that requires tasks, and a schema that
// writerd's checker cannot enforce (a keyword it does not, a $ref it
// cannot resolve, a string, array or object left unbounded).
func Define[D any](u *Upstream, t *Tool, def *mcp.Tool, o DefineOptions) (*pipeline.Tool[D], error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("upstream %s, tool %s: %s", u.Name, t.Name, fmt.Sprintf(format, args...))
	}
	if def == nil || def.Name != t.Name {
		return nil, fail("the upstream does not list it")
	}
	if got := Pin(def); got != t.Pin {
		return nil, fail("its definition changed: its pin is %s, the config's %s; review the change (writerd upstream inspect) and set the new pin", got, t.Pin)
	}
	if o.TaskSupport == "required" {
		return nil, fail("it requires tasks (execution.taskSupport), which writerd does not call")
	}
	if t.Kind == KindRead && !t.ReadDespiteAnnotations && (def.Annotations == nil || !def.Annotations.ReadOnlyHint) {
		return nil, fail("it is declared read but its annotations do not say it only reads; set read_despite_annotations = true if it does")
	}
	in, err := inputSchema(u, t, def)
	if err != nil {
		return nil, fail("input schema: %v", err)
	}
	out, structured, err := outputSchema(u, def)
	if err != nil {
		return nil, fail("output schema: %v", err)
	}
	x := &exported{u: u, t: t, c: o.Caller, slots: o.Slots, metrics: o.Metrics, structured: structured}
	if o.Exports != nil {
		o.Exports.add(x)
	}
	spec := pipeline.ExternalSpec{
		Name: t.Export, Title: def.Title, Description: def.Description,
		ReadOnly: t.Kind == KindRead, Destructive: t.Kind == KindDestructive,
		InputSchema: in, OutputSchema: out, Scope: u.Scope,
		Redrive:  t.Kind != KindRead && (u.Keys != KeysNone || t.Idempotent),
		Upstream: u.Name, UpstreamTool: t.Name, External: x,
	}
	if spec.Destructive {
		spec.Preview = func(args json.RawMessage) any {
			return map[string]any{"upstream": u.Name, "tool": t.Name, "arguments": args}
		}
	}
	tool, err := pipeline.DefineExternal[D](spec)
	if err != nil {
		return nil, fail("%v", err)
	}
	return tool, nil
}

// inputSchema is def's input schema with the config's bounds set and the
// argument that carries the upstream key taken out (writerd fills it).
func inputSchema(u *Upstream, t *Tool, def *mcp.Tool) (json.RawMessage, error) {
	raw, err := json.Marshal(def.InputSchema)
	if err != nil {
		return nil, err
	}
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil || s == nil {
		return nil, errors.New("not a JSON object")
	}
	for _, b := range t.Bounds {
		node, err := schemaAt(s, b.Pointer)
		if err != nil {
			return nil, fmt.Errorf("bound at %s: %v", b.Pointer, err)
		}
		node[b.Keyword] = b.Max
	}
	if u.Keys == KeysArgument {
		if props, ok := s["properties"].(map[string]any); ok {
			delete(props, u.KeyName)
		}
		if req, ok := s["required"].([]any); ok {
			kept := req[:0]
			for _, r := range req {
				if r != u.KeyName {
					kept = append(kept, r)
				}
			}
			s["required"] = kept
		}
	}
	return json.Marshal(s)
}

// schemaAt returns the schema object at an RFC 6901 pointer into s.
func schemaAt(s map[string]any, ptr string) (map[string]any, error) {
	tokens, ok := parsePointer(ptr)
	if !ok {
		return nil, errors.New("not a JSON pointer")
	}
	var node any = s
	for _, tok := range tokens {
		switch n := node.(type) {
		case map[string]any:
			node = n[tok]
		case []any:
			i, ok := arrayIndex(tok)
			if !ok || i >= len(n) {
				return nil, errors.New("no such schema")
			}
			node = n[i]
		default:
			return nil, errors.New("no such schema")
		}
	}
	m, ok := node.(map[string]any)
	if !ok {
		return nil, errors.New("no schema object there")
	}
	return m, nil
}

// outputSchema is def's output schema, or, for a tool without one, the
// schema of the text blocks writerd exports its answers as; structured
// says which.
func outputSchema(u *Upstream, def *mcp.Tool) (json.RawMessage, bool, error) {
	if def.OutputSchema != nil {
		raw, err := json.Marshal(def.OutputSchema)
		return raw, true, err
	}
	return json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"content":{"type":"array","maxItems":%d,`+
		`"items":{"type":"object","properties":{"type":{"const":"text"},"text":{"type":"string","maxLength":%d}},"required":["type","text"],"additionalProperties":false}}},`+
		`"required":["content"],"additionalProperties":false}`, maxBlocks, u.Endpoint.MaxResultBytes)), false, nil
}

// maxBlocks bounds the text blocks of an answer without an output schema.
const maxBlocks = 1000

// exported is the pipeline.External of one exported tool.
type exported struct {
	u          *Upstream
	t          *Tool
	c          Caller
	slots      Slots
	metrics    *metrics.Upstreams
	structured bool // the tool has an output schema: its answer is structuredContent
	withdrawn  atomic.Bool
}

// errWithdrawn answers a call of a tool whose definition changed.
var errWithdrawn = pipeline.Errorf(pipeline.Unavailable, "This tool's definition changed at its upstream and writerd does not call it until its operator reviews the change; nothing of this call was recorded or sent.")

func (x *exported) Slot(ctx context.Context, wait time.Duration) (func(), error) {
	if x.withdrawn.Load() {
		return nil, errWithdrawn
	}
	return x.slots.Take(ctx, wait)
}

func (x *exported) Send(ctx context.Context, call *pipeline.ExternalCall) *pipeline.ExternalAnswer {
	if x.withdrawn.Load() { // a re-drive after the definition changed
		return &pipeline.ExternalAnswer{Disposition: pipeline.NotSent, End: string(EndNotSent), Cause: errWithdrawn}
	}
	args := call.Args
	meta := map[string]any{}
	if call.UpstreamKey != "" {
		switch x.u.Keys {
		case KeysArgument:
			args = withMember(args, x.u.KeyName, call.UpstreamKey)
		case KeysMeta:
			meta[x.u.KeyName] = call.UpstreamKey
		}
	}
	if x.u.SendPrincipal {
		meta[MetaPrincipal] = call.Principal
	}
	if len(meta) == 0 {
		meta = nil
	}
	a := x.c.Call(ctx, x.t.Name, args, meta)
	x.metrics.Call(x.u.Name, string(a.End), a.Duration)
	ans := x.answer(a)
	ans.Duration = a.Duration
	return ans
}

// withMember returns the JSON object args with the member name set to a
// string value, first: the upstream key, in the argument that takes it.
func withMember(args json.RawMessage, name, value string) json.RawMessage {
	member, _ := json.Marshal(map[string]string{name: value})
	rest := args[1:] // after '{'
	if len(rest) > 0 && rest[0] != '}' {
		return append(append(member[:len(member)-1:len(member)-1], ','), rest...)
	}
	return member
}

// answer says what a call's end means for its write, from what crossed
// the wire: the upstream's text never leaves it but in Cause (debug).
func (x *exported) answer(a *Answer) *pipeline.ExternalAnswer {
	switch a.End {
	case EndNotSent:
		return &pipeline.ExternalAnswer{Disposition: pipeline.NotSent, End: string(a.End), Cause: a.Cause}
	case EndRefused:
		return &pipeline.ExternalAnswer{Disposition: pipeline.Refused, End: string(a.End), Cause: a.Cause}
	case EndAnswered:
	default:
		return &pipeline.ExternalAnswer{Disposition: pipeline.Uncertain, End: string(a.End), Cause: a.Cause, AnswerDigest: answerDigest(a.Result)}
	}
	d := answerDigest(a.Result)
	bad := func(cause error) *pipeline.ExternalAnswer {
		return &pipeline.ExternalAnswer{Disposition: pipeline.Uncertain, End: string(EndBadAnswer), AnswerDigest: d, Cause: cause}
	}
	if err := pipeline.StrictJSON(a.Result, pipeline.DefaultLimits); err != nil {
		return bad(fmt.Errorf("the answer breaks the strict parse: %w", err))
	}
	var res struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
	}
	if err := json.Unmarshal(a.Result, &res); err != nil {
		return bad(fmt.Errorf("decode the answer: %w", err))
	}
	if res.IsError {
		if x.t.IsError == IsErrorUnknown {
			return bad(errors.New("the upstream answered isError"))
		}
		return &pipeline.ExternalAnswer{Disposition: pipeline.Refused, End: string(EndRefused), AnswerDigest: d, Cause: errors.New("the upstream answered isError")}
	}
	var out json.RawMessage
	if x.structured {
		if len(res.StructuredContent) == 0 || string(res.StructuredContent) == "null" {
			return bad(errors.New("the answer has no structuredContent"))
		}
		out = res.StructuredContent
	} else {
		type block struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		blocks := make([]block, 0, len(res.Content))
		for _, c := range res.Content {
			if c.Type != "text" {
				return bad(errors.New("the answer holds content other than text"))
			}
			blocks = append(blocks, block{"text", c.Text})
		}
		b, err := json.Marshal(map[string]any{"content": blocks})
		if err != nil {
			return bad(err)
		}
		out = b
	}
	return &pipeline.ExternalAnswer{Disposition: pipeline.Done, End: string(EndAnswered), Output: out, AnswerDigest: d, Targets: x.targets(out)}
}

// targets are the entities the answer names where the config's pointers
// say: the event's targets.
func (x *exported) targets(out json.RawMessage) []auditlog.Target {
	return targetsIn(x.u.Name, x.t.Targets, out)
}

// targetsIn are the entities of kind upstream that out names at ptrs,
// each a string or an integer.
func targetsIn(upstream string, ptrs []Pointer, out json.RawMessage) []auditlog.Target {
	if len(ptrs) == 0 {
		return nil
	}
	var doc any
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil
	}
	var ts []auditlog.Target
	for _, p := range ptrs {
		for _, v := range p.Select(doc) {
			var id string
			switch v := v.(type) {
			case string:
				id = v
			case float64:
				id = fmt.Sprint(v)
			default:
				continue
			}
			if id != "" && len(id) <= maxTargetID && len(ts) < maxEventTargets {
				ts = append(ts, auditlog.Target{Kind: upstream, ID: id})
			}
		}
	}
	return ts
}

// Bounds of an event's targets from an answer.
const (
	maxTargetID     = 200
	maxEventTargets = 200
)

func answerDigest(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
