package upstream

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/writerd/writerd/pipeline"
)

// The path of an endpoint tool (an HTTP API's write as a tool: docs/
// UPSTREAMS.md, "HTTP APIs as tools") is an RFC 6570 template of level 1
// only: literal text, and expressions {name} that each stand for one
// required string argument, expanded as the RFC's simple string
// expansion does, every byte outside its unreserved set (letters,
// digits, "-", ".", "_", "~") percent-encoded. A value therefore stays
// inside its path segment whatever it holds ("/", "?", "#", "%2F", a
// newline), and the one way left out of it is a dot segment, which a
// server or a proxy between would resolve against the path: a segment
// with an expression in it may not expand to "", "." or "..".
//
// Nothing else is expanded: no operators (+ # . / ; ? &), no prefix or
// explode modifiers, no query (an endpoint's query is built from its
// arguments apart), so that what an operator reads in the config is the
// request's path with its arguments in their segments.

// Bounds of a path template.
const (
	maxPathTemplate = 1024 // bytes of the template
	maxPathVars     = 16   // expressions in it
	maxPathName     = 64   // bytes of one argument's name
	// MaxExpandedPath bounds a path once expanded: the request line of
	// many servers is limited to 8 KiB.
	MaxExpandedPath = 4096
)

// PathTemplate is a parsed endpoint path (ParsePathTemplate).
type PathTemplate struct {
	text     string
	segments [][]pathPart // split at the literal "/"s, after the first
	names    []string     // distinct, in their first order
}

// pathPart is literal text (as written: valid, unreserved or encoded) or
// the name of an argument.
type pathPart struct {
	literal  string
	variable string
}

// ParsePathTemplate parses an endpoint's path template. Its refusals are
// sentences for the operator, naming neither the template nor a part of
// it: the config's loader says where it is.
func ParsePathTemplate(s string) (*PathTemplate, error) {
	switch {
	case len(s) > maxPathTemplate:
		return nil, fmt.Errorf("The path is longer than %d bytes.", maxPathTemplate)
	case !strings.HasPrefix(s, "/"):
		return nil, errors.New(`The path must begin with "/".`)
	}
	p := &PathTemplate{text: s}
	seen := map[string]bool{}
	vars := 0
	for _, seg := range strings.Split(s[1:], "/") {
		var parts []pathPart
		for rest := seg; rest != ""; {
			open := strings.IndexAny(rest, "{}")
			if open < 0 {
				open = len(rest)
			}
			if open > 0 {
				if err := checkLiteral(rest[:open]); err != nil {
					return nil, err
				}
				parts = append(parts, pathPart{literal: rest[:open]})
				rest = rest[open:]
				continue
			}
			if rest[0] == '}' {
				return nil, errors.New(`The path has a "}" that closes no expression.`)
			}
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				return nil, errors.New(`The path has a "{" that is never closed.`)
			}
			name := rest[1:end]
			if err := checkPathName(name); err != nil {
				return nil, err
			}
			if vars++; vars > maxPathVars {
				return nil, fmt.Errorf("The path has more than %d expressions.", maxPathVars)
			}
			if !seen[name] {
				seen[name] = true
				p.names = append(p.names, name)
			}
			parts = append(parts, pathPart{variable: name})
			rest = rest[end+1:]
		}
		if len(parts) == 0 && len(p.segments) < strings.Count(s, "/")-1 {
			// "//" in the path; a last segment may be empty: a trailing
			// "/" some APIs want.
			return nil, errors.New(`The path has an empty segment ("//").`)
		}
		if len(parts) > 0 && allLiteral(parts) && isDotSegment(parts[0].literal) {
			return nil, errors.New(`The path has a "." or ".." segment, which servers resolve against the path.`)
		}
		p.segments = append(p.segments, parts)
	}
	return p, nil
}

func allLiteral(parts []pathPart) bool { return len(parts) == 1 && parts[0].variable == "" }

