package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
)

// Below the SDK: what the switches do to the bytes of an answer, which
// the SDK's own encoding cannot: a duplicate member (the SDK marshals
// Go values, which have none), and, over HTTP, a connection lost after
// the tool executed (the SDK writes answers on the request's stream, out
// of the handler's reach). The SDK writes each message with one Write
// (a line on stdio, an event or a JSON body over HTTP), so a marker is
// never split.

// rewriter replaces the duplicate marker in what it writes.
type rewriter struct{ w io.Writer }

func (r *rewriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(dupMarker)) {
		q := bytes.ReplaceAll(p, []byte(dupMarker), []byte(dupWith))
		if _, err := r.w.Write(q); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return r.w.Write(p)
}

type nopClose struct{ io.Writer }

func (nopClose) Close() error { return nil }

// wrapHTTP rewrites the duplicate marker in every response, and closes
// the TCP connection of a response carrying the drop marker instead of
// writing it.
func wrapHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&dropWriter{ResponseWriter: w}, r)
	})
}

type dropWriter struct {
	http.ResponseWriter
	dropped bool
}

var errDropped = errors.New("connection dropped on purpose")

func (d *dropWriter) Write(p []byte) (int, error) {
	if d.dropped {
		return 0, errDropped
	}
	if bytes.Contains(p, []byte(dropMarker)) {
		d.dropped = true
		if conn, _, err := http.NewResponseController(d.ResponseWriter).Hijack(); err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0) // a reset, not a clean end of the body
			}
			conn.Close()
		}
		return 0, errDropped
	}
	if bytes.Contains(p, []byte(dupMarker)) {
		if _, err := d.ResponseWriter.Write(bytes.ReplaceAll(p, []byte(dupMarker), []byte(dupWith))); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return d.ResponseWriter.Write(p)
}

func (d *dropWriter) Flush() {
	if d.dropped {
		return
	}
	http.NewResponseController(d.ResponseWriter).Flush()
}

func (d *dropWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(d.ResponseWriter).Hijack()
}

func (d *dropWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
