package auth_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/pipeline"
)

// Ensure a token made with named scopes (an upstream's own) verifies as a
// caller holding them as Grants, beside writerd's scopes; a token without
// any holds none; the file lists them after writerd's own, and the
// table's entries show them.
func TestTokens_NamedScopes(t *testing.T) {
	path := tokensPath(t)
	triage, err := auth.Create(path, "triage", pipeline.ScopeWrite, "tracker", "billing:eu", "tracker")
	if err != nil {
		t.Fatal(err)
	}
	plain := mustCreate(t, path, "plain", pipeline.ScopeRead|pipeline.ScopeWrite)
	tokens := mustLoad(t, path)
	for token, want := range map[string]pipeline.Caller{
		triage: {Principal: "triage", Scopes: pipeline.ScopeWrite, Grants: "tracker billing:eu"},
		plain:  {Principal: "plain", Scopes: pipeline.ScopeRead | pipeline.ScopeWrite},
	} {
		c, ok := tokens.Verify(token)
		if !ok || c != want {
			t.Errorf("Verify = %+v, %v; want %+v", c, ok, want)
		}
	}
	c, _ := tokens.Verify(triage)
	if !c.Holds("tracker") || !c.Holds("billing:eu") || c.Holds("billing") || c.Holds("write") {
		t.Errorf("Holds: %+v holds the wrong scopes", c)
	}
	if c, _ := tokens.Verify(plain); c.Holds("tracker") {
		t.Error("a token without the named scope holds it")
	}

	var lists [][]string
	for _, e := range tokens.Entries() {
		lists = append(lists, e.ScopeList())
	}
	if want := [][]string{{"write", "tracker", "billing:eu"}, {"read", "write"}}; !slices.EqualFunc(lists, want, slices.Equal) {
		t.Errorf("entries' scopes %q, want %q", lists, want)
	}
	var file struct{ Tokens []struct{ Scopes []string } }
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &file); err != nil || len(file.Tokens) != 2 || !slices.Equal(file.Tokens[0].Scopes, []string{"write", "tracker", "billing:eu"}) {
		t.Errorf("the file lists %+v (%v), want the named scopes after write:\n%s", file.Tokens, err, b)
	}
	// Entries are copies: changing one changes nothing of the table's.
	tokens.Entries()[0].Grants[0] = "changed"
	if c, _ := tokens.Verify(triage); c.Grants != "tracker billing:eu" || tokens.Entries()[0].Grants[0] != "tracker" {
		t.Error("an entry's grants are shared with the table")
	}
}

