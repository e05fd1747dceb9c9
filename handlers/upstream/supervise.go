package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// backoff paces reconnection: the first retry after min, each next one
// after twice the last, at most max; a session that stayed up for
// healthy resets it.
type backoff struct{ min, max, healthy time.Duration }

var defaultBackoff = backoff{min: 100 * time.Millisecond, max: 30 * time.Second, healthy: 30 * time.Second}

const (
	// connectTimeout bounds a session's handshake and each listing of
	// its tools.
	connectTimeout = 30 * time.Second
	// maxPages bounds the pages of one listing of tools.
	maxPages = 1000
)

var (
	errSessionEnded = errors.New("upstream: the session ended")
	errSessionLost  = errors.New("upstream: a call's connection was lost; the session is set up again")
	errChildExited  = errors.New("upstream: the child exited")
	errCursorLoop   = errors.New("upstream: tools/list repeated a cursor")
	errTooManyPages = errors.New("upstream: tools/list has too many pages")
)

// supervise keeps a session up until ctx ends.
func (c *Client) supervise(ctx context.Context) {
	defer close(c.done)
	delay := c.backoff.min
	for {
		upFor, err := c.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if upFor >= c.backoff.healthy {
			delay = c.backoff.min
		}
		// The cause may quote the upstream: debug only.
		c.log.Warn("upstream down, reconnecting", "after", delay.String())
		c.log.Debug("upstream session ended", "cause", err.Error())
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, c.backoff.max)
	}
}

// session runs one session: it connects (starting the child of a stdio
// upstream), lists the tools, serves calls until the session or the
// child ends, and tears everything down. It returns how long the
// session was up.
func (c *Client) session(ctx context.Context) (time.Duration, error) {
	var (
		inner mcp.Connection
		ch    *child
		w     *wire
	)
	if c.http != nil {
		t := &mcp.StreamableClientTransport{
			Endpoint:   c.ep.URL,
			HTTPClient: c.http,
			// A stream that breaks ends the session, which is
			// re-established with the Client's own backoff.
			MaxRetries: -1,
		}
		conn, err := t.Connect(ctx)
		if err != nil {
			return 0, err
		}
		inner = conn
	} else {
		var err error
		ch, err = startChild(&c.ep, c.log)
		if err != nil {
			return 0, err
		}
		w = newWire(&c.dropped)
		inner = newLineConn(w, ch.stdin, ch.stdout)
	}
	relist := make(chan struct{}, 1)
	client := mcp.NewClient(&mcp.Implementation{Name: "writerd", Version: "1"}, &mcp.ClientOptions{
		Logger: slog.New(debugOnly{c.log.Handler()}).With("sdk", true),
		// No roots, no sampling, no elicitation (nil is roots).
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case relist <- struct{}{}:
			default:
			}
		},
		// A tools/call is sent once: the SDK's multi-round-trip retry
		// would send it again.
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
	})
	client.AddReceivingMiddleware(refuseRequests)

	var cs *mcp.ClientSession
	defer func() {
		inner.Close()
		if ch != nil {
			ch.stop(c.opts.StopGrace)
		}
		if cs != nil {
			cs.Close()
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	var err error
	cs, err = client.Connect(cctx, connTransport{inner}, &mcp.ClientSessionOptions{ProtocolVersion: c.opts.protocolVersion})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("upstream: connecting: %w", err)
	}
	ended := make(chan struct{})
	go func() {
		cs.Wait()
		close(ended)
	}()
	var exited <-chan struct{}
	if ch != nil {
		exited = ch.exited
	}

	if err := c.listTools(ctx, cs, w); err != nil {
		return 0, err
	}
	select {
	case <-c.lost: // a loss on the session before this one
	default:
	}
	c.mu.Lock()
	c.sess, c.wire = cs, w
	c.mu.Unlock()
	upAt := time.Now()
	if c.opts.OnUp != nil {
		c.opts.OnUp(true)
	}
	defer func() {
		c.mu.Lock()
		c.sess, c.wire = nil, nil
		c.mu.Unlock()
		if c.opts.OnUp != nil {
			c.opts.OnUp(false)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return time.Since(upAt), ctx.Err()
		case <-ended:
			return time.Since(upAt), errSessionEnded
		case <-exited:
			return time.Since(upAt), errChildExited
		case <-c.lost:
			// A call's connection broke after its request left: the
			// session's streams may be broken with it, unseen by the
			// SDK, so it is set up again rather than trusted.
			return time.Since(upAt), errSessionLost
		case <-relist:
			if err := c.listTools(ctx, cs, w); err != nil {
				return time.Since(upAt), err
			}
		}
	}
}

// listTools lists every page of the upstream's tools and hands them to
// OnTools. The SDK's Tool drops execution.taskSupport, so it is read
// from the raw pages.
func (c *Client) listTools(ctx context.Context, cs *mcp.ClientSession, w *wire) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	c.mu.Lock()
	old := c.task
	c.mu.Unlock()
	var tools []*mcp.Tool
	task := map[string]string{}
	seen := map[string]bool{}
	cursor := ""
	for page := 0; ; page++ {
		if page == maxPages {
			return errTooManyPages
		}
		s := &slot{method: "tools/list"}
		res, err := cs.ListTools(withSlot(ctx, s), &mcp.ListToolsParams{Cursor: cursor})
		if w != nil {
			w.forget(s)
		}
		if err != nil {
			return fmt.Errorf("upstream: listing tools: %w", err)
		}
		if resp, _, _ := s.state(); resp != nil {
			var raw struct {
				Tools []struct {
					Name      string `json:"name"`
					Execution *struct {
						TaskSupport string `json:"taskSupport"`
					} `json:"execution"`
				} `json:"tools"`
			}
			if err := json.Unmarshal(resp.Result, &raw); err == nil {
				for _, t := range raw.Tools {
					if t.Execution != nil && t.Execution.TaskSupport != "" {
						task[t.Name] = t.Execution.TaskSupport
					}
				}
			}
		} else {
			// The SDK answered from its cache (SEP-2549): the page is
			// the one listed before.
			for _, t := range res.Tools {
				if v, ok := old[t.Name]; ok {
					task[t.Name] = v
				}
			}
		}
		tools = append(tools, res.Tools...)
		if res.NextCursor == "" {
			break
		}
		if seen[res.NextCursor] {
			return errCursorLoop
		}
		seen[res.NextCursor] = true
		cursor = res.NextCursor
	}
	c.mu.Lock()
	c.task = task
	c.mu.Unlock()
	if c.opts.OnTools != nil {
		c.opts.OnTools(tools)
	}
	return nil
}

// refuseRequests refuses what an upstream may ask of a client that
// declares no capabilities, and drops the notifications that writerd
// forwards nowhere.
func refuseRequests(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "sampling/createMessage", "elicitation/create", "roots/list":
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "Method not found."}
		case "notifications/progress", "notifications/message":
			return nil, nil
		}
		return next(ctx, method, req)
	}
}
