package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/writerd/writerd/pipeline"
)

// An HTTP API as tools (docs/UPSTREAMS.md, "HTTP APIs as tools"): each
// endpoint a route (a method, a path template, a query and a JSON body
// taken from the arguments by JSON pointer), called by an API client
// that never sends a request twice on its own, and whose every answer is
// classified by its status alone: what the upstream's body says is never
// read but for a problem's type and a 2xx's result.

// KeyFormat is how an upstream takes its idempotency key header's value.
type KeyFormat string

const (
	// KeyToken: the key as is, 43 characters of base64url (Stripe's,
	// Adyen's).
	KeyToken KeyFormat = "token"
	// KeySFString: an RFC 8941 structured-field string, the key in
	// double quotes, as draft-ietf-httpapi-idempotency-key-header writes
	// it.
	KeySFString KeyFormat = "sf-string"
)

// KeyHeader is how an HTTP API upstream takes a key; Header "" is none.
type KeyHeader struct {
	Header string
	Format KeyFormat
	// TTL is how long the upstream keeps a key: a write is re-driven
	// under its key only within it.
	TTL time.Duration
}

// Signal is how an upstream answers one condition of its keys: a status
// and, if ProblemType is set, an RFC 9457 problem of that type. Status 0
// is no signal.
type Signal struct {
	Status      int
	ProblemType string
}

// Signals are what an HTTP API upstream's statuses mean beyond the
// defaults (API.Classify).
type Signals struct {
	// InFlight: the key's first request is still running.
	InFlight Signal
	// KeyReused: the key was used before with another payload.
	KeyReused Signal
	// NotRun are statuses that prove the request did not run (default
	// 429; 503 too for a keyed upstream: a proxy answers 503 mid-request,
	// and only a key makes its re-drive safe).
	NotRun []int
	// Credential403: a 403 says writerd's own credential is refused (as a
	// 401 always does), not that the call is.
	Credential403 bool
}

// Param is one query parameter or body member, taken from the argument
// at From.
type Param struct {
	Name string
	From Pointer
}

// Route is one endpoint tool's request: its method, its path template
// under the upstream's base URL, its query parameters and its JSON
// body's members, each from an argument. A parameter or member whose
// argument is absent is left out; a route with no Body sends none.
type Route struct {
	Method string
	Path   *PathTemplate
	Query  []Param
	Body   []Param
}

// The ends of an HTTP API's calls beside those of MCP upstreams.
const (
	// EndInFlight: the upstream says the key's first request still runs.
	EndInFlight End = "in_flight"
	// EndKeyReused: the upstream says the key was used with another
	// payload: a fault of writerd's keys, never a second write.
	EndKeyReused End = "key_reused"
	// EndCredential: the upstream refused writerd's own credential (401,
	// or 403 where the block says so): nothing ran.
	EndCredential End = "credential_refused"
	// EndNotRun: a status that proves the request did not run (408, 425,
	// and the block's not_run statuses).
	EndNotRun End = "not_run"
)

// APIAnswer is how one request to an HTTP API ended.
type APIAnswer struct {
	End End
	// Status is the response's status, 0 when none arrived.
	Status int
	// RetryAfter is the response's Retry-After in seconds, 0 if none.
	RetryAfter time.Duration
	// Result is a 2xx's JSON body, {} for an empty one (EndAnswered).
	Result json.RawMessage
	// Cause is private, for the log at debug level; never the body.
	Cause    error
	Duration time.Duration
}

// API is writerd's client of one HTTP API upstream.
type API struct {
	ep   Endpoint
	base *url.URL
	keys KeyHeader
	sig  Signals
	hc   *http.Client
}

