package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/writerd/writerd/pipeline"
)

// callTool serves POST /v1/tools/{tool}: the tool's arguments as the body,
// without idempotency_key, which comes in the Idempotency-Key header
// (draft-ietf-httpapi-idempotency-key-header). The key is put back into
// the arguments and the call goes through Pipeline.Call like every other:
// the same stages, the same strict parse of the same bytes.
//
// The answer is the tool's result (201 for a tool that only adds, 200
// otherwise), with Idempotent-Replayed: true on a replay; or the error
// envelope with the catalogue's status: 400 for a write without a key, 422
// for a key reused with another request, 409 while it is in use.
func (s *server) callTool(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("tool")
	body, err := io.ReadAll(r.Body)
	var big *http.MaxBytesError
	switch {
	case errors.As(err, &big):
		s.refuse(w, r, "too_large", tooLarge(big.Limit))
		return
	case err != nil:
		s.refuse(w, r, "read", pipeline.Errorf(pipeline.InvalidInput, "The request body could not be read; send the call again."))
		return
	}
	keys := r.Header.Values("Idempotency-Key")
	if len(keys) > 1 {
		s.fail(w, r, pipeline.Errorf(pipeline.InvalidInput, "Send one Idempotency-Key header, not %d.", len(keys)))
		return
	}
	t := s.cfg.Pipeline.Tool(name)
	writes := t != nil && !t.ReadOnly
	args := body
	if len(bytes.TrimSpace(args)) == 0 {
		args = []byte("{}") // no arguments, as MCP allows
	}
	if writes && len(keys) == 1 {
		args = withKey(args, keys[0])
	}
	caller, _ := s.cfg.Caller(r.Context())
	caller.Transport = pipeline.TransportAPI
	res := s.cfg.Pipeline.Call(r.Context(), caller, name, args)

	if res.Err != nil {
		if writes && len(keys) == 0 && res.Err.Code == pipeline.InvalidInput {
			// The parse names the member the arguments lack; over this API
			// the key is a header.
			e := *res.Err
			e.Message = "A write needs an Idempotency-Key header: 8 to 128 characters of A-Z, a-z, 0-9 and ._:- chosen by the caller; send the call with one."
			res.Err = &e
		}
		res.WriteError(w)
		return
	}
	status := http.StatusOK
	if t.Additive() {
		status = http.StatusCreated
	}
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if res.AuditID != "" {
		w.Header().Set("Writerd-Audit-Id", res.AuditID)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(res.Output)
}

// withKey returns the arguments object with "idempotency_key" as its first
// member. Anything but an object is returned as it is, for the strict
// parse to refuse; a body that names the key itself gets a duplicate
// member, which the parse refuses too.
func withKey(args []byte, key string) []byte {
	trimmed := bytes.TrimLeft(args, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return args
	}
	k, _ := json.Marshal(key)
	rest := trimmed[1:]
	b := append([]byte(`{"idempotency_key":`), k...)
	if r := bytes.TrimLeft(rest, " \t\r\n"); len(r) == 0 || r[0] != '}' {
		b = append(b, ',')
	}
	return append(b, rest...)
}
