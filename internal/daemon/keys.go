package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
)

// Where the daemon finds the audit log's signing key. The store records
// the log's origin (its Origin, ClaimOrigin); the key is the file of that
// origin in the key directory (auditlog.KeyDir, auditlog.KeyPath),
// outside the data directory, or the file --audit-key names (Config's
// KeyFile; on PostgreSQL, the replicas' shared file). A key an earlier
// writerd kept in the data directory (<data>/audit-signing.key) keeps
// working, with a warning that says why and where to move it. A fresh
// install, whose store records no origin and which has no key anywhere,
// gets a new origin and key in the key directory.

// origins is a store that records its audit log's origin (both backends;
// storetest.Origins is the promise).
type origins interface {
	Origin(ctx context.Context) (string, error)
	ClaimOrigin(ctx context.Context, origin string) (string, error)
}

// foundKey is the key the daemon signs with, and where it was found.
type foundKey struct {
	key *auditlog.Key
	// state is the checkpointer's state file (auditlog.StatePath), beside
	// the key, or beside where it belongs for a key still in the data
	// directory; "" if there is no such place.
	state string
	// moveTo is, for a key found in the data directory, where it belongs;
	// "" otherwise, or if the key directory is not known.
	moveTo string
	legacy bool // found in the data directory
}

// keyDir is the key directory the daemon looks in.
func (c Config) keyDir() (string, error) {
	if c.KeyDir != "" {
		return c.KeyDir, nil
	}
	return auditlog.KeyDir()
}

// findKey finds the key of the log of origin ("" if the store records
// none) on a bbolt store, making one for a fresh install. Its errors are
// one sentence, naming where it looked: the key directory's paths, and
// the data directory's file only as <data>/audit-signing.key.
//
// A new key is made only for a log that holds no event: a store that
// holds events but records no origin (and has no checkpoint to take one
// from) had its origin removed, and a new key would sign whatever its
// events now are as a log of its own, past the checkpoint the daemon
// remembers beside the old key.
func (c Config) findKey(origin string, events uint64) (foundKey, error) {
	if origin == "" && events > 0 && (c.KeyFile == "" || !auditlog.KeyExists(c.KeyFile)) &&
		!auditlog.KeyExists(filepath.Join(c.Store.Data, auditlog.LegacyKeyFile)) {
		held := fmt.Sprintf("%d audit events", events)
		if events == 1 {
			held = "1 audit event"
		}
		return foundKey{}, fmt.Errorf("the store holds %s but records no log origin, so the log's signing key cannot be found (was its origin removed?); no new key is made for events already there: give that log's key file with --audit-key", held)
	}
	if c.KeyFile != "" {
		if origin != "" && !auditlog.KeyExists(c.KeyFile) {
			return foundKey{}, fmt.Errorf("the store's audit log (%s) is signed with a key that is not in the file --audit-key names: there is no file there; give the file of that log's key", origin)
		}
		key, err := auditlog.LoadKey(c.KeyFile, c.NewOrigin(), true)
		if err != nil {
			return foundKey{}, err
		}
		if origin != "" && key.Signer.Name() != origin {
			return foundKey{}, fmt.Errorf("the key in the file --audit-key names signs the log %s, but the store's audit log is %s: give the file of that log's key", key.Signer.Name(), origin)
		}
		return foundKey{key: key, state: auditlog.StatePath(c.KeyFile)}, nil
	}
	dir, dirErr := c.keyDir()
	legacy := filepath.Join(c.Store.Data, auditlog.LegacyKeyFile)
	const legacyName = "<data>/" + auditlog.LegacyKeyFile
	inData := func(origin string) (foundKey, error) {
		key, err := auditlog.LoadKey(legacy, "", false)
		if err != nil {
			return foundKey{}, fmt.Errorf("%s: %w", legacyName, err)
		}
		if origin != "" && key.Signer.Name() != origin {
			return foundKey{}, fmt.Errorf("the key in %s signs the log %s, but the store's audit log is %s: give the file of that log's key with --audit-key", legacyName, key.Signer.Name(), origin)
		}
		f := foundKey{key: key, legacy: true}
		if dirErr == nil {
			f.moveTo = auditlog.KeyPath(dir, key.Signer.Name())
			f.state = auditlog.StatePath(f.moveTo)
		}
		return f, nil
	}
	if origin == "" {
		if auditlog.KeyExists(legacy) {
			return inData("")
		}
		if dirErr != nil {
			return foundKey{}, dirErr
		}
		origin = c.NewOrigin()
		path := auditlog.KeyPath(dir, origin)
		key, err := auditlog.LoadKey(path, origin, true)
		if err != nil {
			return foundKey{}, fmt.Errorf("%s: %w", path, err)
		}
		return foundKey{key: key, state: auditlog.StatePath(path)}, nil
	}
	if dirErr == nil {
		path := auditlog.KeyPath(dir, origin)
		if auditlog.KeyExists(path) {
			key, err := auditlog.LoadKey(path, "", false)
			if err != nil {
				return foundKey{}, fmt.Errorf("%s: %w", path, err)
			}
			if key.Signer.Name() != origin {
				return foundKey{}, fmt.Errorf("the key file %s signs the log %s, not the log %s it is named for", path, key.Signer.Name(), origin)
			}
			return foundKey{key: key, state: auditlog.StatePath(path)}, nil
		}
	}
	if auditlog.KeyExists(legacy) {
		return inData(origin)
	}
	where := legacyName
	if dirErr == nil {
		where = auditlog.KeyPath(dir, origin) + " nor in " + legacyName
	}
	return foundKey{}, fmt.Errorf("the store's audit log (%s) has no signing key here: there is none in %s; put that log's key back, or give its file with --audit-key", origin, where)
}

