package auditlog

import (
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Where a log's signing key lives. Each log has a key of its own, named
// by the log's origin (two logs under one origin are a fork to a
// witness), and the key is found by that origin, which the store records
// (it is public), in a key directory outside the data directory: whoever
// can rewrite the database must not find, beside it, the key that would
// re-sign it.

// LegacyKeyFile is the name of the key file a writerd before the key
// directory kept in the data directory, beside the database. Such a key
// keeps working, with a warning at start-up.
const LegacyKeyFile = "audit-signing.key"

// KeyDir returns the key directory: $XDG_CONFIG_HOME/writerd/audit-keys,
// or ~/.config/writerd/audit-keys. A relative XDG_CONFIG_HOME is ignored,
// as the XDG specification says.
func KeyDir() (string, error) {
	if d := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "writerd", "audit-keys"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil || !filepath.IsAbs(home) {
		return "", errors.New("the audit key directory is not known, since neither XDG_CONFIG_HOME nor HOME is set: set one, or give the key's file with --audit-key")
	}
	return filepath.Join(home, ".config", "writerd", "audit-keys"), nil
}

// KeyPath returns the file of the key of origin in the key directory dir.
// An origin holds '/', so the name is its path escape, which
// OriginOfKeyPath reverses.
func KeyPath(dir, origin string) string {
	return filepath.Join(dir, url.PathEscape(origin)+".key")
}

// OriginOfKeyPath returns the origin whose key KeyPath names path, or
// false if path is no such name.
func OriginOfKeyPath(path string) (string, bool) {
	name, ok := strings.CutSuffix(filepath.Base(path), ".key")
	if !ok {
		return "", false
	}
	origin, err := url.PathUnescape(name)
	if err != nil || url.PathEscape(origin) != name {
		return "", false
	}
	return origin, true
}

// StatePath returns the file, beside a key file, where the checkpointer
// signing with that key remembers the checkpoint it signed last
// (Checkpointer.State): outside the database, as the key is.
func StatePath(keyFile string) string { return keyFile + ".last-checkpoint" }

// KeyExists reports whether a key file is at path: a file that cannot be
// examined counts as one, so that LoadKey says why it cannot be read.
func KeyExists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
