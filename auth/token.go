package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// Prefix starts every writerd token, so that secret scanners (GitHub's,
// gitleaks, trufflehog) can be taught to find a leaked one with the pattern
// wrd_[A-Za-z0-9_-]{43}, and so that a person can tell what a string is.
const Prefix = "wrd_"

// tokenBytes is the randomness of a token: 256 bits, beyond any guessing.
const tokenBytes = 32

// tokenLen is the length of a token: the prefix and 43 characters of
// unpadded base64url.
var tokenLen = len(Prefix) + base64.RawURLEncoding.EncodedLen(tokenBytes)

// Generate returns a new token: Prefix and 32 bytes from crypto/rand in
// unpadded base64url. crypto/rand never fails to answer; if the system's
// generator is broken, it ends the program rather than return weak bytes.
func Generate() string {
	var b [tokenBytes]byte
	rand.Read(b[:])
	return Prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// WellFormed reports whether s has the form of a writerd token: Prefix and
// 43 base64url characters. The form is public, so this check may return
// early; it says nothing about whether the token exists.
func WellFormed(s string) bool {
	rest, ok := strings.CutPrefix(s, Prefix)
	if !ok || len(s) != tokenLen {
		return false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// digest is what the tokens file keeps of a token: SHA-256 of the whole
// token, prefix included. A fast hash is enough, and a slow one (bcrypt,
// argon2) would buy nothing: slow hashes protect secrets people choose,
// which can be guessed; a token is 256 random bits, so finding one from its
// hash is a preimage of SHA-256. A slow hash would instead cost every
// request its work factor, times the number of tokens, since a salted hash
// cannot be looked up, and hand anyone who can send requests a cheap way to
// burn the daemon's CPU.
func digest(token string) [sha256.Size]byte {
	return sha256.Sum256([]byte(token))
}
