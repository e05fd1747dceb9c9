// Package pipeline is the one path from a tool call to a handler: the stages
// of docs/DESIGN.md section 1, the tool registry, the error type with its
// catalogue of codes, and the outcome of every call.
//
// Every transport (MCP over stdio or HTTP, the HTTP API) and every Go
// program that embeds writerd calls Pipeline.Call with a tool name and the
// raw argument bytes. Call reads top to bottom:
//
//	authorize    the caller's scopes allow the tool          PERMISSION_DENIED
//	parse        limits, then the strict schema parse        INPUT_TOO_LARGE, INVALID_INPUT
//	digest       the canonical request digest (package digest)
//	key lookup   a live record answers: replay or conflict   IDEMPOTENCY_KEY_*
//	confirm      destructive tools need "confirm": true      CONFIRMATION_REQUIRED + preview,
//	             (a call that would be refused answers that refusal instead)
//	write        under the key's lock, the key looked up again, the handler,
//	             the audit event and the record, in one transaction
//
// The strict parse enforces the same JSON Schema that tools/list
// advertises, generated from the tool's Go input type by invopop/jsonschema
// and compiled by validate.go into a checker of writerd's own, which
// refuses to compile any keyword it does not enforce; a differential fuzz
// test holds it to santhosh-tekuri/jsonschema's verdicts and codes. One
// pass over the arguments (digest.ParseArgs, with parse.go's Visitor)
// checks them as JSON, enforces what a schema cannot express (duplicate
// members, invalid UTF-8, lone surrogates, nesting depth, integers beyond
// ±(2^53−1), trailing data), canonicalizes them for the digest and the
// decoding, and lays them out as the tape the schema check walks.
// Messages name the argument by JSON Pointer and the rule it broke, never a
// value the caller sent; a pointer stops before any member name the schema
// does not define, since such a name is the caller's text too. The
// reference validator is linked into the tests alone.
//
// Writes commit through one function, Pipeline.update, which hands each
// to Storage.Update: the backend may commit it in a group with others
// (group commit, in storage/internal), and measures its commits. A successful write commits the handler's change, its
// idempotency record and its audit event in one transaction, with the
// call's time taken inside it, so that audit times follow commit order. A
// failed write rolls the handler's change back and commits a failure
// receipt and one audit event in a second transaction, after looking the
// key up again (a commit reported as failed may have landed, and is then
// answered from its record); if that fails too, the client gets the fixed
// INTERNAL error and the key stays unused. Call never panics and never
// returns nil: a panic inside a write transaction rolls it back and is
// recorded as a failure; any other becomes INTERNAL.
//
// The storage seam is typed. A Pipeline[D] runs tools whose handlers work
// on the domain store D (handlers.Store for the built-in tools), on a
// Storage[D] whose every transaction, a Tx[D], hands out the key store,
// the audit log and the domain store bound to it: a write's change, its
// record and its event cannot come from different backends, and a
// backend whose domain store is not the tools' does not compile. A
// backend opens its stores as a Store[D]: the Storage, and readiness, the
// commits, its physical checks and Close, which a daemon needs around it.
// Keys states the claim rule a store shared by several processes keeps;
// Audit is auditlog's read seam and the append. Check verifies the
// pipeline's invariants through the interfaces, on any backend, and
// package storetest is the conformance suite every backend passes. The
// package imports no database; storage/bolt is the bbolt backend.
// Transports see a pipeline as a Service, whatever its D.
//
// Errors have two faces: *Error's Code, Message and Retry reach the client;
// its Err is the private cause, for logs. Public turns any other error into
// INTERNAL with the fixed message "Internal error.".
//
// Caveats: handlers run inside the write transaction, so a slow handler holds
// up every other write of a bbolt store; handlers are expected to be quick
// and local. Read tools see a consistent snapshot but take no key and write
// no audit event. The pipeline imports ulid for request and entity ids, in
// addition to the packages docs/DESIGN.md section 2 lists.
package pipeline
