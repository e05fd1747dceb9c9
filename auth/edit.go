package auth

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/writerd/writerd/internal/atomicfile"
	"github.com/writerd/writerd/pipeline"
)

var (
	// ErrNameTaken: Create was given the name of a token in the file,
	// compared without regard to case.
	ErrNameTaken = errors.New("a token with this name exists")
	// ErrNoSuchName: Revoke was given a name no token in the file has.
	ErrNoSuchName = errors.New("no token has this name")
	// ErrBusy: another edit held the file's lock for longer than an edit
	// waits (10 s).
	ErrBusy = errors.New("the tokens file is being edited by another process")
	// ErrInvalidName: a name that pipeline.ValidPrincipal refuses.
	ErrInvalidName = errors.New("a token's name is 1 to 128 printable ASCII characters without spaces")
)

// Create makes a token named name with scopes, and the named scopes
// grants (an upstream's own, which its tools need besides read or write),
// adds its hash to the tokens file at path and returns the token, which
// exists nowhere else: the caller must hand it over once and forget it. A
// missing file is created with mode 0600, and its directory with mode
// 0700 if that is missing too. A name already in the file, compared
// without regard to case, is ErrNameTaken; none of writerd's own scopes
// is ErrScope, and a grant that pipeline.ValidScopeName refuses
// ErrScopeList; a grant given twice counts once.
func Create(path, name string, scopes pipeline.Scope, grants ...string) (string, error) {
	if !pipeline.ValidPrincipal(name) {
		return "", ErrInvalidName
	}
	if scopes == 0 || scopes&^pipeline.AllScopes != 0 {
		return "", ErrScope
	}
	var named []string
	for _, g := range grants {
		if !pipeline.ValidScopeName(g) {
			return "", ErrScopeList
		}
		if !slices.Contains(named, g) {
			named = append(named, g)
		}
	}
	token := Generate()
	e := entry{
		Entry:  Entry{Name: name, Scopes: scopes, Grants: named, CreatedAt: time.Now().UTC().Truncate(time.Second)},
		hash:   digest(token),
		grants: strings.Join(named, " "),
	}
	err := edit(path, true, func(t *table) error {
		for _, o := range t.entries {
			if strings.EqualFold(o.Name, name) {
				return ErrNameTaken
			}
		}
		t.entries = append(t.entries, e)
		return nil
	})
	if err != nil {
		return "", err
	}
	return token, nil
}

// Revoke removes the token named name, exactly as written, from the tokens
// file at path; ErrNoSuchName if there is none. A missing file is an
// error that satisfies errors.Is(err, fs.ErrNotExist), and nothing is
// created. A running daemon accepts the token until it reloads the file.
func Revoke(path, name string) error {
	return edit(path, false, func(t *table) error {
		for i, o := range t.entries {
			if o.Name == name {
				t.entries = append(t.entries[:i], t.entries[i+1:]...)
				return nil
			}
		}
		return ErrNoSuchName
	})
}

// edit changes the tokens file at path under its lock, atomically: it
// reads the file as Load does (a missing one is empty if create is set,
// and otherwise an error, before anything is made), applies change,
// and writes the result to a new file in the same directory, which it
// syncs and renames over the old one before syncing the directory. A
// reader sees the old file or the new one, never a part of either; a
// crash leaves one or the other, and at worst a temporary file
// (.NAME.tmp-*) beside them. Two edits, in one process or two, never lose
// each other's change: each holds the lock from its read to its rename.
//
// A symbolic link is followed, and its target replaced. The new file keeps
// the old one's mode and its owner and group; a new file has mode 0600.
func edit(path string, create bool, change func(*table) error) error {
	resolved, err := filepath.EvalSymlinks(path)
	switch {
	case err == nil:
		path = resolved
	case !errors.Is(err, fs.ErrNotExist):
		return fileError("cannot be found", err)
	case !create:
		return fileError("cannot be read", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fileError("directory cannot be made", err)
	}
	unlock, err := lock(path + ".lock")
	if err != nil {
		return err
	}
	defer unlock()

	tab, old := &table{}, fs.FileInfo(nil)
	switch f, err := os.Open(path); {
	case errors.Is(err, fs.ErrNotExist) && create:
	case err != nil:
		return fileError("cannot be read", err)
	default:
		tab, old, err = readTable(f)
		f.Close()
		if err != nil {
			return err
		}
	}
	if err := change(tab); err != nil {
		return err
	}
	b, err := tab.encode()
	if err != nil {
		return err
	}
	return replace(path, old, b)
}

// replace writes b to a new file beside path and renames it over path,
// with the old file's mode and owner.
func replace(path string, old fs.FileInfo, b []byte) error {
	f, err := atomicfile.New(path, 0o600)
	if err != nil {
		return fileError("cannot be written", err)
	}
	defer f.Abort() // nothing once committed
	if old != nil {
		if err := f.Chmod(old.Mode().Perm()); err != nil {
			return fileError("cannot keep its mode", err)
		}
		if err := keepOwner(f.File, old); err != nil {
			return err
		}
	}
	if _, err := f.Write(b); err != nil {
		return fileError("cannot be written", err)
	}
	if err := f.Commit(); err != nil {
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			switch pe.Op {
			case "sync":
				return fileError("cannot be synced", err)
			case "rename":
				return fileError("cannot be replaced", err)
			case "syncdir":
				return fileError("directory cannot be synced", err)
			}
		}
		return fileError("cannot be written", err)
	}
	return nil
}
