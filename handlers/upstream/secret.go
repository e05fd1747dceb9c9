package upstream

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// The prefixes of a string in the config that is not taken as written.
// In env and headers, "env:NAME" and "file:PATH" are references to a
// secret, resolved at load; everywhere a string may hold one of these
// prefixes (command, env, headers), "literal:" is stripped once and the
// rest taken as written, so that a value that must begin "env:", "file:"
// or "literal:" can still be given. Anywhere else a reference is refused.
const (
	refEnv     = "env:"
	refFile    = "file:"
	refLiteral = "literal:"
)

// maxSecretBytes bounds a secret file, and a resolved value.
const maxSecretBytes = 64 << 10

// envName is an environment variable's name, in env's keys and in an
// env: reference.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// a value as the config writes it, and what it resolved to.
type value struct {
	written  string // as the digest sees it: the reference, or "literal:" and the text
	resolved string
	secret   *Secret // a reference's, nil for a literal
}

// special reports whether s starts with one of the prefixes, and whether
// it does only in another case ("Env:X"), which is refused so that a
// mistyped reference is never sent as a literal.
func special(s string) (prefix string, miscased bool) {
	for _, p := range []string{refEnv, refFile, refLiteral} {
		if strings.HasPrefix(s, p) {
			return p, false
		}
		if len(s) >= len(p) && strings.EqualFold(s[:len(p)], p) {
			return "", true
		}
	}
	return "", false
}

// literal takes a string where a reference is not allowed (command): a
// "literal:" prefix is stripped once; a reference is refused.
func (d *doc) literal(p path, s string) (string, bool) {
	switch prefix, miscased := special(s); {
	case miscased:
		d.fail(p, "a reference is written in lower case (env:, file:, literal:); this one is not, and is refused rather than taken as text")
		return "", false
	case prefix == refEnv || prefix == refFile:
		d.fail(p, "a secret reference (env: or file:) is allowed only in env and headers: writerd never puts a secret in a command's arguments or a URL; write literal: before a value that must begin so")
		return "", false
	case prefix == refLiteral:
		return s[len(refLiteral):], true
	}
	return s, true
}

// noRef refuses a reference (or a literal: escape) in a string that takes
// neither (url, dir, ca_file).
func (d *doc) noRef(p path, s string) bool {
	if prefix, miscased := special(s); prefix != "" || miscased {
		d.fail(p, "a secret reference (env:, file:) is allowed only in env and headers, and literal: only there and in command")
		return false
	}
	return true
}

// resolve reads a value of env or headers: a reference is resolved
// through opts (a file's one trailing newline stripped), a literal taken
// as written. needRef refuses a literal (a header or variable whose name
// says it holds a credential). A refusal names the key and, for env:, the
// variable; never a value, nor a file's path.
func (d *doc) resolve(p path, s string, needRef bool) (value, bool) {
	prefix, miscased := special(s)
	if miscased {
		d.fail(p, "a reference is written in lower case (env:, file:, literal:); this one is not, and is refused rather than taken as text")
		return value{}, false
	}
	var v value
	switch prefix {
	case refEnv:
		name := s[len(refEnv):]
		if !envName.MatchString(name) {
			d.fail(p, "an env: reference names a variable: letters, digits and _, not starting with a digit")
			return value{}, false
		}
		got, ok := d.opts.Getenv(name)
		if !ok {
			d.fail(p, "the variable %s that its reference names is not set", name)
			return value{}, false
		}
		v = value{written: s, resolved: got}
	case refFile:
		name := s[len(refFile):]
		if !filepath.IsAbs(name) || strings.ContainsRune(name, 0) {
			d.fail(p, "a file: reference names an absolute path")
			return value{}, false
		}
		b, err := d.opts.ReadFile(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			d.fail(p, "the file that its reference names does not exist")
			return value{}, false
		case errors.Is(err, fs.ErrPermission):
			d.fail(p, "the file that its reference names cannot be read (permission denied)")
			return value{}, false
		case err != nil:
			d.fail(p, "the file that its reference names cannot be read")
			return value{}, false
		case len(b) > maxSecretBytes:
			d.fail(p, "the file that its reference names is over 64 KiB")
			return value{}, false
		}
		b = bytes.TrimSuffix(b, []byte("\n"))
		b = bytes.TrimSuffix(b, []byte("\r"))
		v = value{written: s, resolved: string(b)}
	default:
		if needRef {
			d.fail(p, "its name says it holds a credential, so its value must be a reference (env:NAME or file:PATH), never written in the file")
			return value{}, false
		}
		text := strings.TrimPrefix(s, refLiteral)
		return value{written: refLiteral + text, resolved: text}, true
	}
	switch {
	case v.resolved == "":
		d.fail(p, "the secret that its reference names is empty")
		return value{}, false
	case len(v.resolved) > maxSecretBytes:
		d.fail(p, "the secret that its reference names is over 64 KiB")
		return value{}, false
	}
	v.secret = &Secret{Ref: s, Value: v.resolved}
	return v, true
}

// credentialName reports whether a header's or variable's name says it
// carries a credential, so that its value must be a reference.
func credentialName(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"authorization", "cookie", "token", "secret", "password", "passwd", "credential", "api-key", "api_key", "apikey"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// defaultGetenv and defaultReadFile are LoadOptions' defaults.
var (
	defaultGetenv   = os.LookupEnv
	defaultReadFile = os.ReadFile
)
