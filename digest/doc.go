// Package digest holds the canonical JSON and the request digest of writerd.
//
// A request digest identifies what a write tool call asks for, independently
// of how the client happened to spell it. Computing it is stage 4 of the write
// pipeline (docs/DESIGN.md section 1): it runs once the strict parse (stage 3) has
// accepted the arguments, before the key lookup (stage 5) and the
// confirmation check (stage 6). The key lookup compares it with the digest recorded under the same
// key, so that a retry of the same request replays the first answer while a
// key reused for a different request is refused with IDEMPOTENCY_KEY_REUSED.
// The same digest is stored in the idempotency record and in the audit event.
//
// The digest is the lowercase hex encoding of
//
//	SHA-256( "writerd-request-v1" 0x00 tool-name 0x00 JCS(arguments without idempotency_key and confirm) )
//
// where JCS is the JSON Canonicalization Scheme of RFC 8785 applied to the
// arguments object after its top-level "idempotency_key" and "confirm"
// members are removed (members of those names nested deeper are part of the
// request and stay). confirm only gates execution: an agent that resends a
// confirmed delete without it gets the replay, and so learns that the
// delete happened.
// Two calls whose arguments differ only in member order, whitespace or string
// escapes therefore share a digest; any other difference changes it.
//
// A call's arguments are canonicalized once, by [ParseArgs] or
// [CanonicalArgs], into [Args]: the pipeline decodes the call's input from
// [Args.Bytes], and [Request] hashes the same bytes without their two
// top-level members, without canonicalizing again. [ParseArgs] takes a
// [Visitor] that sees every token before it is written, so that the strict
// parse's own rules and its schema check run in the same pass.
//
// Canonicalization is this package's own single-pass parser (canon.go):
// strict RFC 8259 JSON, UTF-8 checked, escapes decoded and written back in
// their minimal form, numbers written as ECMAScript writes their double,
// and each object's members sorted by the UTF-16 code units of their names
// once the object closes. Tests hold it to exactly the bytes and the
// refusals of [jsontext.Value.Canonicalize] of
// github.com/go-json-experiment/json, which it replaced for speed (with
// the overflow check it read each text twice, and a call was canonicalized
// three times), except that it refuses numbers beyond the double range, which jsontext
// saturates to ±1.7976931348623157e+308. Refusals are an [*Error] that
// names the reason (ErrSyntax, ErrDuplicate, …), the byte offset and the
// JSON Pointer.
//
// Caveats:
//
//   - JCS reads every number as an IEEE-754 double and formats it as
//     ECMAScript 6 Number.prototype.toString does: 1e21 becomes 1e+21, 4.50
//     becomes 4.5 and -0 becomes 0. Numbers that round to the same double
//     share a digest; integers beyond ±(2^53−1) lose precision silently, e.g.
//     9007199254740993 canonicalizes as 9007199254740992.
//   - The package itself refuses what no canonical form can hold: invalid
//     UTF-8, lone surrogate escapes and duplicate member names (ErrSurrogate,
//     ErrDuplicate), and numbers beyond the double range; it returns an
//     error rather than panicking on any input that is not valid JSON (and,
//     for [CanonicalArgs], not an object). It does not refuse integers
//     beyond ±(2^53−1): the strict parse's Visitor does, and the strict
//     parse is the place that decides what a request may contain.
//   - The functions are pure: they read only their arguments and never modify them.
package digest
