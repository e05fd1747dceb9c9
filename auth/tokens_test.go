package auth_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/pipeline"
)

// mustCreate adds a token to the file at path and returns it.
func mustCreate(t testing.TB, path, name string, scopes pipeline.Scope) string {
	t.Helper()
	token, err := auth.Create(path, name, scopes)
	if err != nil {
		t.Fatalf("Create(%q): %v", name, err)
	}
	return token
}

func mustLoad(t testing.TB, path string) *auth.Tokens {
	t.Helper()
	tokens, err := auth.Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return tokens
}

func tokensPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "tokens.json")
}

// Ensure a new token verifies as its name with its scopes, and nothing
// else does.
func TestTokens_VerifyNew(t *testing.T) {
	path := tokensPath(t)
	ci := mustCreate(t, path, "ci-agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	ro := mustCreate(t, path, "dashboard", pipeline.ScopeRead)
	tokens := mustLoad(t, path)

	for _, tc := range []struct {
		token  string
		name   string
		scopes pipeline.Scope
	}{{ci, "ci-agent", pipeline.ScopeRead | pipeline.ScopeWrite}, {ro, "dashboard", pipeline.ScopeRead}} {
		c, ok := tokens.Verify(tc.token)
		if !ok {
			t.Fatalf("Verify(the token of %s) = false", tc.name)
		}
		want := pipeline.Caller{Principal: tc.name, Scopes: tc.scopes}
		if c != want {
			t.Errorf("Verify(the token of %s) = %+v, want %+v", tc.name, c, want)
		}
	}
	if !strings.HasPrefix(ci, auth.Prefix) || len(ci) != 47 || !auth.WellFormed(ci) {
		t.Errorf("token %q: want %s and 43 base64url characters", ci, auth.Prefix)
	}
}

// Ensure a token that differs from a stored one in one character, or has
// another's length, or is empty, does not verify.
func TestTokens_WrongTokenFails(t *testing.T) {
	path := tokensPath(t)
	token := mustCreate(t, path, "ci-agent", pipeline.AllScopes)
	tokens := mustLoad(t, path)

	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	for name, wrong := range map[string]string{
		"last character changed":  flip(token, len(token)-1),
		"first random changed":    flip(token, len(auth.Prefix)),
		"another token":           auth.Generate(),
		"one character short":     token[:len(token)-1],
		"one character more":      token + "A",
		"prefix missing":          strings.TrimPrefix(token, auth.Prefix),
		"empty":                   "",
		"the hash in the file":    fileHash(t, path),
		"upper-case prefix":       strings.ToUpper(auth.Prefix) + token[len(auth.Prefix):],
		"base64 standard charset": strings.NewReplacer("-", "+", "_", "/").Replace(token[:len(token)-2]) + "+/",
	} {
		if wrong == token {
			continue
		}
		if c, ok := tokens.Verify(wrong); ok || c != (pipeline.Caller{}) {
			t.Errorf("%s: Verify = %+v, %v; want nothing, false", name, c, ok)
		}
	}
}

// fileHash returns the first hash stored in the tokens file.
func fileHash(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(b, []byte(`"sha256": "`))
	if !ok {
		t.Fatalf("no sha256 in the file:\n%s", b)
	}
	return string(rest[:64])
}

// Ensure a revoked token fails once the file is reloaded, and the others
// go on.
func TestTokens_RevokedFailsAfterReload(t *testing.T) {
	path := tokensPath(t)
	gone := mustCreate(t, path, "gone", pipeline.AllScopes)
	kept := mustCreate(t, path, "kept", pipeline.ScopeRead)
	tokens := mustLoad(t, path)

	if err := auth.Revoke(path, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, ok := tokens.Verify(gone); !ok {
		t.Fatal("the revoked token failed before Reload; the table should change only on Reload")
	}
	if err := tokens.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, ok := tokens.Verify(gone); ok {
		t.Error("the revoked token verifies after Reload")
	}
	if c, ok := tokens.Verify(kept); !ok || c.Principal != "kept" {
		t.Errorf("the kept token: Verify = %+v, %v", c, ok)
	}
	if err := auth.Revoke(path, "gone"); !errors.Is(err, auth.ErrNoSuchName) {
		t.Errorf("Revoke of a revoked name: %v, want ErrNoSuchName", err)
	}
	if err := auth.Revoke(path, "KEPT"); !errors.Is(err, auth.ErrNoSuchName) {
		t.Errorf("Revoke of a name in another case: %v, want ErrNoSuchName (names are revoked exactly as written)", err)
	}
}

// Ensure the file is created 0600 in a 0700 directory, holds the hash and
// never the token, and keeps its mode across edits.
func TestTokens_FileModeAndContents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etc", "writerd", "tokens.json")
	var made []string
	for _, name := range []string{"a", "b", "c"} {
		made = append(made, mustCreate(t, path, name, pipeline.ScopeRead|pipeline.ScopeWrite))
	}
	if err := auth.Revoke(path, "b"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("file mode %04o, want 0600", m)
	}
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if m := di.Mode().Perm(); m != 0o700 {
		t.Errorf("directory mode %04o, want 0700", m)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, token := range made {
		random := token[len(auth.Prefix):]
		for _, part := range []string{token, random[:16], random[len(random)-16:]} {
			if bytes.Contains(b, []byte(part)) {
				t.Fatalf("the tokens file holds part of a token:\n%s", b)
			}
		}
	}
	if !bytes.Contains(b, []byte(`"name": "a"`)) || bytes.Contains(b, []byte(`"name": "b"`)) {
		t.Errorf("the file should hold a and c, not b:\n%s", b)
	}
	// No temporary file is left behind; the lock file stays.
	entries, _ := os.ReadDir(filepath.Dir(path))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "tokens.json tokens.json.lock" {
		t.Errorf("the directory holds %v, want the file and its lock", names)
	}

	// An edit keeps a mode the operator chose.
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, path, "d", pipeline.ScopeRead)
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Errorf("after an edit the mode is %04o, want the 0640 it had", fi.Mode().Perm())
	}
}

