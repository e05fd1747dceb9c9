package upstream

import (
	"bytes"
	"io"
	"mime"
	"net/http"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// captureTransport is the wire of a Streamable HTTP upstream (see wire),
// read in the http.Client under the SDK's connection: a POST that holds a
// notifications/cancelled is answered 202 without being sent; a POST
// that holds a call bound to a slot has its answer's body read as the
// SDK reads it (one JSON message, or an SSE stream), and the response to
// the call, as it arrived, kept in the slot before the SDK sees it.
type captureTransport struct {
	next    http.RoundTripper
	dropped *atomic.Int64
}

func (t *captureTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || req.Body == nil || req.Body == http.NoBody {
		return t.next.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	msg, err := peek(body)
	if err != nil || !msg.request {
		return t.next.RoundTrip(out)
	}
	r := &jsonrpc.Request{ID: msg.id, Method: msg.method}
	if !r.IsCall() && r.Method == "notifications/cancelled" {
		t.dropped.Add(1)
		return &http.Response{
			Status: "202 Accepted", StatusCode: http.StatusAccepted,
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Body: http.NoBody, Request: req,
		}, nil
	}
	s := slotFrom(req.Context())
	if s == nil || !s.bind(r) {
		return t.next.RoundTrip(out)
	}
	resp, err := t.next.RoundTrip(out)
	if err != nil {
		return resp, err
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	resp.Body = &scanBody{ReadCloser: resp.Body, sse: ct == "text/event-stream", id: r.ID, slot: s}
	return resp, nil
}

// maxMessage bounds one message read for a slot, as the SDK bounds one
// server-sent event (mcp.DefaultMaxEventSize is its default).
const maxMessage = maxLine

// scanBody reads an answer's body for the response to one call.
type scanBody struct {
	io.ReadCloser
	sse  bool
	id   jsonrpc.ID
	slot *slot

	done bool   // the response was found, or the body overflowed
	line []byte // SSE: the line being read; JSON: the whole body
	data []byte // SSE: the event's data
}

func (b *scanBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if !b.done {
		b.feed(p[:n])
		if err == io.EOF && !b.sse {
			b.found(b.line)
		}
	}
	return n, err
}

func (b *scanBody) feed(p []byte) {
	if !b.sse {
		b.grow(&b.line, p)
		return
	}
	for len(p) > 0 && !b.done {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			b.grow(&b.line, p)
			return
		}
		b.grow(&b.line, p[:i])
		p = p[i+1:]
		line := bytes.TrimSuffix(b.line, []byte("\r"))
		switch {
		case len(line) == 0: // the event ends
			if len(b.data) > 0 {
				b.found(b.data)
			}
			b.data = b.data[:0]
		case bytes.HasPrefix(line, []byte("data:")):
			d := bytes.TrimPrefix(line[len("data:"):], []byte(" "))
			if len(b.data) > 0 {
				b.grow(&b.data, []byte("\n"))
			}
			b.grow(&b.data, d)
		}
		b.line = b.line[:0]
	}
}

// grow appends p to *buf, unless that passes the bound: then the answer
// is too large to read, which the slot is told.
func (b *scanBody) grow(buf *[]byte, p []byte) {
	if b.done {
		return
	}
	if len(*buf)+len(p) > maxMessage {
		b.done = true
		b.slot.mu.Lock()
		b.slot.huge = true
		b.slot.mu.Unlock()
		return
	}
	*buf = append(*buf, p...)
}

// found keeps msg in the slot if it is the call's response.
func (b *scanBody) found(msg []byte) {
	if b.done {
		return
	}
	m, err := peek(msg)
	if err != nil || m.request || m.id != b.id {
		return
	}
	resp := &jsonrpc.Response{ID: m.id, Result: m.result}
	if m.code != nil {
		// Its code alone: the upstream's message is never kept.
		resp.Error, resp.Result = &jsonrpc.Error{Code: *m.code}, nil
	}
	b.slot.keep(resp)
	b.done = true
}
