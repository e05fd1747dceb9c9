package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// defaultTimeout bounds a call when the endpoint sets no timeout (the
// config always sets one).
const defaultTimeout = 30 * time.Second

// ClientOptions are what a Client tells its owner, and how it logs.
type ClientOptions struct {
	// Logger receives the connection's lines (the upstream's name, never
	// its text above debug). Nil discards them.
	Logger *slog.Logger

	// OnTools is called with the upstream's tools, every page of
	// tools/list, on each (re)connect before OnUp(true), and again on
	// each notifications/tools/list_changed. Calls are never concurrent.
	// A listing that fails ends the session (it is re-established).
	OnTools func(tools []*mcp.Tool)

	// OnUp is called when a session is up (connected and its tools
	// listed) and when it is down. Calls are never concurrent, and the
	// first is OnUp(false) only after an OnUp(true).
	OnUp func(up bool)

	// StopGrace is how long a stdio child has between SIGTERM and
	// SIGKILL when the Client closes or restarts it (default 5 s).
	StopGrace time.Duration

	// protocolVersion, for tests, is the version the session asks for
	// ("" is the SDK's latest).
	protocolVersion string
}

// Client is writerd's connection to one upstream: a stdio child that it
// starts and supervises, or a Streamable HTTP session, re-established
// with backoff whenever it ends.
//
// The client declares no capabilities: an upstream's sampling,
// elicitation and roots requests are refused with the JSON-RPC error
// -32601, its progress and logging notifications are dropped, and
// nothing it says is forwarded.
type Client struct {
	ep   Endpoint
	opts ClientOptions
	log  *slog.Logger
	http *http.Client // a Streamable HTTP upstream's

	mu     sync.Mutex
	sess   *mcp.ClientSession
	wire   *wire             // a stdio session's
	task   map[string]string // the latest listing's execution.taskSupport by tool
	cancel context.CancelFunc
	done   chan struct{}

	backoff backoff
	lost    chan struct{} // a call's HTTP connection was lost: set the session up again
	dropped atomic.Int64  // notifications/cancelled dropped, for tests
}

// NewClient makes a Client for ep; Start connects it.
func NewClient(ep Endpoint, opts ClientOptions) *Client {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = 5 * time.Second
	}
	if ep.MaxResultBytes <= 0 {
		ep.MaxResultBytes = DefaultMaxResultBytes
	}
	if ep.Timeout <= 0 {
		ep.Timeout = defaultTimeout
	}
	return &Client{
		ep:      ep,
		opts:    opts,
		log:     opts.Logger.With("upstream", ep.Name),
		backoff: defaultBackoff,
		lost:    make(chan struct{}, 1),
	}
}