// Ensure names are unique without regard to case, and a duplicate leaves
// the file as it was.
func TestTokens_DuplicateNameRefused(t *testing.T) {
	path := tokensPath(t)
	mustCreate(t, path, "ci-agent", pipeline.ScopeRead)
	before, _ := os.ReadFile(path)
	for _, name := range []string{"ci-agent", "CI-Agent"} {
		if _, err := auth.Create(path, name, pipeline.AllScopes); !errors.Is(err, auth.ErrNameTaken) {
			t.Errorf("Create(%q) over ci-agent: %v, want ErrNameTaken", name, err)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Errorf("a refused Create changed the file")
	}
	if _, err := auth.Create(path, "ci agent", pipeline.ScopeRead); !errors.Is(err, auth.ErrInvalidName) {
		t.Errorf("Create with a space in the name: %v, want ErrInvalidName", err)
	}
	if _, err := auth.Create(path, "none", 0); !errors.Is(err, auth.ErrScope) {
		t.Errorf("Create with no scope: %v, want ErrScope", err)
	}
}

// Ensure concurrent edits, as two writerd token new at once, lose nothing.
func TestTokens_ConcurrentCreateKeepsAll(t *testing.T) {
	path := tokensPath(t)
	const n = 16
	tokens := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tok, err := auth.Create(path, fmt.Sprintf("agent-%02d", i), pipeline.ScopeRead)
			if err != nil {
				t.Error(err)
			}
			tokens[i] = tok
		})
	}
	wg.Wait()
	loaded := mustLoad(t, path)
	if got := len(loaded.Entries()); got != n {
		t.Fatalf("%d tokens in the file after %d concurrent creates", got, n)
	}
	for i, tok := range tokens {
		if c, ok := loaded.Verify(tok); !ok || c.Principal != fmt.Sprintf("agent-%02d", i) {
			t.Errorf("token %d: Verify = %+v, %v", i, c, ok)
		}
	}
}

// Ensure Verify and Reload can run at once (run with -race): every Verify
// sees a whole table, the old or the new.
func TestTokens_ConcurrentReloadAndVerify(t *testing.T) {
	path := tokensPath(t)
	stable := mustCreate(t, path, "stable", pipeline.ScopeRead)
	tokens := mustLoad(t, path)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if c, ok := tokens.Verify(stable); !ok || c.Principal != "stable" {
					t.Errorf("Verify during Reload = %+v, %v", c, ok)
					return
				}
				_ = tokens.Entries()
			}
		})
	}
	wg.Go(func() {
		for i := range 20 {
			mustCreate(t, path, fmt.Sprintf("churn-%d", i), pipeline.ScopeWrite)
		}
	})
	for range 50 {
		if err := tokens.Reload(); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
}

// Ensure a file others can write is refused, one others can read is loaded
// with a warning, and a failed Reload keeps the table it had.
func TestTokens_Permissions(t *testing.T) {
	path := tokensPath(t)
	token := mustCreate(t, path, "ci-agent", pipeline.ScopeRead)
	tokens := mustLoad(t, path)
	if w := tokens.Warnings(); len(w) != 0 {
		t.Errorf("warnings on a 0600 file: %v", w)
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := tokens.Reload(); err != nil {
		t.Fatalf("Reload of a 0644 file: %v", err)
	}
	if w := tokens.Warnings(); len(w) != 1 || !strings.Contains(w[0], "read by other users") {
		t.Errorf("warnings on a 0644 file: %v", w)
	}

	for _, mode := range []fs.FileMode{0o620, 0o602, 0o666} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := auth.Load(path); err == nil || !strings.Contains(err.Error(), "written by other users") {
			t.Errorf("Load of a %04o file: %v, want a refusal", mode, err)
		}
		if err := tokens.Reload(); err == nil {
			t.Errorf("Reload of a %04o file succeeded", mode)
		}
		if _, err := auth.Create(path, "intruder", pipeline.AllScopes); err == nil {
			t.Errorf("Create in a %04o file succeeded", mode)
		}
		if _, ok := tokens.Verify(token); !ok {
			t.Errorf("after a refused Reload the table in use was dropped")
		}
	}
}

