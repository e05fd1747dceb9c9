package auth

import (
	"errors"
	"slices"
	"strings"

	"github.com/writerd/writerd/pipeline"
)

// scopeNames are the scopes as the tokens file and the command line name
// them, in the order they are written.
var scopeNames = []struct {
	name  string
	scope pipeline.Scope
}{
	{"read", pipeline.ScopeRead},
	{"write", pipeline.ScopeWrite},
	{"audit", pipeline.ScopeAudit},
	{"admin", pipeline.ScopeAdmin},
}

// ErrScope is returned by ParseScopes for a list that names no scope or a
// name that is not one.
var ErrScope = errors.New("scopes are read, write, audit and admin, separated by commas")

// ParseScopes parses a comma-separated list of scope names (read, write,
// audit, admin), such as "read,write". Spaces around a name are ignored and a
// name given twice counts once; an empty list or an unknown name is
// ErrScope.
func ParseScopes(s string) (pipeline.Scope, error) {
	var scopes pipeline.Scope
	for name := range strings.SplitSeq(s, ",") {
		sc, ok := scopeByName(strings.TrimSpace(name))
		if !ok {
			return 0, ErrScope
		}
		scopes |= sc
	}
	return scopes, nil
}

// ErrScopeList is returned by ParseScopeList for a list that names none
// of writerd's own scopes, or a name that is neither one of them nor a
// named scope.
var ErrScopeList = errors.New("scopes are at least one of read, write, audit and admin, and any upstreams' scopes (each 1 to 64 lower-case letters, digits, _, :, . and -, beginning with a letter), separated by commas")

// ParseScopeList parses a comma-separated list of scopes as the tokens
// file and writerd token new take them: writerd's own (read, write,
// audit, admin) and named scopes, an upstream's own, which its tools need
// besides read or write (pipeline.ValidScopeName; docs/UPSTREAMS.md),
// such as "write,tracker". Spaces around a name are ignored and a name
// given twice counts once; the named scopes are returned in the order
// given. A list without one of writerd's own scopes, an empty name or a
// name that is neither is ErrScopeList: a named scope only adds to them.
func ParseScopeList(s string) (pipeline.Scope, []string, error) {
	var scopes pipeline.Scope
	var named []string
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		if sc, ok := scopeByName(name); ok {
			scopes |= sc
			continue
		}
		if !pipeline.ValidScopeName(name) {
			return 0, nil, ErrScopeList
		}
		if !slices.Contains(named, name) {
			named = append(named, name)
		}
	}
	if scopes == 0 {
		return 0, nil, ErrScopeList
	}
	return scopes, named, nil
}

// FormatScopeList returns scopes and the named scopes as ParseScopeList
// takes them: "write,tracker".
func FormatScopeList(scopes pipeline.Scope, named []string) string {
	return strings.Join(append(ScopeNames(scopes), named...), ",")
}

// ScopeNames returns the names of the scopes in s, in the order read,
// write, audit, admin.
func ScopeNames(s pipeline.Scope) []string {
	var names []string
	for _, n := range scopeNames {
		if s.Has(n.scope) {
			names = append(names, n.name)
		}
	}
	return names
}

// FormatScopes returns the scopes in s as ParseScopes takes them: "read,write".
func FormatScopes(s pipeline.Scope) string {
	return strings.Join(ScopeNames(s), ",")
}

func scopeByName(name string) (pipeline.Scope, bool) {
	for _, n := range scopeNames {
		if n.name == name {
			return n.scope, true
		}
	}
	return 0, false
}
