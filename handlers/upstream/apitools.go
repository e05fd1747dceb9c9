package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/writerd/writerd/metrics"
	"github.com/writerd/writerd/pipeline"
)

// The tools of an HTTP API upstream: each endpoint a pipeline tool whose
// effect is the API's (pipeline.DefineExternal), its schemas the
// operator's, its answers mapped from their statuses (API.Classify) to
// what they mean for the write.

// EndpointTool is one endpoint of an HTTP API upstream, as the operator
// declares it: the upstream's name of it (its audit events'
// upstream.tool), the name agents see, its kind, its request, and its
// schemas. Input is closed by DefineExternal; Output is not (an API adds
// response members), and members it does not name are dropped from the
// result before it is checked and stored.
type EndpointTool struct {
	Name, Export, Title, Description string
	Kind                             Kind
	Idempotent                       bool
	Route                            Route
	Input, Output                    json.RawMessage
	Targets                          []Pointer
}

// APIOptions are what DefineEndpoint needs beside the tool.
type APIOptions struct {
	API     *API
	Slots   Slots
	Metrics *metrics.Upstreams // nil counts nothing
	// Logger receives the operator's alarms (writerd's credential
	// refused); nil discards them.
	Logger *slog.Logger
	Scope  string
}

// DefineEndpoint builds the pipeline tool of endpoint t of upstream name.
// Its path template's arguments must be required strings of its input
// schema.
func DefineEndpoint[D any](name string, t *EndpointTool, o APIOptions) (*pipeline.Tool[D], error) {
	tool, err := defineEndpoint[D](name, t, o)
	if err != nil {
		return nil, fmt.Errorf("upstream %s, tool %s: %w", name, t.Name, err)
	}
	return tool, nil
}

// defineEndpoint is DefineEndpoint, its error without the names.
func defineEndpoint[D any](name string, t *EndpointTool, o APIOptions) (*pipeline.Tool[D], error) {
	if err := pathArgsRequired(t); err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	x := &endpoint{upstream: name, t: t, api: o.API, slots: o.Slots, metrics: o.Metrics, log: log}
	var out any
	if err := json.Unmarshal(t.Output, &out); err != nil {
		return nil, errors.New("output schema: not JSON")
	}
	x.output = out
	spec := pipeline.ExternalSpec{
		Name: t.Export, Title: t.Title, Description: t.Description,
		ReadOnly: t.Kind == KindRead, Destructive: t.Kind == KindDestructive,
		InputSchema: t.Input, OutputSchema: t.Output, Scope: o.Scope,
		Redrive:  t.Kind != KindRead && (o.API.Keyed() || t.Idempotent),
		Upstream: name, UpstreamTool: t.Name, External: x,
		Method: t.Route.Method, Path: t.Route.Path.String(),
	}
	if o.API.Keyed() {
		// Re-driven under its key only while the upstream keeps it.
		spec.RedriveWithin = o.API.keys.TTL
	}
	if spec.Destructive {
		spec.Preview = func(args json.RawMessage) any {
			return map[string]any{"upstream": name, "tool": t.Name, "method": t.Route.Method, "path": t.Route.Path.String(), "arguments": args}
		}
	}
	tool, err := pipeline.DefineExternal[D](spec)
	if err != nil {
		// Without pipeline's prefix: the caller names the tool.
		_, cause, _ := strings.Cut(err.Error(), "pipeline: tool "+t.Export+": ")
		if cause == "" {
			return nil, err
		}
		return nil, errors.New(cause)
	}
	return tool, nil
}

// pathArgsRequired checks that each argument of t's path template is a
// required string property of its input schema.
func pathArgsRequired(t *EndpointTool) error {
	var s struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(t.Input, &s); err != nil {
		return errors.New("not a JSON object")
	}
	for _, n := range t.Route.Path.Names() {
		p, ok := s.Properties[n]
		if !ok || p.Type != "string" || !contains(s.Required, n) {
			return fmt.Errorf("the path's argument %s is not a required string property", n)
		}
	}
	return nil
}

