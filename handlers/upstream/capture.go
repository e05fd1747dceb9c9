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
// the call, as it arrived, kept in the slot before the SDK sees it (a
// JSON answer to tools/call is then handed to the SDK as a stub: see
// stubbed).
type captureTransport struct {
	next    http.RoundTripper
	dropped *atomic.Int64
}

func (t *captureTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || req.Body == nil || req.Body == http.NoBody {
		return t.next.RoundTrip(req)
	}
	body, out, err := requestBody(req)
	if err != nil {
		return nil, err
	}
	msg, err := peek(body)
	if err != nil || !msg.request {
		return t.next.RoundTrip(out)
	}
	r := &jsonrpc.Request{ID: msg.id, Method: msg.method}
	if !r.IsCall() && r.Method == "notifications/cancelled" {
		out.Body.Close() // never sent; a RoundTripper closes the body
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
	if ct == "text/event-stream" {
		resp.Body = &scanBody{ReadCloser: resp.Body, id: r.ID, slot: s}
		return resp, nil
	}
	resp.Body = readJSON(resp.Body, r.ID, s)
	return resp, nil
}

// requestBody returns the bytes of req's body and the request to send: req
// itself when its body can be had again (the SDK's requests are made from
// bytes, which net/http can read twice), else a clone with the bytes read.
func requestBody(req *http.Request) ([]byte, *http.Request, error) {
	if req.GetBody != nil && req.ContentLength > 0 && req.ContentLength <= maxMessage {
		rc, err := req.GetBody()
		if err == nil {
			body := make([]byte, req.ContentLength)
			_, err = io.ReadFull(rc, body)
			rc.Close()
			if err == nil {
				return body, req, nil
			}
		}
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, nil, err
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return body, out, nil
}

// readJSON reads a JSON answer's body whole, as the SDK would at once,
// and returns the body the SDK is to read: a stub of the call's response
// once it is kept in the slot (see stubbed), else the bytes
// as they came, followed by the read's error if there was one. A body
// over the bound is not kept: the slot is told, and the SDK reads it all.
func readJSON(body io.ReadCloser, id jsonrpc.ID, s *slot) io.ReadCloser {
	data, err := io.ReadAll(io.LimitReader(body, maxMessage+1))
	switch {
	case err != nil:
		body.Close()
		return io.NopCloser(io.MultiReader(bytes.NewReader(data), errReader{err}))
	case len(data) > maxMessage:
		s.mu.Lock()
		s.huge = true
		s.mu.Unlock()
		return struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(data), body), body}
	}
	body.Close()
	if m, err := peek(data); err == nil && !m.request && m.id == id {
		resp := m.response()
		s.keep(resp)
		if s.method == "tools/call" {
			if out, err := jsonrpc.EncodeMessage(stubbed(resp)); err == nil {
				return io.NopCloser(bytes.NewReader(out))
			}
		}
	}
	return io.NopCloser(bytes.NewReader(data))
}

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// maxMessage bounds one message read for a slot, as the SDK bounds one
// server-sent event (mcp.DefaultMaxEventSize is its default).
const maxMessage = maxLine

// scanBody reads an event stream's body for the response to one call, as
// the SDK reads it, passing every byte on.
type scanBody struct {
	io.ReadCloser
	id   jsonrpc.ID
	slot *slot

	done bool   // the response was found, or the body overflowed
	line []byte // the line being read
	data []byte // the event's data
}

func (b *scanBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if !b.done {
		b.feed(p[:n])
	}
	return n, err
}

func (b *scanBody) feed(p []byte) {
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
	b.slot.keep(m.response())
	b.done = true
}
