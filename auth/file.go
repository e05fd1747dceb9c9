package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/writerd/writerd/pipeline"
)

// fileJSON is the tokens file (the package documentation shows it).
type fileJSON struct {
	Version int         `json:"version"`
	Tokens  []entryJSON `json:"tokens"`
}

type entryJSON struct {
	Name      string    `json:"name"`
	Scopes    []string  `json:"scopes"`
	SHA256    string    `json:"sha256"`
	CreatedAt time.Time `json:"created_at"`
}

const fileVersion = 1

// maxFileSize bounds what Load reads: a file of ten thousand tokens is
// under 2 MiB.
const maxFileSize = 16 << 20

// Entry is one token as the tokens file describes it, without its hash.
type Entry struct {
	// Name is the principal the token's calls act as.
	Name   string
	Scopes pipeline.Scope
	// Grants are the named scopes the token holds besides Scopes (an
	// upstream's own, pipeline.ValidScopeName), in the file's order; the
	// file lists them in "scopes" after writerd's own.
	Grants    []string
	CreatedAt time.Time
}

// ScopeList returns the token's scopes as the file lists them: writerd's
// own in the order read, write, audit, admin, then the named ones.
func (e Entry) ScopeList() []string { return append(ScopeNames(e.Scopes), e.Grants...) }

// entry is one token of a loaded table.
type entry struct {
	Entry
	hash [sha256.Size]byte
	// grants is Grants as Caller.Grants holds them: space separated.
	grants string
}

// table is one loaded tokens file; it never changes once built.
type table struct {
	entries  []entry
	warnings []string
}

// readTable reads and checks the tokens file open as f: its permissions
// (checkFile), then its contents. It returns the file's information too,
// so that an edit can keep its owner and mode.
func readTable(f *os.File) (*table, fs.FileInfo, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fileError("cannot be read", err)
	}
	warning, err := checkFile(fi)
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, nil, fileError("cannot be read", err)
	}
	if len(b) > maxFileSize {
		return nil, nil, errors.New("the tokens file is larger than 16 MiB; it is not a tokens file")
	}
	t, err := parseTable(b)
	if err != nil {
		return nil, nil, err
	}
	if warning != "" {
		t.warnings = append(t.warnings, warning)
	}
	return t, fi, nil
}

// parseTable parses and checks the contents of a tokens file.
func parseTable(b []byte) (*table, error) {
	var f fileJSON
	if err := jsonv2.Unmarshal(b, &f, jsonv2.RejectUnknownMembers(true)); err != nil {
		return nil, fmt.Errorf("the tokens file is not valid: %w", err)
	}
	if f.Version != fileVersion {
		return nil, fmt.Errorf("the tokens file is not valid: version is %d; this writerd reads version %d", f.Version, fileVersion)
	}
	t := &table{entries: make([]entry, 0, len(f.Tokens))}
	for i, ej := range f.Tokens {
		e, err := ej.entry()
		if err != nil {
			return nil, fmt.Errorf("the tokens file is not valid: token %d: %s", i+1, err)
		}
		for _, o := range t.entries {
			switch {
			case strings.EqualFold(o.Name, e.Name):
				return nil, fmt.Errorf("the tokens file is not valid: token %d: the name %q is taken by another token", i+1, e.Name)
			case o.hash == e.hash:
				return nil, fmt.Errorf("the tokens file is not valid: token %d: its hash is another token's", i+1)
			}
		}
		t.entries = append(t.entries, e)
	}
	return t, nil
}

// entry checks an entry of the file and returns it as a table holds it.
func (ej *entryJSON) entry() (entry, error) {
	e := entry{Entry: Entry{Name: ej.Name, CreatedAt: ej.CreatedAt}}
	if !pipeline.ValidPrincipal(ej.Name) {
		return e, errors.New("name must be 1 to 128 printable ASCII characters without spaces")
	}
	for _, name := range ej.Scopes {
		if s, ok := scopeByName(name); ok {
			if e.Scopes.Has(s) {
				return e, errors.New("scopes must name each scope at most once")
			}
			e.Scopes |= s
			continue
		}
		switch {
		case !pipeline.ValidScopeName(name):
			return e, errors.New("scopes must be read, write, audit, admin or an upstream's scope (1 to 64 lower-case letters, digits, _, :, . and -, beginning with a letter)")
		case slices.Contains(e.Grants, name):
			return e, errors.New("scopes must name each scope at most once")
		}
		e.Grants = append(e.Grants, name)
	}
	if e.Scopes == 0 {
		return e, errors.New("scopes must name at least one of read, write, audit and admin (an upstream's scope only adds to them)")
	}
	e.grants = strings.Join(e.Grants, " ")
	if len(ej.SHA256) != hex.EncodedLen(sha256.Size) || strings.ToLower(ej.SHA256) != ej.SHA256 {
		return e, errors.New("sha256 must be 64 lowercase hexadecimal digits")
	}
	if _, err := hex.Decode(e.hash[:], []byte(ej.SHA256)); err != nil {
		return e, errors.New("sha256 must be 64 lowercase hexadecimal digits")
	}
	if ej.CreatedAt.IsZero() {
		return e, errors.New("created_at is missing")
	}
	return e, nil
}

// encode renders the table as the tokens file holds it, one member per
// line, so that a person can read it and a diff shows one token's change.
func (t *table) encode() ([]byte, error) {
	f := fileJSON{Version: fileVersion, Tokens: make([]entryJSON, 0, len(t.entries))}
	for _, e := range t.entries {
		f.Tokens = append(f.Tokens, entryJSON{
			Name:      e.Name,
			Scopes:    e.ScopeList(),
			SHA256:    hex.EncodeToString(e.hash[:]),
			CreatedAt: e.CreatedAt.UTC(),
		})
	}
	b, err := jsonv2.Marshal(f, jsontext.Multiline(true), jsontext.WithIndent("  "))
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// fileError names an operating system error on the tokens file without its
// path: logs never hold a file path (docs/DESIGN.md section 8). The cause
// stays in the chain, so that errors.Is(err, fs.ErrNotExist) holds.
func fileError(what string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		err = le.Err
	}
	return fmt.Errorf("the tokens file %s: %w", what, err)
}