// endpoint is the pipeline.External of one endpoint tool.
type endpoint struct {
	upstream string
	t        *EndpointTool
	api      *API
	slots    Slots
	metrics  *metrics.Upstreams
	log      *slog.Logger
	output   any // the output schema, decoded, for pruning results
}

func (x *endpoint) Slot(ctx context.Context, wait time.Duration) (func(), error) {
	return x.slots.Take(ctx, wait)
}

// Check builds the request without sending it: arguments that make none
// (a path argument that would leave its segment) are refused before
// anything is recorded (pipeline.ExternalChecker).
func (x *endpoint) Check(args json.RawMessage) error {
	_, err := x.api.Request(context.Background(), &x.t.Route, args, "")
	return err
}

func (x *endpoint) Send(ctx context.Context, call *pipeline.ExternalCall) *pipeline.ExternalAnswer {
	a := x.api.Call(ctx, &x.t.Route, call.Args, call.UpstreamKey)
	x.metrics.Call(x.upstream, string(a.End), a.Duration)
	ans := x.answer(a)
	if ans.End == "" {
		ans.End = string(a.End)
	}
	ans.Status, ans.Duration = a.Status, a.Duration
	return ans
}

// answer says what an APIAnswer means for its write.
func (x *endpoint) answer(a *APIAnswer) *pipeline.ExternalAnswer {
	switch a.End {
	case EndAnswered:
		d := answerDigest(a.Result)
		out, err := prune(a.Result, x.output)
		if err != nil {
			return &pipeline.ExternalAnswer{Disposition: pipeline.Uncertain, End: string(EndBadAnswer), AnswerDigest: d, Cause: err}
		}
		return &pipeline.ExternalAnswer{Disposition: pipeline.Done, Output: out, AnswerDigest: d, Targets: targetsIn(x.upstream, x.t.Targets, out)}
	case EndNotSent, EndNotRun:
		return &pipeline.ExternalAnswer{Disposition: pipeline.NotSent, Cause: a.Cause}
	case EndCredential:
		// Nothing ran, and nothing will until an operator acts: an alarm,
		// and the calls answered UNAVAILABLE meanwhile.
		x.log.Error("an HTTP API upstream refused writerd's own credential; its calls are not run until its operator renews the credential in the upstreams file",
			"upstream", x.upstream, "tool", x.t.Name, "status", a.Status)
		return &pipeline.ExternalAnswer{Disposition: pipeline.NotSent, Credential: true, Cause: a.Cause}
	case EndRefused:
		return &pipeline.ExternalAnswer{Disposition: pipeline.Refused, Cause: a.Cause}
	case EndInFlight:
		return &pipeline.ExternalAnswer{Disposition: pipeline.InFlight, RetryAfter: a.RetryAfter, Cause: a.Cause}
	case EndKeyReused:
		return &pipeline.ExternalAnswer{Disposition: pipeline.UpstreamKeyReused, Cause: a.Cause}
	}
	return &pipeline.ExternalAnswer{Disposition: pipeline.Uncertain, Cause: a.Cause}
}

// prune decodes a 2xx's JSON through the strict parse and drops, at
// every object whose schema names its properties and does not say what
// others are, the members the schema does not name: an API adds response
// members, which are neither checked nor stored.
func prune(raw json.RawMessage, schema any) (json.RawMessage, error) {
	if err := pipeline.StrictJSON(raw, pipeline.DefaultLimits); err != nil {
		return nil, fmt.Errorf("the answer breaks the strict parse: %w", err)
	}
	// Numbers as they came (1.50 stays 1.50), not as a float64 writes them.
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode the answer: %w", err)
	}
	return json.Marshal(pruned(v, schema))
}

func pruned(v, schema any) any {
	s, ok := schema.(map[string]any)
	if !ok {
		return v
	}
	switch v := v.(type) {
	case map[string]any:
		props, named := s["properties"].(map[string]any)
		_, said := s["additionalProperties"]
		for k, m := range v {
			sub, ok := props[k]
			switch {
			case ok:
				v[k] = pruned(m, sub)
			case named && !said:
				delete(v, k)
			}
		}
		return v
	case []any:
		for i := range v {
			v[i] = pruned(v[i], s["items"])
		}
		return v
	}
	return v
}
