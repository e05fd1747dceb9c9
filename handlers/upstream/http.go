package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
)

var (
	errRedirect = errors.New("upstream: redirects are refused")
	errCAFile   = errors.New("upstream: the CA file holds no certificate")
)

// newHTTPClient is the http.Client of a Streamable HTTP upstream: TLS
// verified against the endpoint's CA file or the system's roots, every
// redirect refused (a redirect would carry the headers, and the call,
// elsewhere), no proxy from writerd's environment, and the endpoint's
// headers on every request. Plain http:// is whatever the config
// allowed.
func newHTTPClient(ep *Endpoint, dropped *atomic.Int64) (*http.Client, error) {
	tr, err := newTransport(ep)
	if err != nil {
		return nil, err
	}
	return &http.Client{
		Transport: &captureTransport{
			next:    &headerTransport{next: tr, headers: ep.Headers.Clone()},
			dropped: dropped,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errRedirect
		},
	}, nil
}

// newTransport is the transport of an HTTP upstream (MCP or API): TLS
// verified against the endpoint's CA file or the system's roots, no
// proxy from writerd's environment.
func newTransport(ep *Endpoint) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	// A connection kept for each call that may run at once (max_concurrent
	// bounds them; the SDK's standalone stream holds one more): with
	// net/http's default of 2 idle a host, calls beyond two each dial and
	// close a connection of their own.
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = MaxConcurrentLimit+1, MaxConcurrentLimit+1
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ep.CAFile != "" {
		pem, err := os.ReadFile(ep.CAFile)
		if err != nil {
			return nil, fmt.Errorf("upstream: reading the CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errCAFile
		}
		cfg.RootCAs = pool
	}
	tr.TLSClientConfig = cfg
	return tr, nil
}

// headerTransport sets the endpoint's headers on each request.
type headerTransport struct {
	next    http.RoundTripper
	headers http.Header
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		req = req.Clone(req.Context())
		for k, v := range t.headers {
			req.Header[http.CanonicalHeaderKey(k)] = append([]string(nil), v...)
		}
	}
	return t.next.RoundTrip(req)
}

// debugOnly lowers every record of the handler it wraps to debug level:
// the SDK's own lines may quote an upstream.
type debugOnly struct{ h slog.Handler }

func (d debugOnly) Enabled(ctx context.Context, _ slog.Level) bool {
	return d.h.Enabled(ctx, slog.LevelDebug)
}

func (d debugOnly) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelDebug
	return d.h.Handle(ctx, r)
}

func (d debugOnly) WithAttrs(as []slog.Attr) slog.Handler { return debugOnly{d.h.WithAttrs(as)} }
func (d debugOnly) WithGroup(g string) slog.Handler       { return debugOnly{d.h.WithGroup(g)} }