// checkLiteral holds a template's literal text to RFC 3986's path
// characters (pchar and "/"), percent-encodings well formed: no "?" or
// "#", no space, control or non-ASCII byte.
func checkLiteral(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case unreserved(c) || strings.IndexByte("!$&'()*+,;=:@", c) >= 0:
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return errors.New(`The path has a "%" that begins no percent-encoding ("%" and two hex digits).`)
			}
			i += 2
		case c == '?' || c == '#':
			return errors.New(`The path may not hold "?" or "#": an endpoint's query is its query setting, and a fragment is never sent.`)
		default:
			return errors.New("The path holds a character a URL's path may not hold as written (a space, a control or non-ASCII character, or one of \"\\\"<>[\\\\]^`|\"): percent-encode it.")
		}
	}
	return nil
}

// checkPathName holds an expression to level 1: one name, of letters,
// digits and "_", which is the argument it stands for.
func checkPathName(name string) error {
	if name == "" {
		return errors.New(`The path has an empty expression ("{}").`)
	}
	if strings.IndexByte("+#./;?&=,!@|", name[0]) >= 0 || strings.ContainsAny(name, ":*,") {
		return errors.New("The path has an expression with an operator, a modifier or more than one name: writerd expands RFC 6570 level 1 only, {name}.")
	}
	if len(name) > maxPathName {
		return fmt.Errorf("The path has an expression whose name is longer than %d bytes.", maxPathName)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return errors.New(`The path has an expression whose name is not letters, digits and "_" alone.`)
		}
	}
	return nil
}

// String is the template as written.
func (p *PathTemplate) String() string { return p.text }

// Names are the arguments the template's expressions stand for, each
// once, in the order they first appear: each a required string argument
// of the tool.
func (p *PathTemplate) Names() []string { return p.names }

// Expand returns the path with each expression replaced by its argument's
// value, percent-encoded as RFC 6570's simple expansion encodes it. A
// value that is not a string, or a segment an expression expands to "",
// "." or "..", is INVALID_INPUT; a path over MaxExpandedPath bytes is
// INPUT_TOO_LARGE. Its messages name the argument, never its value. An
// argument missing from args is an internal error: the tool's input
// schema requires each.
func (p *PathTemplate) Expand(args map[string]any) (string, error) {
	var b strings.Builder
	for _, seg := range p.segments {
		b.WriteByte('/')
		start := b.Len()
		var named string
		for _, part := range seg {
			if part.variable == "" {
				b.WriteString(part.literal)
				continue
			}
			v, ok := args[part.variable]
			if !ok {
				return "", fmt.Errorf("upstream: path argument %q missing", part.variable)
			}
			s, ok := v.(string)
			if !ok {
				return "", pipeline.Errorf(pipeline.InvalidInput, "The argument %q must be a string: it is part of the request's path.", part.variable)
			}
			if s == "" {
				return "", pipeline.Errorf(pipeline.InvalidInput, "The argument %q may not be empty: it is part of the request's path.", part.variable)
			}
			named = part.variable
			escapeSimple(&b, s)
		}
		if named != "" && isDotSegment(b.String()[start:]) {
			return "", pipeline.Errorf(pipeline.InvalidInput, "The argument %q may not make a segment of the request's path \".\" or \"..\".", named)
		}
	}
	if b.Len() > MaxExpandedPath {
		return "", pipeline.Errorf(pipeline.InputTooLarge, "The request's path is longer than %d bytes once its arguments are in it.", MaxExpandedPath)
	}
	return b.String(), nil
}

// escapeSimple writes s as RFC 6570's simple string expansion does: its
// unreserved bytes as they are, every other byte (of UTF-8) as %XX.
func escapeSimple(b *strings.Builder, s string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		if c := s[i]; unreserved(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
}

// unreserved is RFC 3986's unreserved set.
func unreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// isDotSegment reports whether a segment, decoded, is "." or "..":
// RFC 3986 makes %2E a ".", and servers normalise it so.
func isDotSegment(seg string) bool {
	d, err := url.PathUnescape(seg)
	return err == nil && (d == "." || d == "..")
}
