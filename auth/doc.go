// Package auth authenticates the callers of writerd's HTTP transports by
// bearer token (docs/DESIGN.md section 8), before a request reaches MCP or
// the direct API and so before stage 1 of the pipeline, which then checks
// the caller's scopes against the tool.
//
// A token is Prefix ("wrd_") and 32 random bytes from crypto/rand in
// unpadded base64url: 47 characters that secret scanners can find by their
// prefix and form. It is shown once, when it is made (Create, or writerd
// token new), and kept nowhere: the tokens file holds, for each token, its
// name (the principal its calls act as: idempotency keys are scoped by it
// and audit events record it), its scopes (at least one of read, write,
// audit and admin, and any named scopes: an upstream's own, which its
// tools need besides read or write, and which Verify returns as the
// caller's Grants), the SHA-256 of the token in hex, and its creation
// time:
//
//	{
//	  "version": 1,
//	  "tokens": [
//	    {
//	      "name": "ci-agent",
//	      "scopes": ["read", "write"],
//	      "sha256": "<64 lowercase hex digits>",
//	      "created_at": "2026-03-01T12:00:00Z"
//	    }
//	  ]
//	}
//
// The file is read strictly: a duplicate or unknown member, another
// version, an invalid name or scope (a scope named twice, or none of
// writerd's own), a malformed hash, a missing time, or two tokens whose
// names differ only in case or whose hashes are equal make it invalid as a
// whole. Named scopes are listed in "scopes" after writerd's own
// ("scopes": ["write", "tracker"]), so a file without them is as it always
// was; a writerd that predates them refuses a file that holds one.
//
// Why SHA-256 and not a slow hash: slow hashes protect secrets that people
// choose and attackers can guess. A token is 256 random bits; recovering it
// from its hash is a preimage of SHA-256, out of reach, and a slow hash
// would cost every request its work factor for nothing.
//
// Tokens verifies: Load reads the file, Reload reads it again (the daemon
// does on SIGHUP) and swaps an immutable table in through an atomic
// pointer, so Verify never takes a lock. Verify compares the presented
// token's hash with every stored one in constant time (crypto/subtle), with
// no early exit and no lookup keyed by the hash.
//
// Create and Revoke edit the file atomically, under a lock: an exclusive
// flock on a lock file beside it (NAME.lock, never renamed), then a new
// file written in the same directory, synced, renamed over the old one, and
// the directory synced. Two writerd token commands at once both land; a
// reader (the daemon's Reload) sees the old file or the new one.
//
// Permissions: a new file has mode 0600 (its directory, if made, 0700); an
// edit keeps the file's mode, owner and group. Whoever can write the file
// can give themselves a token, so Load refuses a file that other users can
// write, or (on Unix, unless writerd runs as root) one that belongs to a
// user other than writerd's or root; a file others can read is loaded with
// a warning (Warnings), since it holds only hashes.
//
// Guard is the HTTP middleware (Bearer, for static tokens alone): exactly
// one Authorization header, scheme Bearer in any case, and either a
// well-formed token that Verify knows or, with Options.OAuth, any other
// credential its Checker accepts (package oauth: access tokens of OAuth
// issuers). Anything else is answered 401 with WWW-Authenticate: Bearer
// realm="writerd" (with error="invalid_token" when a token was presented,
// RFC 6750, and with OAuth the resource_metadata URL, RFC 9728), or with
// the status of the Checker's *Refusal (403 insufficient_scope, 503 while
// an issuer is unreachable), and a fixed error envelope; nothing about the
// token is echoed, and the reason given to the caller's hook is a fixed
// word. On success the caller is put in the request's context
// (WithCaller, CallerFrom) and the Authorization header is removed from
// the request next sees. Insecure stands in for Guard when serve runs
// without tokens on loopback: every request is one principal with every
// scope.
//
// Caveats:
//
//   - Tokens do not expire; revoking is the only end of one, and a running
//     daemon keeps accepting a revoked token, or refusing a new one, until
//     it reloads the file.
//   - A Reload that fails (an invalid file, a file others can write) keeps
//     the previous table, revoked tokens included; the daemon must log the
//     error, and the operator fix the file and reload again.
//   - Verify's time grows with the number of tokens, which is not secret.
//   - The lock is advisory: an editor changing the file by hand during a
//     writerd token command can lose its change or the command's.
//   - An edit of a symbolic link replaces its target; the lock file and the
//     temporary file go beside the target. The directory's own permissions
//     are not checked.
//   - Failed attempts are not rate-limited here; guessing a token is
//     hopeless, and request floods are the HTTP server's limits' to bound.
package auth