// Ensure Create refuses a named scope that pipeline.ValidScopeName
// refuses, and a token with named scopes alone, before anything is
// written.
func TestTokens_CreateRefusesBadNamedScopes(t *testing.T) {
	path := tokensPath(t)
	mustCreate(t, path, "first", pipeline.ScopeRead)
	before, _ := os.ReadFile(path)
	for _, grant := range []string{"", "Tracker", "write", "admin", "9lives", "a b", "tracker,billing", strings.Repeat("a", 65), "trä"} {
		if _, err := auth.Create(path, "x", pipeline.ScopeWrite, grant); !errors.Is(err, auth.ErrScopeList) {
			t.Errorf("Create with the named scope %q: %v, want ErrScopeList", grant, err)
		}
	}
	if _, err := auth.Create(path, "x", 0, "tracker"); !errors.Is(err, auth.ErrScope) {
		t.Errorf("Create with a named scope alone: %v, want ErrScope", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Errorf("a refused Create changed the file:\n%s", after)
	}
	if _, err := auth.Create(path, "longest", pipeline.ScopeWrite, "t"+strings.Repeat("a", 63)); err != nil {
		t.Errorf("a named scope of 64 characters: %v", err)
	}
}

// earlierFile is a tokens file as a writerd before named scopes wrote it
// (its encode, byte for byte): one token of earlierToken.
const earlierFile = `{
  "version": 1,
  "tokens": [
    {
      "name": "ci-agent",
      "scopes": [
        "read",
        "write"
      ],
      "sha256": "HASH",
      "created_at": "2026-03-01T12:00:00Z"
    }
  ]
}
`

const earlierToken = "wrd_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

// Ensure a tokens file of the earlier format loads as it did, its token
// a caller without named scopes; that an edit adding a token with a named
// scope keeps the earlier token's entry as it was; and that a file
// without named scopes is written as before, byte for byte.
func TestTokens_EarlierFormatLoads(t *testing.T) {
	h := sha256.Sum256([]byte(earlierToken))
	contents := strings.Replace(earlierFile, "HASH", hex.EncodeToString(h[:]), 1)
	path := tokensPath(t)
	if err := os.WriteFile(path, []byte(contents), 0o600); err != nil {
		t.Fatal(err)
	}
	want := pipeline.Caller{Principal: "ci-agent", Scopes: pipeline.ScopeRead | pipeline.ScopeWrite}
	if c, ok := mustLoad(t, path).Verify(earlierToken); !ok || c != want {
		t.Fatalf("the earlier file's token: %+v, %v; want %+v", c, ok, want)
	}
	// An edit that adds and removes a token writes the earlier bytes again.
	mustCreate(t, path, "other", pipeline.ScopeRead)
	if err := auth.Revoke(path, "other"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != contents {
		t.Errorf("the file after an edit:\n%s\nwant, as the earlier writerd wrote it:\n%s", b, contents)
	}
	triage, err := auth.Create(path, "triage", pipeline.ScopeWrite, "tracker")
	if err != nil {
		t.Fatal(err)
	}
	tokens := mustLoad(t, path)
	if c, ok := tokens.Verify(earlierToken); !ok || c != want {
		t.Errorf("after adding a token with a named scope, the earlier token: %+v, %v", c, ok)
	}
	if c, _ := tokens.Verify(triage); c.Grants != "tracker" {
		t.Errorf("the new token's grants %q, want tracker", c.Grants)
	}
	if b, _ := os.ReadFile(path); !strings.HasPrefix(string(b), strings.TrimSuffix(contents, "\n  ]\n}\n")) {
		t.Errorf("the earlier entry changed:\n%s", b)
	}
}

// Ensure the tokens file refuses a named scope that is not well formed,
// one named twice, and named scopes without one of writerd's own, each
// with the file's sentence; and loads one with a good named scope.
func TestTokens_NamedScopesInFile(t *testing.T) {
	const hash = `"0000000000000000000000000000000000000000000000000000000000000000"`
	file := func(scopes string) string {
		return `{"version":1,"tokens":[{"name":"a","scopes":` + scopes + `,"sha256":` + hash + `,"created_at":"2026-03-01T12:00:00Z"}]}`
	}
	for scopes, want := range map[string]string{
		`["tracker"]`:                  "token 1: scopes must name at least one of read, write, audit and admin (an upstream's scope only adds to them)",
		`["read","Tracker"]`:           "token 1: scopes must be read, write, audit, admin or an upstream's scope",
		`["read",""]`:                  "token 1: scopes must be read, write, audit, admin or an upstream's scope",
		`["read","track er"]`:          "token 1: scopes must be read, write, audit, admin or an upstream's scope",
		`["read","tracker","tracker"]`: "token 1: scopes must name each scope at most once",
		`["write","read","write"]`:     "token 1: scopes must name each scope at most once",
	} {
		path := tokensPath(t)
		if err := os.WriteFile(path, []byte(file(scopes)), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := auth.Load(path)
		if err == nil || !strings.HasPrefix(err.Error(), "the tokens file is not valid: "+want) || strings.Contains(err.Error(), "Tracker") || strings.Contains(err.Error(), "track er") {
			t.Errorf("scopes %s: Load: %v, want %q", scopes, err, want)
		}
	}
	path := tokensPath(t)
	os.WriteFile(path, []byte(file(`["tracker","write","billing:eu"]`)), 0o600)
	tokens := mustLoad(t, path)
	if e := tokens.Entries(); len(e) != 1 || e[0].Scopes != pipeline.ScopeWrite || !slices.Equal(e[0].Grants, []string{"tracker", "billing:eu"}) {
		t.Errorf("entries %+v, want write with tracker and billing:eu", e)
	}
}

func TestParseScopeList(t *testing.T) {
	for in, want := range map[string]struct {
		scopes pipeline.Scope
		named  []string
	}{
		"read,write":                     {pipeline.ScopeRead | pipeline.ScopeWrite, nil},
		"write,tracker":                  {pipeline.ScopeWrite, []string{"tracker"}},
		" tracker , write , billing:eu ": {pipeline.ScopeWrite, []string{"tracker", "billing:eu"}},
		"write,tracker,tracker,write":    {pipeline.ScopeWrite, []string{"tracker"}},
	} {
		scopes, named, err := auth.ParseScopeList(in)
		if err != nil || scopes != want.scopes || !slices.Equal(named, want.named) {
			t.Errorf("ParseScopeList(%q) = %v, %q, %v; want %v, %q", in, scopes, named, err, want.scopes, want.named)
		}
		if got := auth.FormatScopeList(scopes, named); got != strings.Join(append(auth.ScopeNames(scopes), named...), ",") {
			t.Errorf("FormatScopeList = %q", got)
		}
	}
	for _, in := range []string{"", ",", "read,", "tracker", "Tracker,write", "write,Read", "read;write", "write,a b"} {
		if _, _, err := auth.ParseScopeList(in); !errors.Is(err, auth.ErrScopeList) {
			t.Errorf("ParseScopeList(%q): %v, want ErrScopeList", in, err)
		}
	}
	if got := auth.FormatScopeList(pipeline.ScopeWrite|pipeline.ScopeRead, []string{"tracker"}); got != "read,write,tracker" {
		t.Errorf("FormatScopeList = %q", got)
	}
}
