// Package mcp serves the pipeline's tools over the Model Context Protocol,
// on the official Go SDK.
//
// tools/list is built from the pipeline's registry: each tool's input and
// output schemas are the very bytes the strict parse enforces, and its
// annotations say truthfully whether it reads, writes or deletes. Every
// tools/call hands the raw argument bytes to pipeline.Call; the SDK's typed
// tool path is not used, because it decodes arguments leniently (duplicate
// members, last wins) before any check of ours could run.
//
// A result is rendered as DESIGN.md section 3 describes: on success the
// structured result plus the same JSON as one text block; on failure
// isError with the error envelope as the one text block and no
// structuredContent. _meta carries writerd/request_id, writerd/audit_id and,
// on a replay, writerd/replayed.
//
// Stdio is the stdio transport: the SDK's, behind a filter that answers a
// frame the SDK could not decode with a JSON-RPC error instead of letting
// the SDK end the session.
//
// Caveats, from the SDK (v1.8): it does not recover panics in handlers, so a
// receiving middleware does; a plain Go error from a handler would reach the
// client word for word, so the tool handler never returns one. A frame that
// is valid JSON but not a JSON-RPC message still ends the session.
package mcp
