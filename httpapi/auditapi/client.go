package auditapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/writerd/writerd/auditlog"
)

// Client reads a running daemon's audit API: a Source over HTTP. Its
// errors are sentences for the auditor, naming the daemon by its URL
// without credentials.
type Client struct {
	base   *url.URL
	token  string
	client *http.Client
}

var _ Source = (*Client)(nil)

// NewClient returns a client of the daemon at base (its scheme, host and
// any path prefix), sending token as its bearer token unless it is empty.
func NewClient(base *url.URL, token string) *Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = 30 * time.Second
	return &Client{base: base, token: token, client: &http.Client{Transport: t}}
}

// Close closes the client's idle connections.
func (c *Client) Close() error {
	c.client.CloseIdleConnections()
	return nil
}

// NotServed begins the message of the 404 a writerd daemon answers for a
// path it does not serve (httpapi writes it), as against the audit
// API's own 404s (an event or a checkpoint the log does not hold): the
// client tells them apart by it.
const NotServed = "There is nothing at this path"

// ErrNoAuditAPI is the error of a daemon that answers the audit API's
// paths with its 404 for a path it does not serve: the client's base URL
// is not the daemon's (it names a route, such as /mcp, or a prefix the
// daemon has none of), or the daemon serves no audit API.
var ErrNoAuditAPI = errors.New("no audit API at this URL")

// maxAnswer bounds an answer read whole (an export is streamed).
const maxAnswer = 256 << 20

// get sends a GET and returns the answer of a 200; any other status is an
// error that says what to do.
func (c *Client) get(ctx context.Context, path string, q url.Values) (*http.Response, error) {
	return c.do(ctx, http.MethodGet, path, q)
}

// do sends a request without a body, as get does.
func (c *Client) do(ctx context.Context, method, path string, q url.Values) (*http.Response, error) {
	u := c.base.JoinPath(path)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, c.base.Redacted(), errors.Unwrap(err))
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	json.Unmarshal(b, &env)
	switch code := env.Error.Code; {
	case resp.StatusCode == http.StatusUnauthorized:
		if c.token == "" {
			return nil, errors.New("the daemon wants a token: set WRITERD_TOKEN, or give --token-file, with a token that has the audit scope (writerd token new --scopes audit)")
		}
		return nil, errors.New("the daemon refused the token (401): it is not in its tokens file, or was revoked")
	case resp.StatusCode == http.StatusForbidden && code == "PERMISSION_DENIED":
		return nil, errors.New("the token lacks the audit scope: make one with writerd token new --scopes audit")
	case resp.StatusCode == http.StatusMethodNotAllowed && method == http.MethodPost:
		return nil, fmt.Errorf("the daemon at %s signs no checkpoint on request: it is older than this writerd", c.base.Redacted())
	case resp.StatusCode == http.StatusNotFound && code == "":
		return nil, fmt.Errorf("the daemon at %s serves no audit API (404 on %s): is it a writerd serve with audit support?", c.base.Redacted(), u.Path)
	case resp.StatusCode == http.StatusNotFound && strings.HasPrefix(env.Error.Message, NotServed):
		return nil, fmt.Errorf("%w: the daemon at %s has nothing at %s (404); the URL must be the daemon's base URL, such as http://127.0.0.1:7070, without a route such as /mcp, of a writerd serve with the audit API", ErrNoAuditAPI, c.base.Redacted(), u.Path)
	case resp.StatusCode == http.StatusNotFound && (path == pathCheckpoint || path == pathExport):
		return nil, ErrNoCheckpoint
	case resp.StatusCode == http.StatusNotFound && code == "NOT_FOUND":
		return nil, ErrNoEvent
	case code != "":
		return nil, fmt.Errorf("the daemon answered %d %s: %s", resp.StatusCode, code, env.Error.Message)
	}
	return nil, fmt.Errorf("the daemon answered %s", resp.Status)
}

