package digest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Domain is the prefix that separates writerd request digests from any other use of SHA-256.
const Domain = "writerd-request-v1"

// notRequest are the top-level arguments that are not part of the request:
// idempotency_key names a retry, and confirm only gates execution (a
// confirmed delete resent without it must replay, not conflict).
var notRequest = []string{"idempotency_key", "confirm"}

// Canonical returns the RFC 8785 canonical form of a JSON value.
func Canonical(v []byte) ([]byte, error) {
	if err := checkFinite(v); err != nil {
		return nil, fmt.Errorf("digest: invalid json: %w", err)
	}
	// Canonicalize rewrites its receiver in place; clone so the caller's bytes stay intact.
	c := jsontext.Value(bytes.Clone(v))
	if err := c.Canonicalize(); err != nil {
		return nil, fmt.Errorf("digest: canonicalize: %w", err)
	}
	return c, nil
}

// Request returns the hex SHA-256 request digest of a tool call: the tool
// name and the canonical arguments object with its top-level
// "idempotency_key" and "confirm" members removed (only the top-level ones;
// nested members of those names stay).
func Request(tool string, args []byte) (string, error) {
	// Canonicalize all of args first, so that the member dropped below is
	// validated too and no whitespace precedes the first byte.
	full, err := Canonical(args)
	if err != nil {
		return "", err
	}
	if full[0] != '{' {
		return "", errors.New("digest: arguments: not a json object")
	}
	var members map[string]jsontext.Value
	if err := json.Unmarshal(full, &members); err != nil {
		return "", fmt.Errorf("digest: arguments: %w", err)
	}
	for _, name := range notRequest {
		delete(members, name)
	}
	obj, err := json.Marshal(members)
	if err != nil {
		return "", fmt.Errorf("digest: arguments: %w", err)
	}
	// Marshal writes map members in no fixed order; canonicalize again to sort them.
	canon, err := Canonical(obj)
	if err != nil {
		return "", err
	}
	// The NUL separators are unambiguous even for a tool name holding NUL:
	// canonical JSON never holds a raw NUL byte.
	h := sha256.New()
	h.Write([]byte(Domain))
	h.Write([]byte{0})
	h.Write([]byte(tool))
	h.Write([]byte{0})
	h.Write(canon)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// checkFinite rejects a number beyond the IEEE-754 double range. The library
// saturates it to ±1.7976931348623157e+308, which would give 1e400 the digest
// of a different value; RFC 8785 §3.2.2.3 requires an error for Infinity.
func checkFinite(v []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(v))
	for {
		tok, err := dec.ReadToken()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if tok.Kind() == '0' {
			if _, err := tok.Float(); err != nil {
				return err
			}
		}
	}
}
