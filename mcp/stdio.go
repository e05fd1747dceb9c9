package mcp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxFrameDepth is the deepest nesting the SDK decodes in a frame; a deeper
// one would end its session.
const maxFrameDepth = 1000

// Stdio returns the transport of writerd serve --stdio: newline-delimited
// JSON-RPC on in and out, as the SDK's own StdioTransport, with one
// difference. The SDK ends the session, and so the daemon, at the first
// frame it cannot decode; Stdio answers a frame that is not JSON, nests
// deeper than the SDK decodes, or is longer than maxFrame bytes with a
// JSON-RPC error (id null, as for any unparsable request) and reads on. Such
// a frame never reaches a handler. Each error is logged as its kind, never
// with the frame's bytes.
func Stdio(in io.ReadCloser, out io.Writer, maxFrame int, log *slog.Logger) sdk.Transport {
	w := &frameWriter{w: out}
	return &sdk.IOTransport{
		Reader:        &frameFilter{r: bufio.NewReader(in), in: in, max: maxFrame, w: w, log: log},
		Writer:        w,
		MaxLineLength: maxFrame + 2, // a passed frame and its line end
	}
}

// frameWriter serialises whole frames: the SDK writes each frame with one
// Write, and so does frameFilter, so frames never interleave.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w.Write(p)
}

// Close leaves out open: stdout belongs to the process.
func (f *frameWriter) Close() error { return nil }

// frameFilter passes on the frames the SDK can decode, a line at a time,
// and answers the others itself.
type frameFilter struct {
	r       *bufio.Reader
	in      io.Closer
	max     int
	w       *frameWriter
	log     *slog.Logger
	pending []byte
}

func (f *frameFilter) Close() error { return f.in.Close() }

func (f *frameFilter) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		line, tooLong, err := f.line()
		switch {
		case tooLong:
			f.refuse(-32600, "Invalid request: the frame is too large.", "frame_too_large")
		case len(bytes.TrimSpace(line)) == 0:
		case !json.Valid(line):
			f.refuse(-32700, "Parse error: the frame is not one valid JSON value.", "malformed_frame")
		case depth(line) > maxFrameDepth:
			f.refuse(-32600, "Invalid request: the frame is nested too deeply.", "frame_too_deep")
		default:
			f.pending = append(line, '\n')
		}
		if err != nil && len(f.pending) == 0 {
			return 0, err
		}
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

// line reads the next line without its end. A line longer than max is
// read to its end and dropped: tooLong reports it. err is io.EOF after the
// last line.
func (f *frameFilter) line() (line []byte, tooLong bool, err error) {
	for {
		chunk, err := f.r.ReadSlice('\n')
		if !tooLong {
			line = append(line, chunk...)
			if len(line) > f.max+2 {
				line, tooLong = nil, true
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), tooLong, err
	}
}

func (f *frameFilter) refuse(code int, message, kind string) {
	f.log.Warn("transport error", "transport", "stdio", "kind", kind)
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": code, "message": message},
	})
	f.w.Write(append(b, '\n'))
}

// depth returns the deepest nesting of objects and arrays in valid JSON.
func depth(b []byte) int {
	d, deepest, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			d++
			deepest = max(deepest, d)
		case c == '}' || c == ']':
			d--
		}
	}
	return deepest
}
