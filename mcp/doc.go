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
// A result is rendered as docs/DESIGN.md section 3 describes: on success the
// structured result plus the same JSON as one text block; on failure
// isError with the error envelope as the one text block and no
// structuredContent. _meta carries writerd/request_id, writerd/audit_id and,
// on a replay, writerd/replayed.
//
// Gate is the one check every JSON-RPC frame passes before the SDK sees
// it, on every transport (docs/DESIGN.md section 8): one object in UTF-8 with
// "jsonrpc": "2.0", no duplicate member at any depth, an id that is absent,
// a string or an integer within ±(2^53−1), a string method, no batch. A
// refused frame is answered with a JSON-RPC error of a fixed message (id
// null unless the id could be read), and the session goes on. Answers carry
// the id exactly as the client sent it, and every JSON-RPC error the SDK
// answers with gets the fixed message of its code (publicError): the SDK's
// own messages echo method names, tool names and params.
//
// The tools/call fast path (fast.go): the SDK decodes a tools/call several
// times over and encodes its answer twice, though the Gate has parsed the
// frame already. So a transport answers the common tools/call itself (a
// request naming a pipeline tool, params of only name, arguments and, in
// 2026-07-28, the _meta triple in the shapes the SDK's own client sends,
// in a session the SDK would serve it in), through the very tool handler
// the SDK calls and with the bytes the SDK would write; every other frame,
// and every request whose headers or session the SDK would judge in a way
// the fast path does not copy, goes to the SDK. Options.DisableFastPath
// turns it off; the differential test and FuzzFastPathAgrees hold both
// paths to the same answers.
//
// Stdio is the stdio transport: the Gate in front of the SDK, ids of its
// own towards the SDK, and a drain that answers every request read before
// the client closed stdin.
//
// Logs: the SDK logs values a client sent; the handler given to it keeps
// only fixed messages, the session id and an error's kind. A transport
// error is logged as its kind and a fixed description, never its text.
//
// Caveats, from the SDK (v1.8): it does not recover panics in handlers, so a
// receiving middleware does; a plain Go error from a handler would reach the
// client word for word, so the tool handler never returns one; it accepts
// any logging/setLevel level, so a middleware refuses unknown ones.
package mcp