// Start begins connecting in the background and returns at once, or an
// error if the endpoint cannot be connected to at all (its CA file does
// not load). OnUp(true) says when the first session is up. Start is
// called once; ctx's values are kept, its cancellation closes nothing
// (Close does).
func (c *Client) Start(ctx context.Context) error {
	if c.ep.URL != "" {
		hc, err := newHTTPClient(&c.ep, &c.dropped)
		if err != nil {
			return err
		}
		c.http = hc
	} else if len(c.ep.Command) == 0 {
		return errNoCommand
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.mu.Lock()
	c.cancel, c.done = cancel, make(chan struct{})
	c.mu.Unlock()
	go c.supervise(ctx)
	return nil
}

// Close ends the session (a stdio child gets SIGTERM, then SIGKILL after
// the grace) and stops reconnecting; it returns when all is stopped.
func (c *Client) Close() {
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// TaskSupport returns the execution.taskSupport ("forbidden",
// "optional", "required", or "" when absent) of a tool in the latest
// listing. The SDK's Tool has no such field, so Pin does not cover it;
// OnTools's callee reads it here (the listing it is called with is the
// latest).
func (c *Client) TaskSupport(tool string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.task[tool]
}

// Answer is how one call ended.
type Answer struct {
	End End
	// Result is the raw JSON of the CallToolResult exactly as it arrived
	// (EndAnswered, and EndBadAnswer for an answer over the bound), for
	// the strict parse; nil otherwise.
	Result json.RawMessage
	// Cause is private, for the log at debug level, and never reaches a
	// caller: a JSON-RPC error is kept by its code alone, but a
	// transport's error may quote what the upstream sent.
	Cause    error
	Duration time.Duration
}

var (
	errNoSession   = errors.New("upstream: no session")
	errNoResult    = errors.New("upstream: a response without a result")
	errTooLarge    = errors.New("upstream: a result over the bound")
	errTimeout     = errors.New("upstream: no answer within the call timeout")
	errStopped     = errors.New("upstream: stopped waiting for the answer")
	errNotReceived = errors.New("upstream: the request never left writerd")
)

// Call calls an upstream tool with args (one JSON object, sent as is)
// and meta (the request's _meta, or nil), under the endpoint's timeout.
//
// ctx should carry no caller's cancellation (the caller's disconnection
// must not end a write); when it ends, or the timeout passes, the call
// stops waiting, and no notifications/cancelled is ever sent upstream.
//
// The End is decided by what crossed the wire, not by the SDK's error:
// EndNotSent only when no byte of the request can have left writerd (no
// session, the child not running, the connection refused before a
// connection existed); a response with a JSON-RPC error is EndRefused
// for -32601 and -32602, else EndError; a response with a result is
// EndAnswered (whatever it holds; isError and the strict parse are the
// caller's) or EndBadAnswer over Endpoint.MaxResultBytes; without a
// response, EndTimeout when the timeout passed, else EndLost.
func (c *Client) Call(ctx context.Context, tool string, args json.RawMessage, meta map[string]any) *Answer {
	begin := time.Now()
	a := c.call(ctx, tool, args, meta)
	a.Duration = time.Since(begin)
	return a
}

func (c *Client) call(ctx context.Context, tool string, args json.RawMessage, meta map[string]any) *Answer {
	c.mu.Lock()
	cs, w := c.sess, c.wire
	c.mu.Unlock()
	if cs == nil {
		return &Answer{End: EndNotSent, Cause: errNoSession}
	}
	ctx, cancel := context.WithTimeout(ctx, c.ep.Timeout)
	defer cancel()
	s := &slot{method: "tools/call"}
	ctx = withSlot(ctx, s)
	if c.http != nil {
		// A connection to the server exists: the request may be on it.
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			GotConn: func(httptrace.GotConnInfo) { s.markLeft() },
		})
	}
	params := &mcp.CallToolParams{Name: tool, Meta: maps.Clone(meta)} // the SDK adds to _meta
	if args != nil {
		params.Arguments = args
	}
	_, err := cs.CallTool(ctx, params)
	if w != nil {
		w.forget(s)
	}
	resp, left, huge := s.state()
	switch {
	case resp != nil && resp.Error != nil:
		code := int64(0)
		var werr *jsonrpc.Error
		if errors.As(resp.Error, &werr) {
			code = werr.Code
		}
		cause := fmt.Errorf("upstream: json-rpc error %d", code)
		if code == jsonrpc.CodeMethodNotFound || code == jsonrpc.CodeInvalidParams {
			return &Answer{End: EndRefused, Cause: cause}
		}
		return &Answer{End: EndError, Cause: cause}
	case resp != nil:
		raw := bytes.TrimSpace(resp.Result)
		if len(raw) == 0 {
			return &Answer{End: EndBadAnswer, Cause: errNoResult}
		}
		if len(raw) > c.ep.MaxResultBytes {
			return &Answer{End: EndBadAnswer, Result: raw, Cause: errTooLarge}
		}
		return &Answer{End: EndAnswered, Result: raw}
	case huge:
		return &Answer{End: EndBadAnswer, Cause: errTooLarge}
	case !left:
		return &Answer{End: EndNotSent, Cause: errors.Join(errNotReceived, err)}
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &Answer{End: EndTimeout, Cause: errTimeout}
	case ctx.Err() != nil:
		return &Answer{End: EndLost, Cause: errStopped}
	default:
		if c.http != nil {
			select {
			case c.lost <- struct{}{}:
			default:
			}
		}
		return &Answer{End: EndLost, Cause: err}
	}
}
