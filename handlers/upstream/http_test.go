package upstream

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Ensure TLS is verified: with the endpoint's CA file the upstream's
// certificate is trusted and calls go through; without it (the system's
// roots), no connection is made.
func TestHTTP_CAFile(t *testing.T) {
	srv := newTestServer(nil)
	ts := httptest.NewTLSServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.server }, nil))
	defer ts.Close()
	defer srv.releaseAll()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	w := newWatch()
	c := MustStart(t, Endpoint{Name: "tls", URL: ts.URL, CAFile: ca, Timeout: time.Minute}, w.opts(), w)
	textOf(t, c.Call(context.Background(), "echo", json.RawMessage(`{}`), nil))
	c.Close()

	var dropped atomic.Int64
	hc, err := newHTTPClient(&Endpoint{URL: ts.URL}, &dropped)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := hc.Get(ts.URL); err == nil {
		resp.Body.Close()
		t.Fatal("the system's roots trusted the test's certificate")
	}
}

// Ensure a redirect is refused: the request is not sent on, and the
// headers never reach the redirect's target.
func TestHTTP_NoRedirects(t *testing.T) {
	var reached atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Add(1) }))
	defer target.Close()
	from := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	}))
	defer from.Close()
	var dropped atomic.Int64
	hc, err := newHTTPClient(&Endpoint{URL: from.URL, Headers: http.Header{"Authorization": {"Bearer t"}}}, &dropped)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Post(from.URL, "application/json", nil)
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, errRedirect) {
		t.Fatalf("err = %v, want the redirect refused", err)
	}
	if reached.Load() != 0 {
		t.Fatal("the redirect was followed")
	}
}

// Ensure a Streamable HTTP session that fails (the server no longer
// knows it) is established again.
func TestHTTP_SessionReestablished(t *testing.T) {
	u := startHTTP(t)
	w := newWatch()
	opts := w.opts()
	opts.protocolVersion = "2025-11-25" // a protocol with sessions
	c := MustStart(t, Endpoint{Name: "h", URL: u.ts.URL, Timeout: time.Minute}, opts, w)
	u.forgetSessions()
	u.ts.CloseClientConnections() // the standalone stream, on the old handler
	// A call on the lost session may have reached the server: lost.
	if a := c.Call(context.Background(), "echo", json.RawMessage(`{}`), nil); a.End != EndLost && a.End != EndNotSent {
		t.Fatalf("end = %s (%v)", a.End, a.Cause)
	}
	w.mustUp(t, false)
	w.mustTools(t)
	w.mustUp(t, true)
	textOf(t, c.Call(context.Background(), "echo", json.RawMessage(`{}`), nil))
}

// Ensure calls at once to a Streamable HTTP upstream keep their
// connections between rounds: with net/http's default of two idle
// connections a host, every call beyond two dialed and closed one of its
// own (at 64 agents, half of writerd bench's upstream throughput).
func TestHTTP_KeepsConnections(t *testing.T) {
	const atOnce, rounds = 8, 6
	var (
		dialed  atomic.Int64
		arrived = make(chan struct{}, atOnce)
		release = make(chan struct{})
	)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.Write([]byte("ok"))
	}))
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialed.Add(1)
		}
	}
	ts.Start()
	defer ts.Close()
	var dropped atomic.Int64
	hc, err := newHTTPClient(&Endpoint{URL: ts.URL}, &dropped)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	for range rounds {
		var wg sync.WaitGroup
		for range atOnce {
			wg.Go(func() {
				resp, err := hc.Get(ts.URL)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			})
		}
		for range atOnce { // every call of the round in flight at once
			<-arrived
		}
		for range atOnce {
			release <- struct{}{}
		}
		wg.Wait()
	}
	// Each round needs atOnce connections; the first dials them. A
	// connection not yet back in the pool when the next round starts may
	// be dialed again, hence the slack; two idle a host dialed 6 more a
	// round, 38 in all.
	if n := dialed.Load(); n > 2*atOnce {
		t.Errorf("%d connections dialed for %d rounds of %d calls at once, want them kept (at most %d)", n, rounds, atOnce, 2*atOnce)
	}
}