// Ensure invalid files are refused with a sentence that names no path.
func TestTokens_InvalidFile(t *testing.T) {
	const hash = `"0000000000000000000000000000000000000000000000000000000000000000"`
	entry := func(name, scopes, hash string) string {
		return `{"name":"` + name + `","scopes":` + scopes + `,"sha256":` + hash + `,"created_at":"2026-03-01T12:00:00Z"}`
	}
	good := entry("a", `["read"]`, hash)
	for name, contents := range map[string]string{
		"not JSON":         `tokens`,
		"empty":            ``,
		"no version":       `{"tokens":[]}`,
		"version 2":        `{"version":2,"tokens":[]}`,
		"unknown member":   `{"version":1,"tokens":[],"extra":1}`,
		"duplicate member": `{"version":1,"version":1,"tokens":[]}`,
		"a token in it":    `{"version":1,"tokens":[{"name":"a","scopes":["read"],"sha256":` + hash + `,"created_at":"2026-03-01T12:00:00Z","token":"x"}]}`,
		"bad name":         `{"version":1,"tokens":[` + entry("a b", `["read"]`, hash) + `]}`,
		"no scopes":        `{"version":1,"tokens":[` + entry("a", `[]`, hash) + `]}`,
		"unknown scope":    `{"version":1,"tokens":[` + entry("a", `["root"]`, hash) + `]}`,
		"scope twice":      `{"version":1,"tokens":[` + entry("a", `["read","read"]`, hash) + `]}`,
		"short hash":       `{"version":1,"tokens":[` + entry("a", `["read"]`, `"00"`) + `]}`,
		"upper-case hash":  `{"version":1,"tokens":[` + entry("a", `["read"]`, `"`+strings.Repeat("A", 64)+`"`) + `]}`,
		"no created_at":    `{"version":1,"tokens":[{"name":"a","scopes":["read"],"sha256":` + hash + `}]}`,
		"names in case":    `{"version":1,"tokens":[` + good + `,` + entry("A", `["read"]`, `"`+strings.Repeat("1", 64)+`"`) + `]}`,
		"hash twice":       `{"version":1,"tokens":[` + good + `,` + entry("b", `["read"]`, hash) + `]}`,
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, "tokens.json")
		if err := os.WriteFile(path, []byte(contents), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := auth.Load(path)
		if err == nil {
			t.Errorf("%s: Load succeeded", name)
			continue
		}
		if !strings.HasPrefix(err.Error(), "the tokens file is not valid") || strings.Contains(err.Error(), dir) {
			t.Errorf("%s: Load: %v", name, err)
		}
	}
	// A valid file for contrast.
	path := filepath.Join(t.TempDir(), "tokens.json")
	os.WriteFile(path, []byte(`{"version":1,"tokens":[`+good+`]}`), 0o600)
	if _, err := auth.Load(path); err != nil {
		t.Errorf("a valid file: %v", err)
	}
	// A missing file is fs.ErrNotExist, named without its path.
	missing := filepath.Join(t.TempDir(), "nothing.json")
	_, err := auth.Load(missing)
	if !errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), missing) {
		t.Errorf("Load of a missing file: %v", err)
	}
}

// Ensure an edit through a symbolic link replaces the target and keeps
// the link.
func TestTokens_EditThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real", "tokens.json")
	mustCreate(t, target, "a", pipeline.ScopeRead)
	link := filepath.Join(dir, "tokens.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	token := mustCreate(t, link, "b", pipeline.ScopeRead)
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v", err)
	}
	if _, ok := mustLoad(t, target).Verify(token); !ok {
		t.Error("the token made through the link is not in the target")
	}
}

func TestParseScopes(t *testing.T) {
	for in, want := range map[string]pipeline.Scope{
		"read":                   pipeline.ScopeRead,
		"read,write":             pipeline.ScopeRead | pipeline.ScopeWrite,
		" write , read ":         pipeline.ScopeRead | pipeline.ScopeWrite,
		"audit,read,write":       pipeline.ScopeRead | pipeline.ScopeWrite | pipeline.ScopeAudit,
		"admin,audit,read,write": pipeline.AllScopes,
		"admin":                  pipeline.ScopeAdmin,
		"read,read":              pipeline.ScopeRead,
	} {
		got, err := auth.ParseScopes(in)
		if err != nil || got != want {
			t.Errorf("ParseScopes(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", ",", "read,", "root", "Admin", "Read", "read;write"} {
		if _, err := auth.ParseScopes(in); !errors.Is(err, auth.ErrScope) {
			t.Errorf("ParseScopes(%q): %v, want ErrScope", in, err)
		}
	}
	if s := auth.FormatScopes(pipeline.ScopeAudit | pipeline.ScopeRead); s != "read,audit" {
		t.Errorf("FormatScopes = %q", s)
	}
}

// Ensure Revoke on a missing file says so and makes nothing.
func TestTokens_RevokeMissingFileMakesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "tokens.json")
	if err := auth.Revoke(path, "a"); !errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), dir) {
		t.Errorf("Revoke on a missing file: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("Revoke on a missing file made %v", entries)
	}
}
