package httpapi_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/pipeline"
)

// dial opens a raw TCP connection to the server, with a deadline that
// only keeps a broken test from hanging.
func (s *server) dial() (net.Conn, *bufio.Reader) {
	s.t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReader(c)
}

// Ensure a request with both Content-Length and Transfer-Encoding is
// answered and its connection closed (RFC 9112 section 6.1): the bytes a
// front proxy framing by Content-Length counts as its body, which
// net/http frames by the chunks as a second request, are never served.
func TestEdge_ClosesOnContentLengthAndTransferEncoding(t *testing.T) {
	s := MustServe(t, 0, nil)
	host := strings.TrimPrefix(s.url, "http://")
	smuggled := "POST /v1/tools/create_project HTTP/1.1\r\nHost: " + host + "\r\nIdempotency-Key: k-smuggled1\r\n" +
		"Content-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"name\":\"a\"}"
	body := "0\r\n\r\n" + smuggled
	c, br := s.dial()
	fmt.Fprintf(c, "POST /v1/tools/list_projects HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s", host, len(body), body)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !resp.Close {
		t.Errorf("the answer to a request with Content-Length and Transfer-Encoding keeps the connection (Connection %q)", resp.Header.Get("Connection"))
	}
	if second, err := http.ReadResponse(br, nil); err == nil {
		t.Fatalf("the bytes after the chunked body were served as a request: %d", second.StatusCode)
	}
	if n := s.projects(); n != 0 {
		t.Fatalf("the smuggled request wrote: %d projects", n)
	}
}

// Ensure a declared Content-Length over the limit is answered 413 at
// once, before any body is read (INPUT_TOO_LARGE over the direct API, the
// JSON-RPC refusal on /mcp): a client that asked for 100 Continue gets no
// 100 and never sends the body; the connection is closed.
func TestEdge_RefusesDeclaredTooLargeAtOnce(t *testing.T) {
	s := MustServe(t, 4096, nil)
	host := strings.TrimPrefix(s.url, "http://")
	for _, path := range []string{"/v1/tools/create_project", "/mcp"} {
		t.Run(path, func(t *testing.T) {
			c, br := s.dial()
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nIdempotency-Key: k-toolarge1\r\n"+
				"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n", path, host, 4097)
			// No body is sent: the answer must come without it.
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(line, "HTTP/1.1 413 ") {
				t.Fatalf("first line %q, want 413 before any 100 Continue", line)
			}
			resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(strings.NewReader(line), br)), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !resp.Close {
				t.Error("the connection is kept open while the client may be sending the body")
			}
			if path == "/mcp" { // the JSON-RPC refusal of a frame too large, as for a read past the cap
				if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "the frame is too large") {
					t.Errorf("/mcp: %d %s, want 413 and the JSON-RPC refusal", resp.StatusCode, b)
				}
				return
			}
			if msg := mustEnvelope(t, reply{resp.StatusCode, resp.Header, string(b)}, pipeline.InputTooLarge); !strings.Contains(msg, "4096") {
				t.Errorf("message %q: want the limit named", msg)
			}
		})
	}
	// At the limit the body is read and the call runs.
	r := s.Do("POST", "/v1/tools/create_project", `{"name":"`+strings.Repeat("a", 10)+`"}`, "Idempotency-Key", "k-atlimit01")
	if r.status != http.StatusCreated {
		t.Fatalf("a small body: %d %s", r.status, r.body)
	}
	if s.projects() != 1 {
		t.Fatal("want the one project")
	}
}
