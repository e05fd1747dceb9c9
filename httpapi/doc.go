// Package httpapi is writerd's HTTP server: MCP Streamable HTTP at /mcp,
// the direct API at POST /v1/tools/{tool}, Prometheus metrics at /metrics,
// and /healthz and /readyz, behind one edge.
//
// The direct API follows draft-ietf-httpapi-idempotency-key-header: the body
// is the tool's arguments without idempotency_key, the key is the
// Idempotency-Key header, and a replay is marked Idempotent-Replayed: true.
// The key is put back into the arguments and the call goes through
// pipeline.Call, stage 1 included, like a call over MCP: there is one path
// to a handler. Errors are the same envelope as over MCP, with the status of
// the code's catalogue entry.
//
// The edge (server.ServeHTTP) is the one place where every request is
// checked, counted and logged: a panic below it is a logged 500 with a
// fixed body; a request id is adopted from X-Request-Id if well formed,
// else made, and answered in X-Request-Id; the Host must be loopback on a
// loopback listener (DNS rebinding); a cross-origin browser request is
// refused (net/http's CrossOriginProtection: the SDK checks no Origin);
// a chunked request's connection is closed after its answer (RFC 9112
// section 6.1; net/http drops a Content-Length beside the chunks, so a
// smuggling attempt cannot be told from a plain chunked body); a declared
// Content-Length over MaxBody is refused 413 before the body is read (no
// 100 Continue); any other body is capped before anything reads it. Authentication guards /mcp
// and /v1 only: /metrics, /healthz and /readyz answer without a token, so
// bind to loopback, or keep them behind the network's own controls.
//
// The online backup is served at GET /v1/admin/backup (PathBackup) for
// the admin scope, and FetchBackup is its client, which writerd backup
// --server uses: route and client in one place, as the audit protocol's
// server and client are in httpapi/auditapi, and the console at /ui/ in
// httpapi/console.
//
// Logs name a request by its route pattern, never the path or anything
// else a client sent.
package httpapi
