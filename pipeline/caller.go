package pipeline

import (
	"context"
	"slices"
	"strings"
)

// Scope is a permission a caller holds. Read tools need ScopeRead, write
// tools ScopeWrite; ScopeAudit is for the audit API; ScopeAdmin for online
// backups, which hold every record, more than the audit scope may read.
type Scope uint8

const (
	ScopeRead Scope = 1 << iota
	ScopeWrite
	ScopeAudit
	ScopeAdmin

	AllScopes = ScopeRead | ScopeWrite | ScopeAudit | ScopeAdmin
)

// Has reports whether s includes all of want.
func (s Scope) Has(want Scope) bool { return s&want == want }

// Transports, as recorded in audit events and logs.
const (
	TransportStdio = "stdio"
	TransportHTTP  = "http"
	TransportAPI   = "api"
	TransportGo    = "go"
)

// Caller is who makes a call and through what. Transports authenticate the
// caller before the pipeline sees it.
type Caller struct {
	// Principal scopes idempotency keys: two principals never see each
	// other's records.
	Principal string
	Scopes    Scope
	Transport string
	// Grants are the named scopes the caller holds beyond Scopes, space
	// separated (as OAuth writes scopes): an upstream's own, which its
	// tools need besides read or write. A string keeps Caller comparable.
	Grants string
}

// AllGrants, as a caller's Grants, holds every named scope: the local
// principal over stdio, and every caller of a daemon served without
// tokens, who hold every scope.
const AllGrants = "*"

// Holds reports whether the caller holds the named scope.
func (c Caller) Holds(scope string) bool {
	return c.Grants == AllGrants || slices.Contains(strings.Fields(c.Grants), scope)
}

// ValidScopeName reports whether name can be a named scope (Caller.Grants,
// ToolInfo.Scope): 1 to 64 lower-case letters, digits, _, :, . and -,
// beginning with a letter, and not one of writerd's own (read, write,
// audit, admin). The upstreams file, the tokens file and --oauth-scopes
// take the same names.
func ValidScopeName(name string) bool {
	if name == "" || len(name) > 64 || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 1; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_', c == ':', c == '.', c == '-':
		default:
			return false
		}
	}
	switch name {
	case "read", "write", "audit", "admin":
		return false
	}
	return true
}

// ValidPrincipal reports whether name can be a principal: 1 to 128 bytes
// of printable ASCII without spaces. Principals are stored in idempotency
// keys and audit events, so they must be plain.
func ValidPrincipal(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	return !strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r > '~' })
}

type requestIDKey struct{}

// WithRequestID returns a context that carries a call's request id. Edges
// set it once; Pipeline.Call makes one if the context has none.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id ctx carries, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
