package auth

import (
	"crypto/subtle"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/writerd/writerd/pipeline"
)

// Tokens verifies bearer tokens against a tokens file. Verify may run on
// any number of goroutines while Reload replaces the table: each Verify
// reads one immutable table through an atomic pointer, the one in place
// when it began.
type Tokens struct {
	path string
	// reload serialises Reload, so that a slower read of an older file
	// never replaces the table of a newer one.
	reload sync.Mutex
	table  atomic.Pointer[table]
	// check, if set, must accept every entry of a file before it is used
	// (LoadChecked).
	check func(Entry) error
}

// Load reads the tokens file at path (see the package documentation for
// its form and the permissions it must have). Errors are sentences that
// name the file "the tokens file", never its path; a missing file's error
// satisfies errors.Is(err, fs.ErrNotExist).
func Load(path string) (*Tokens, error) { return LoadChecked(path, nil) }

// LoadChecked is Load where check, if not nil, must also accept each
// token of the file, at Load and at every Reload: a file with a token it
// refuses is refused as a whole with check's error, as an invalid file
// is. The daemon refuses names with a colon this way when OAuth is on
// (an OAuth principal is "issuer:subject").
func LoadChecked(path string, check func(Entry) error) (*Tokens, error) {
	t := &Tokens{path: path, check: check}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload reads the tokens file again and, if it is valid, makes it the
// table every later Verify uses; a Verify already running finishes with the
// table it began with. If the file cannot be read or is invalid, Reload
// returns why and keeps the table it had: the daemon goes on with the
// tokens it knew, a revocation in the broken file included, until a valid
// file is loaded.
func (t *Tokens) Reload() error {
	t.reload.Lock()
	defer t.reload.Unlock()
	f, err := os.Open(t.path)
	if err != nil {
		return fileError("cannot be read", err)
	}
	defer f.Close()
	tab, _, err := readTable(f)
	if err != nil {
		return err
	}
	if t.check != nil {
		for _, e := range tab.entries {
			if err := t.check(e.Entry); err != nil {
				return err
			}
		}
	}
	t.table.Store(tab)
	return nil
}

// Verify returns the caller a token stands for: its name as the principal
// and its scopes (its named scopes as Grants), with Transport left for the
// transport to set. It reports
// false for a token that is not well formed or is not in the table.
//
// The token's SHA-256 is compared with every stored hash by
// subtle.ConstantTimeCompare, and the match is chosen by
// subtle.ConstantTimeSelect, without an early exit, so that the time taken
// depends on the number of tokens but not on which one, if any, matched,
// nor on how much of a hash did. (A map keyed by the hash would leak only
// how a hash of the attacker's own choosing compares with stored hashes,
// which leads to no token; constant time is simply the stated rule, and
// costs microseconds.) A token that is not well formed is refused before
// hashing: its form is public.
func (t *Tokens) Verify(token string) (pipeline.Caller, bool) {
	if t == nil || !WellFormed(token) {
		return pipeline.Caller{}, false
	}
	tab := t.table.Load()
	if tab == nil {
		return pipeline.Caller{}, false
	}
	h := digest(token)
	found, at := 0, 0
	for i := range tab.entries {
		eq := subtle.ConstantTimeCompare(h[:], tab.entries[i].hash[:])
		at = subtle.ConstantTimeSelect(eq, i, at)
		found |= eq
	}
	if found == 0 {
		return pipeline.Caller{}, false
	}
	e := &tab.entries[at]
	return pipeline.Caller{Principal: e.Name, Scopes: e.Scopes, Grants: e.grants}, true
}

// Entries returns the tokens of the table in use, in the file's order,
// without their hashes.
func (t *Tokens) Entries() []Entry {
	tab := t.table.Load()
	if tab == nil {
		return nil
	}
	es := make([]Entry, len(tab.entries))
	for i, e := range tab.entries {
		es[i] = e.Entry
		es[i].Grants = slices.Clone(e.Grants)
	}
	return es
}

// Warnings returns what was wrong but not fatal in the file the table in
// use was loaded from (it can be read by other users), as sentences
// without its path, for the log.
func (t *Tokens) Warnings() []string {
	tab := t.table.Load()
	if tab == nil {
		return nil
	}
	return append([]string(nil), tab.warnings...)
}