// getJSON decodes a JSON answer into v.
func (c *Client) getJSON(ctx context.Context, path string, q url.Values, v any) error {
	resp, err := c.get(ctx, path, q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(v); err != nil {
		if fe := new(auditlog.FormatError); errors.As(err, &fe) {
			return fmt.Errorf("the daemon sent an event this writerd cannot read: %w", fe)
		}
		return fmt.Errorf("the daemon's answer to %s is not what the audit API answers: %w", path, err)
	}
	return nil
}

// getText returns a text answer.
func (c *Client) getText(ctx context.Context, path string) ([]byte, error) {
	resp, err := c.get(ctx, path, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
}

// List asks for pages of at most MaxLimit events until it has limit of
// them or the log has no more.
func (c *Client) List(ctx context.Context, f auditlog.Filter, after uint64, limit int) ([]*auditlog.Event, uint64, error) {
	q := query(f)
	var out []*auditlog.Event
	for {
		q.Set("limit", strconv.Itoa(min(limit-len(out), MaxLimit)))
		q.Set("after", strconv.FormatUint(after, 10))
		var p Page
		if err := c.getJSON(ctx, pathEvents, q, &p); err != nil {
			return nil, 0, err
		}
		out = append(out, p.Events...)
		if p.Next == "" {
			return out, 0, nil
		}
		next, err := strconv.ParseUint(p.Next, 10, 64)
		if err != nil || next <= after {
			return nil, 0, errors.New("the daemon sent a cursor that does not go forward")
		}
		if len(out) >= limit {
			return out, next, nil
		}
		after = next
	}
}

// Size is the latest checkpoint's size plus the events after it: the API
// has no call for it, and the events after a checkpoint are few.
func (c *Client) Size(ctx context.Context) (uint64, error) {
	size, err := c.signedSize(ctx)
	if err != nil {
		return 0, err
	}
	for after := size; ; {
		events, next, err := c.List(ctx, auditlog.Filter{}, after, MaxLimit)
		if err != nil {
			return 0, err
		}
		if len(events) > 0 {
			size = events[len(events)-1].Seq
		}
		if next == 0 {
			return size, nil
		}
		after = next
	}
}

// signedSize returns the size of the latest checkpoint's tree, 0 if none
// was signed.
func (c *Client) signedSize(ctx context.Context) (uint64, error) {
	signed, err := c.Checkpoint(ctx)
	switch {
	case errors.Is(err, ErrNoCheckpoint):
		return 0, nil
	case err != nil:
		return 0, err
	}
	cp, err := auditlog.ParseSigned(signed)
	if err != nil {
		return 0, fmt.Errorf("the daemon's latest checkpoint: %w", err)
	}
	return cp.Size, nil
}

// Event asks for the event and, if a checkpoint was signed between that
// and asking for the checkpoint, asks again: the proof is against the
// latest checkpoint when the daemon answered.
func (c *Client) Event(ctx context.Context, ref string) (*ProvenEvent, error) {
	if _, _, ok := ParseRef(ref); !ok {
		return nil, ErrNoEvent
	}
	for try := 0; ; try++ {
		signed, err := c.Checkpoint(ctx)
		if err != nil && !errors.Is(err, ErrNoCheckpoint) {
			return nil, err
		}
		var answer EventAnswer
		if err := c.getJSON(ctx, pathEvent+url.PathEscape(ref), nil, &answer); err != nil {
			return nil, err
		}
		if answer.Event == nil {
			return nil, errors.New("the daemon sent an answer without its event")
		}
		p := &ProvenEvent{Event: answer.Event, Proof: answer.Proof, Checkpoint: signed, Canonical: answer.Leaf}
		if p.Canonical == nil { // a daemon from before leaves were sent
			if p.Canonical, err = p.Event.Canonical(); err != nil {
				return nil, err
			}
		} else if err := sameEvent(p.Event, p.Canonical); err != nil {
			return nil, err
		}
		size := uint64(0)
		if signed != nil {
			cp, err := auditlog.ParseSigned(signed)
			if err != nil {
				return nil, fmt.Errorf("the daemon's latest checkpoint: %w", err)
			}
			size = cp.Size
		}
		if p.Proof == nil && p.Event.Seq > size || p.Proof != nil && p.Proof.Size == size || try == 2 {
			return p, nil
		}
	}
}

// sameEvent checks that the event a daemon sent is the one its leaf
// holds: what is shown is what the proof proves.
func sameEvent(e *auditlog.Event, leaf []byte) error {
	held, err := auditlog.DecodeEvent(leaf)
	if err != nil {
		return errors.New("the daemon sent a leaf that is not an audit event")
	}
	a, err1 := held.Canonical()
	b, err2 := e.Canonical()
	if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
		return fmt.Errorf("the daemon sent event %d with a leaf that holds another event", e.Seq)
	}
	return nil
}

// SignNow asks the daemon to sign a checkpoint of its log as it is now
// (at most once a second), and returns the latest checkpoint then.
func (c *Client) SignNow(ctx context.Context) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodPost, pathCheckpoint, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
}

func (c *Client) Checkpoint(ctx context.Context) ([]byte, error) {
	return c.getText(ctx, pathCheckpoint)
}

func (c *Client) Checkpoints(ctx context.Context) ([][]byte, error) {
	var list CheckpointList
	if err := c.getJSON(ctx, pathCheckpoints, nil, &list); err != nil {
		return nil, err
	}
	all := make([][]byte, len(list.Checkpoints))
	for i, s := range list.Checkpoints {
		all[i] = []byte(s)
	}
	return all, nil
}

// Events streams the export from the first event: the events the latest
// checkpoint covers, as the daemon stores them.
func (c *Client) Events(ctx context.Context) (auditlog.Stream, error) {
	resp, err := c.get(ctx, pathExport, url.Values{"from": {"1"}})
	if errors.Is(err, ErrNoCheckpoint) {
		return func(func(uint64, []byte, []byte) bool) error { return nil }, nil
	}
	if err != nil {
		return nil, err
	}
	h, events, err := auditlog.ReadExport(resp.Body)
	if err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("the daemon's export: %w", err)
	}
	if h.Prefix.Size != 0 {
		resp.Body.Close()
		return nil, errors.New("the daemon's export does not start at the first event")
	}
	return func(yield func(uint64, []byte, []byte) bool) error {
		defer resp.Body.Close()
		return events(yield)
	}, nil
}

// Export copies the daemon's export, with verifierKey in its header
// instead of the daemon's.
func (c *Client) Export(ctx context.Context, from uint64, w io.Writer, verifierKey string) error {
	resp, err := c.get(ctx, pathExport, url.Values{"from": {strconv.FormatUint(from, 10)}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	h, events, err := auditlog.ReadExport(resp.Body)
	if err != nil {
		return fmt.Errorf("the daemon's export: %w", err)
	}
	if h.Prefix.Size+1 < from {
		return pastCheckpoint(from, h.Prefix.Size)
	}
	h.VerifierKey = verifierKey
	line, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if _, err := w.Write(append(line, '\n')); err != nil {
		return err
	}
	var werr error
	err = events(func(_ uint64, c []byte, _ []byte) bool {
		_, werr = w.Write(append(bytes.Clone(c), '\n'))
		return werr == nil
	})
	if werr != nil {
		return werr
	}
	return err
}

// VerifierKey returns the key the daemon says its log is signed with.
func (c *Client) VerifierKey(ctx context.Context) (string, error) {
	b, err := c.getText(ctx, pathKey)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(b)), nil
}
