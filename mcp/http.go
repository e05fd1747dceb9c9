package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPOptions configure NewHTTPHandler.
type HTTPOptions struct {
	Logger *slog.Logger // required
	// OnRefuse, if set, is told the kind of every frame the gate refuses
	// and every request the SDK turns away, for the transport metrics.
	OnRefuse func(kind string)
}

// NewHTTPHandler serves srv over MCP Streamable HTTP, stateless with JSON
// responses, so that any replica can answer any request and the SDK
// negotiates every protocol version it speaks (2026-07-28 only when
// stateless).
//
// Every body passes the Gate first: a refused frame is answered 400 with the
// refusal as a JSON-RPC error. A request reaches the SDK under an id of
// ours, and its answer goes out under the id exactly as sent; an error the
// SDK answers with gets the fixed message of its code; a non-JSON answer of
// the SDK's (its plain-text refusals quote the Host header, the body's
// read error and the like) is replaced by a JSON-RPC error of a fixed
// message for its status.
//
// Authentication, the Origin check, the body cap and the request id are the
// HTTP edge's (package httpapi), in front of this handler; the caller and
// the request id reach the tool handler through the request's context.
func NewHTTPHandler(srv *sdk.Server, opts HTTPOptions) http.Handler {
	if opts.OnRefuse == nil {
		opts.OnRefuse = func(string) {}
	}
	h := &httpHandler{opts: opts, fast: fastPathOf(srv)}
	h.sdk = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{
		Stateless:    true,
		JSONResponse: true,
		Logger:       slog.New(sdkLog{opts.Logger.Handler()}),
		// The edge caps the body before anything reads it.
		MaxRequestBodyBytes: -1,
	})
	return h
}

type httpHandler struct {
	sdk  http.Handler
	opts HTTPOptions
	fast *fastPath // nil: every request is the SDK's
}

// sdkRequestID is the id every request reaches the SDK under: one HTTP
// request carries one message.
const sdkRequestID = "1"

func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var id jsontext.Value
	if r.Method == http.MethodPost {
		body, err := io.ReadAll(r.Body)
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			h.refuse(w, http.StatusRequestEntityTooLarge, &refuseTooLarge)
			return
		case err != nil:
			h.refuse(w, http.StatusBadRequest, &Refusal{Code: CodeInvalidRequest, Reason: "read", Message: "Invalid request: the body could not be read."})
			return
		}
		m, refusal := Gate(body)
		if refusal != nil {
			h.refuse(w, http.StatusBadRequest, refusal)
			return
		}
		id = m.ID
		if h.fast != nil {
			if req, newProto, ok := h.fast.httpCall(r, m); ok {
				var add additions
				if newProto {
					add = addServerInfo | addResultType
				}
				writeFrame(w, http.StatusOK, h.fast.answer(r.Context(), id, req, add))
				return
			}
		}
		if m.Kind == KindRequest && Unoffered[m.Method] {
			// Before the SDK, which would open a stream for
			// subscriptions/listen.
			writeFrame(w, http.StatusNotFound, errorFrame(id, jsonrpc.CodeMethodNotFound, "Method not found."))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(sdkFrame(m)))
		r.ContentLength = -1
	}
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	h.sdk.ServeHTTP(rec, r)
	h.answer(w, rec, id)
}

// sdkFrame is the message as the SDK gets it: the parts the gate read,
// under the SDK's id for a request.
func sdkFrame(m *Message) []byte {
	b := []byte(`{"jsonrpc":"2.0"`)
	switch m.Kind {
	case KindRequest:
		b = append(b, `,"id":`+sdkRequestID...)
	case KindResponse:
		b = append(b, `,"id":`...)
		b = append(b, m.ID...)
	}
	if m.Kind != KindResponse {
		method, _ := json.Marshal(m.Method)
		b = append(b, `,"method":`...)
		b = append(b, method...)
	}
	for _, part := range []struct {
		name  string
		value jsontext.Value
	}{{"params", m.Params}, {"result", m.Result}, {"error", m.Error}} {
		if part.value != nil {
			b = append(b, `,"`+part.name+`":`...)
			b = append(b, part.value...)
		}
	}
	return append(b, '}')
}

// answer writes what the SDK answered: a JSON-RPC response, whatever its
// status, under the id as sent and with a fixed error message; a
// notification's 202 as it is; any other answer (the SDK's plain-text
// refusals) as a JSON-RPC error of a fixed message for its status.
func (h *httpHandler) answer(w http.ResponseWriter, rec *recorder, id jsontext.Value) {
	ct := rec.header.Get("Content-Type")
	if strings.HasPrefix(ct, "application/json") {
		if frame, ok := rewriteResponse(rec.body.Bytes(), id); ok {
			writeFrame(w, rec.status, frame)
			return
		}
		h.opts.Logger.Error("transport error", "transport", "http", "kind", "sdk_answer",
			"description", "The SDK answered with a body that is not one JSON-RPC response.")
		h.opts.OnRefuse("sdk_answer")
		writeFrame(w, http.StatusInternalServerError, errorFrame(id, jsonrpc.CodeInternalError, "Internal error."))
		return
	}
	if rec.status == http.StatusAccepted || rec.status == http.StatusNoContent {
		w.WriteHeader(rec.status)
		return
	}
	kind, message := sdkRefusal(rec.status)
	h.opts.Logger.Warn("transport error", "transport", "http", "kind", kind, "description", message)
	h.opts.OnRefuse(kind)
	if allow := rec.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	writeFrame(w, rec.status, errorFrame(id, jsonrpc.CodeInvalidRequest, message))
}

// sdkRefusal names what the SDK refused by the status it chose, with a
// fixed sentence: its own text quotes the request.
func sdkRefusal(status int) (kind, message string) {
	switch status {
	case http.StatusMethodNotAllowed:
		return "method_not_allowed", "Invalid request: send JSON-RPC messages with POST; this server keeps no sessions or streams."
	case http.StatusUnsupportedMediaType:
		return "content_type", "Invalid request: the body must be sent as Content-Type: application/json."
	case http.StatusForbidden:
		return "forbidden", "Forbidden: the request's Host is not one this server answers on."
	case http.StatusRequestEntityTooLarge:
		return "too_large", refuseTooLarge.Message
	case http.StatusBadRequest:
		return "bad_request", "Invalid request: the server cannot serve it (an unknown method, or headers that do not fit MCP Streamable HTTP: Accept must name application/json and text/event-stream, MCP-Protocol-Version one this server speaks)."
	}
	return "other", "The request could not be served."
}

// rewriteResponse puts the id as sent in the SDK's response and replaces
// an error's message with the fixed one of its code.
func rewriteResponse(body []byte, id jsontext.Value) ([]byte, bool) {
	msg, err := jsonrpc.DecodeMessage(body)
	resp, ok := msg.(*jsonrpc.Response)
	if err != nil || !ok {
		return nil, false
	}
	return responseFrame(id, resp), true
}

func (h *httpHandler) refuse(w http.ResponseWriter, status int, r *Refusal) {
	h.opts.Logger.Warn("transport error", "transport", "http", "kind", r.Reason, "description", r.Message)
	h.opts.OnRefuse(r.Reason)
	writeFrame(w, status, r.Answer())
}

func writeFrame(w http.ResponseWriter, status int, frame []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(frame)
}

// recorder keeps the SDK's answer, to be rewritten before it is sent. With
// JSON responses the SDK answers once, with one body; it streams nothing.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

func (r *recorder) Flush() {}