// NewAPI makes the client of the HTTP API at ep.BaseURL. Its transport
// is a Streamable HTTP upstream's (TLS verified, no proxy, the block's
// headers), and more: a redirect is answered as it arrived, never
// followed, and no request is ever sent again by net/http itself.
func NewAPI(ep Endpoint, keys KeyHeader, sig Signals) (*API, error) {
	base, err := url.Parse(ep.BaseURL)
	if err != nil || base.Host == "" {
		return nil, errors.New("upstream: the base URL is not absolute")
	}
	if ep.MaxResultBytes <= 0 {
		ep.MaxResultBytes = DefaultMaxResultBytes
	}
	if ep.Timeout <= 0 {
		ep.Timeout = defaultTimeout
	}
	if keys.Header != "" && keys.Format == "" {
		keys.Format = KeyToken
	}
	if sig.NotRun == nil {
		sig.NotRun = []int{http.StatusTooManyRequests}
		if keys.Header != "" {
			sig.NotRun = append(sig.NotRun, http.StatusServiceUnavailable)
		}
	}
	tr, err := newTransport(&ep)
	if err != nil {
		return nil, err
	}
	return &API{
		ep: ep, base: base, keys: keys, sig: sig,
		hc: &http.Client{
			Transport: &headerTransport{next: tr, headers: ep.Headers.Clone()},
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}, nil
}

// Close closes the client's idle connections.
func (a *API) Close() { a.hc.CloseIdleConnections() }

// Keyed reports whether the upstream takes a key.
func (a *API) Keyed() bool { return a.keys.Header != "" }

// Request builds the request of route r for args (a JSON object that
// passed the tool's input schema) with key ("" for none) in the key
// header. Its errors are *pipeline.Error for arguments that make no
// request (a path argument that would leave its segment), naming the
// argument, never its value.
func (a *API) Request(ctx context.Context, r *Route, args json.RawMessage, key string) (*http.Request, error) {
	var doc map[string]any
	d := json.NewDecoder(bytes.NewReader(args))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil {
		return nil, fmt.Errorf("upstream: decode arguments: %w", err)
	}
	path, err := r.Path.Expand(doc)
	if err != nil {
		return nil, err
	}
	u := *a.base
	u.RawQuery, u.Fragment = "", ""
	u.RawPath = strings.TrimSuffix(a.base.EscapedPath(), "/") + path
	if u.Path, err = url.PathUnescape(u.RawPath); err != nil {
		return nil, fmt.Errorf("upstream: base path: %w", err)
	}
	q := url.Values{}
	for _, p := range r.Query {
		v, ok := selectOne(p.From, doc)
		if !ok {
			continue
		}
		s, err := queryValue(v)
		if err != nil {
			return nil, pipeline.Errorf(pipeline.InvalidInput, "The argument for the query parameter %q must be a string, a number or a boolean.", p.Name)
		}
		q.Set(p.Name, s)
	}
	u.RawQuery = q.Encode()

	var body io.Reader = emptyBody{}
	var length int64
	if r.Body != nil {
		m := map[string]any{}
		for _, p := range r.Body {
			if v, ok := selectOne(p.From, doc); ok {
				m[p.Name] = v
			}
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("upstream: encode body: %w", err)
		}
		body, length = bytes.NewReader(b), int64(len(b))
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("upstream: request: %w", err)
	}
	// Without GetBody, net/http never sends the request again on its own:
	// with it, and an Idempotency-Key header, its transport re-sends a
	// request whose connection was lost after it was written.
	req.GetBody = nil
	req.ContentLength = length
	if r.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if key != "" && a.keys.Header != "" {
		v := key
		if a.keys.Format == KeySFString {
			v = strconv.Quote(key) // base64url: nothing to escape
		}
		req.Header.Set(a.keys.Header, v)
	}
	return req, nil
}

// emptyBody is a body of no bytes that is neither nil nor http.NoBody:
// net/http treats those two as a request it may send again.
type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error) { return 0, io.EOF }

// selectOne is the one value p points at in doc.
func selectOne(p Pointer, doc any) (any, bool) {
	vs := p.Select(doc)
	if len(vs) != 1 {
		return nil, false
	}
	return vs[0], true
}

func queryValue(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return strconv.FormatBool(v), nil
	}
	return "", errors.New("not a scalar")
}

// Call sends route r with args and key under the endpoint's timeout, and
// classifies its answer (Classify). The request is sent once: ctx should
// carry no caller's cancellation.
func (a *API) Call(ctx context.Context, r *Route, args json.RawMessage, key string) *APIAnswer {
	begin := time.Now()
	ans := a.call(ctx, r, args, key)
	ans.Duration = time.Since(begin)
	return ans
}

var errNotWritten = errors.New("upstream: the request was not written")

func (a *API) call(ctx context.Context, r *Route, args json.RawMessage, key string) *APIAnswer {
	ctx, cancel := context.WithTimeout(ctx, a.ep.Timeout)
	defer cancel()
	req, err := a.Request(ctx, r, args, key)
	if err != nil {
		return &APIAnswer{End: EndNotSent, Cause: err}
	}
	// net/http reports every write of a request it began, whole or cut
	// off: without a report, no byte of it left writerd (the dial failed,
	// or the connection was refused), and the upstream cannot have run it.
	// A write cut off part way counts as sent.
	var wrote atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	}))
	resp, err := a.hc.Do(req)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		err = ue.Err // without the URL, which holds the arguments
	}
	if err != nil {
		switch {
		case !wrote.Load():
			return &APIAnswer{End: EndNotSent, Cause: errors.Join(errNotWritten, err)}
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return &APIAnswer{End: EndTimeout, Cause: errTimeout}
		case ctx.Err() != nil:
			return &APIAnswer{End: EndLost, Cause: errStopped}
		}
		return &APIAnswer{End: EndLost, Cause: err}
	}
	defer resp.Body.Close()
	return a.Classify(resp, key != "" && a.Keyed())
}

