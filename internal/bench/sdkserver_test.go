package bench

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Ensure the bare SDK server answers create_project over each of bench's
// MCP clients, refuses a name taken, and once closed has its port closed.
func TestBench_SDKServer(t *testing.T) {
	s, err := startSDKServer(t.TempDir(), "test")
	if err != nil {
		t.Fatal(err)
	}
	w := newWorkload("create_project", 1)
	for i, client := range []string{ClientBench, ClientSDK} {
		b := &bench{agents: 1, client: client, version: "test"}
		tr := b.transport()
		mc, err := b.dialMCP(t.Context(), []string{s.url}, "", tr)
		if err != nil {
			s.close()
			t.Fatal(err)
		}
		if code := w.write(t.Context(), mc, 0, int64(i)); code != "" {
			t.Errorf("%s client: the first create_project failed: %s", client, code)
		}
		if code := w.write(t.Context(), mc, 0, int64(i)); code != "CONFLICT" {
			t.Errorf("%s client: create_project of a name taken: %q, want CONFLICT", client, code)
		}
		mc.close()
		tr.CloseIdleConnections()
	}
	if err := s.close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if s.store.commits.Load() < 4 {
		t.Errorf("%d commits, want one a call", s.store.commits.Load())
	}
	if conn, err := net.DialTimeout("tcp", strings.TrimPrefix(s.url, "http://"), time.Second); err == nil {
		conn.Close()
		t.Errorf("the SDK server's port %s is still open after close", s.url)
	}
}

// Ensure bench's own MCP client sends what the SDK's client sends at
// protocol 2026-07-28, request for request: the same methods, paths,
// headers and bodies, but the JSON-RPC ids; so that --client bench
// measures the server doing the same work.
func TestBench_ClientAsSDK(t *testing.T) {
	s, err := startSDKServer(t.TempDir(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	ids := regexp.MustCompile(`^\{"jsonrpc":"2.0","id":[0-9]+,`)
	var (
		mu   sync.Mutex
		seen []string
	)
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var h strings.Builder
		fmt.Fprintf(&h, "%s %s\n", r.Method, r.URL)
		for _, k := range slices.Sorted(maps.Keys(r.Header)) {
			if k != "User-Agent" && k != "Accept-Encoding" && k != "Content-Length" {
				fmt.Fprintf(&h, "%s: %q\n", k, r.Header[k])
			}
		}
		mu.Lock()
		seen = append(seen, h.String()+ids.ReplaceAllString(string(body), `{"jsonrpc":"2.0","id":ID,`))
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	defer rec.Close()
	w := newWorkload("create_project", 1)
	sent := func(client string) []string {
		mu.Lock()
		seen = nil
		mu.Unlock()
		b := &bench{agents: 1, client: client, version: "test"}
		tr := b.transport()
		defer tr.CloseIdleConnections()
		mc, err := b.dialMCP(t.Context(), []string{rec.URL}, "wrd_token", tr)
		if err != nil {
			t.Fatal(err)
		}
		w.write(t.Context(), mc, 0, 0)
		mc.close()
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
	want, got := sent(ClientSDK), sent(ClientBench)
	if len(want) < 2 {
		t.Fatalf("the SDK's client sent %d requests, want at least server/discover and tools/call:\n%s", len(want), strings.Join(want, "\n\n"))
	}
	if !slices.Equal(got, want) {
		t.Errorf("bench's client sent:\n%s\n\nthe SDK's client sent:\n%s", strings.Join(got, "\n\n"), strings.Join(want, "\n\n"))
	}
}