// bindKey finds the key of a bbolt store's log, which s, just opened,
// names by its origin, records the origin if s records none yet, and
// gives the key to the daemon and its checkpointer.
func (d *Daemon) bindKey(ctx context.Context, s Store) error {
	o, ok := s.(origins)
	if !ok {
		return errors.New("the store records no audit log origin")
	}
	origin, err := o.Origin(ctx)
	if err != nil {
		return err
	}
	var events uint64
	if origin == "" {
		err := s.View(ctx, func(tx pipeline.Tx[handlers.Store]) error {
			events, err = tx.Audit().Size()
			return err
		})
		if err != nil {
			return err
		}
	}
	f, err := d.cfg.findKey(origin, events)
	if err != nil {
		return &KeyError{err}
	}
	name := f.key.Signer.Name()
	have, err := o.ClaimOrigin(ctx, name)
	if err != nil {
		return err
	}
	if have != name {
		return &KeyError{fmt.Errorf("the store's audit log is %s, not %s, whose key was found", have, name)}
	}
	if f.legacy {
		msg := "the audit signing key lies in the data directory, beside the database: whoever can rewrite the database can re-sign it with that key; "
		if f.moveTo != "" {
			msg += "move <data>/" + auditlog.LegacyKeyFile + " to " + f.moveTo + " (its directory mode 0700, the file 0600), where writerd finds it by the log's origin"
		} else {
			msg += "move it out of the data directory and give its file with --audit-key"
		}
		d.log.Warn(msg, "move_to", f.moveTo, "origin", name)
	}
	d.setKey(f.key, f.state)
	return nil
}

// setKey gives the daemon and its checkpointer the key, and the
// checkpointer its state file. It runs before the store is served: at
// Open, or as a store that opens in the background opens, before the
// checkpointer reads it (rawAudit).
func (d *Daemon) setKey(key *auditlog.Key, state string) {
	d.checkpointer.Key, d.checkpointer.State = key, state
	d.mu.Lock()
	d.Key = key
	d.mu.Unlock()
}

// SigningKey returns the audit log's signing key, or nil until the store
// opened where it opens in the background and the key is found by the
// log's origin, which the store records.
func (d *Daemon) SigningKey() *auditlog.Key {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Key
}

// Origin returns the audit log's origin, or "" until it is known
// (SigningKey).
func (d *Daemon) Origin() string {
	if k := d.SigningKey(); k != nil {
		return k.Signer.Name()
	}
	return ""
}

// rawAudit is the audit log's storage as the checkpointer reads it: the
// store as soon as it opened, before Pending serves it, so that the
// start-up check runs on it first; until then, Pending's answer.
type rawAudit struct{ d *Daemon }

func (a rawAudit) storage() auditlog.Storage {
	a.d.mu.Lock()
	s := a.d.raw
	a.d.mu.Unlock()
	if s == nil {
		return a.d.Audit()
	}
	return pipeline.AuditStorage[handlers.Store](s)
}

func (a rawAudit) View(ctx context.Context, fn func(auditlog.Reader) error) error {
	return a.storage().View(ctx, fn)
}

func (a rawAudit) Update(ctx context.Context, fn func(auditlog.Writer) error) error {
	return a.storage().Update(ctx, fn)
}

// LocateKey finds, read-only, the key file of the log of origin on the
// bbolt store in the data directory data (origin "" if the store records
// none): the file of origin in the key directory keyDir ("" for
// auditlog.KeyDir), else an earlier writerd's <data>/audit-signing.key;
// and the state file the daemon keeps beside it (auditlog.StatePath), ""
// if there is no place for one. It makes nothing, and its error says
// where it looked, as the daemon's does.
func LocateKey(data, keyDir, origin string) (key, state string, err error) {
	c := Config{Store: StoreConfig{Data: data}, KeyDir: keyDir}
	dir, dirErr := c.keyDir()
	legacy := filepath.Join(data, auditlog.LegacyKeyFile)
	if origin != "" && dirErr == nil {
		if p := auditlog.KeyPath(dir, origin); auditlog.KeyExists(p) {
			return p, auditlog.StatePath(p), nil
		}
	}
	if auditlog.KeyExists(legacy) {
		if origin != "" && dirErr == nil {
			state = auditlog.StatePath(auditlog.KeyPath(dir, origin))
		}
		return legacy, state, nil
	}
	const legacyName = "<data>/" + auditlog.LegacyKeyFile
	switch {
	case origin == "":
		return "", "", errors.New("the store records no audit log origin, by which its key is found, and there is no " + legacyName)
	case dirErr != nil:
		return "", "", fmt.Errorf("the key of the store's audit log (%s) is not in %s, and %w", origin, legacyName, dirErr)
	}
	return "", "", fmt.Errorf("the key of the store's audit log (%s) is neither in %s nor in %s", origin, auditlog.KeyPath(dir, origin), legacyName)
}

// StoreOrigin returns the audit log's origin that an open store records
// ("" if none).
func StoreOrigin(ctx context.Context, s Store) (string, error) {
	if p, ok := s.(*Pending); ok {
		if s = p.Store(); s == nil {
			return "", errors.New("the store is not open")
		}
	}
	o, ok := s.(origins)
	if !ok {
		return "", nil
	}
	return o.Origin(ctx)
}