// Classify says what a response means, by its status (and, for a
// configured signal, its problem's type); keyed says the request carried
// a key. A 2xx's body is read, at most max_result_bytes, and must be
// JSON; no other body is read past a problem's type.
//
//	2xx                    answered (no body: {})
//	3xx                    error: never followed, and a 303 may follow an act
//	in_flight, key_reused  as the block configures them (keyed requests)
//	401, 403 if credential credential_refused
//	408, 425, not_run      not_run
//	other 4xx              refused
//	5xx                    error
func (a *API) Classify(resp *http.Response, keyed bool) *APIAnswer {
	st := resp.StatusCode
	var problem *string // the problem's type, once read
	ans := &APIAnswer{Status: st, RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	switch {
	case st >= 200 && st < 300:
		b, err := io.ReadAll(io.LimitReader(resp.Body, int64(a.ep.MaxResultBytes)+1))
		switch {
		case err != nil:
			ans.End, ans.Cause = EndLost, err
		case len(b) > a.ep.MaxResultBytes:
			ans.End, ans.Cause = EndBadAnswer, errTooLarge
		case len(bytes.TrimSpace(b)) == 0:
			ans.End, ans.Result = EndAnswered, json.RawMessage(`{}`)
		case !json.Valid(b):
			ans.End, ans.Cause = EndBadAnswer, errors.New("upstream: a 2xx body that is not JSON")
		default:
			ans.End, ans.Result = EndAnswered, bytes.TrimSpace(b)
		}
		return ans
	case keyed && a.sig.InFlight.matches(resp, &problem):
		ans.End = EndInFlight
	case keyed && a.sig.KeyReused.matches(resp, &problem):
		ans.End = EndKeyReused
	case st == http.StatusUnauthorized, st == http.StatusForbidden && a.sig.Credential403:
		ans.End = EndCredential
	case st == http.StatusRequestTimeout, st == http.StatusTooEarly, slices.Contains(a.sig.NotRun, st):
		ans.End = EndNotRun
	case st >= 400 && st < 500:
		ans.End = EndRefused
	default:
		ans.End = EndError
	}
	ans.Cause = fmt.Errorf("upstream: http %d", st)
	return ans
}

// maxProblemBytes bounds what is read of a problem to find its type.
const maxProblemBytes = 16 << 10

// matches reports whether resp is the signal s: its status, and its
// problem's type where s names one. The body is read only for that,
// once: *problem keeps the type read ("" for none) for the next signal.
func (s Signal) matches(resp *http.Response, problem **string) bool {
	if s.Status == 0 || resp.StatusCode != s.Status {
		return false
	}
	if s.ProblemType == "" {
		return true
	}
	if *problem == nil {
		typ := problemType(resp)
		*problem = &typ
	}
	return **problem == s.ProblemType
}

// problemType is the type of resp's RFC 9457 problem, "" if it is none.
func problemType(resp *http.Response) string {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "application/problem+json" {
		return ""
	}
	var p struct {
		Type string `json:"type"`
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxProblemBytes))
	if err != nil || json.Unmarshal(b, &p) != nil {
		return ""
	}
	return p.Type
}

// maxRetryAfter bounds the Retry-After writerd heeds.
const maxRetryAfter = time.Hour

// retryAfter reads a Retry-After of delay-seconds (an HTTP date is not
// heeded: clocks differ), at most maxRetryAfter.
func retryAfter(v string) time.Duration {
	n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
	if err != nil || n == 0 {
		return 0
	}
	return min(time.Duration(n)*time.Second, maxRetryAfter)
}

// ParsePointer parses an RFC 6901 pointer into the arguments or a result
// ("" is the whole document).
func ParsePointer(s string) (Pointer, error) {
	tokens, ok := parsePointer(s)
	if !ok {
		return Pointer{}, errors.New("upstream: not a JSON pointer")
	}
	return Pointer{text: s, tokens: tokens}, nil
}
