package auth

import (
	"errors"
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
