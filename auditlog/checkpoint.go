package auditlog

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Checkpoint is the state of the log a signature vouches for, in the C2SP
// tlog-checkpoint format: the log's origin, the tree size and the root
// hash, one a line, signed as a note (golang.org/x/mod/sumdb/note,
// Ed25519).
type Checkpoint struct {
	Origin string
	Size   uint64
	Root   tlog.Hash
}

// Text is the checkpoint's body, the text its signature covers.
func (c Checkpoint) Text() string {
	return fmt.Sprintf("%s\n%d\n%s\n", c.Origin, c.Size, base64.StdEncoding.EncodeToString(c.Root[:]))
}

// Sign returns the signed checkpoint: its text, a blank line, the
// signature line.
func (c Checkpoint) Sign(s note.Signer) ([]byte, error) {
	return note.Sign(&note.Note{Text: c.Text()}, s)
}

// Errors of OpenCheckpoint.
var (
	// ErrBadSignature: no signature of the log's key verifies the note.
	ErrBadSignature = errors.New("the checkpoint's signature does not verify with the log's key")
	// ErrMalformed: the signed text is not a checkpoint.
	ErrMalformed = errors.New("the checkpoint is not in the tlog-checkpoint format")
)

// OpenCheckpoint verifies a signed checkpoint with the log's verifier key
// and parses it. Its origin must be the key's name.
func OpenCheckpoint(signed []byte, v note.Verifier) (Checkpoint, error) {
	n, err := note.Open(signed, note.VerifierList(v))
	var unverified *note.UnverifiedNoteError
	var invalid *note.InvalidSignatureError
	switch {
	case errors.As(err, &unverified), errors.As(err, &invalid):
		return Checkpoint{}, ErrBadSignature
	case err != nil:
		return Checkpoint{}, ErrMalformed
	}
	c, err := ParseCheckpoint(n.Text)
	if err != nil {
		return Checkpoint{}, err
	}
	if c.Origin != v.Name() {
		return Checkpoint{}, ErrBadSignature
	}
	return c, nil
}

// ParseSigned parses a signed checkpoint without verifying its signature:
// for a server showing its own checkpoints, never for an auditor.
func ParseSigned(signed []byte) (Checkpoint, error) {
	return ParseCheckpoint(textOf(signed))
}

// ParseCheckpoint parses a checkpoint's text, without its signature.
// Extension lines after the root are allowed and ignored.
func ParseCheckpoint(text string) (Checkpoint, error) {
	lines := strings.SplitN(text, "\n", 4)
	if len(lines) < 4 || lines[0] == "" {
		return Checkpoint{}, ErrMalformed
	}
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil || strconv.FormatUint(size, 10) != lines[1] {
		return Checkpoint{}, ErrMalformed
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		return Checkpoint{}, ErrMalformed
	}
	c := Checkpoint{Origin: lines[0], Size: size}
	copy(c.Root[:], root)
	return c, nil
}

// Key is the log's signing key, which lives in a file of its own, never in
// the database: whoever can change the database cannot sign a checkpoint.
type Key struct {
	Signer   note.Signer
	Verifier note.Verifier
	// VerifierKey is the public key in note's text form, for auditors
	// (writerd audit key).
	VerifierKey string
}

// LoadKey reads the signing key at path, or, if there is none and create
// is set, makes one for a new log whose origin is origin, and writes it
// there with mode 0600 (its directory 0700). A key file others can read
// or write is refused: it signs the log's checkpoints.
func LoadKey(path, origin string, create bool) (*Key, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		return createKey(path, origin)
	}
	if err != nil {
		return nil, keyError("read", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, keyError("read", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, errors.New("the audit signing key file can be read or written by other users; make it private (chmod 600)")
	}
	return parseKey(b)
}

// keyFile is the key file's content: the signer key, then the verifier
// key, one a line, in note's text forms.
func parseKey(b []byte) (*Key, error) {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		return nil, errors.New("the audit signing key file is not a writerd key file")
	}
	s, err := note.NewSigner(strings.TrimSpace(lines[0]))
	if err != nil {
		return nil, errors.New("the audit signing key file holds no valid signer key")
	}
	vkey := strings.TrimSpace(lines[1])
	v, err := note.NewVerifier(vkey)
	if err != nil || v.Name() != s.Name() || v.KeyHash() != s.KeyHash() {
		return nil, errors.New("the audit signing key file holds no verifier key of its signer")
	}
	return &Key{Signer: s, Verifier: v, VerifierKey: vkey}, nil
}

func createKey(path, origin string) (*Key, error) {
	skey, vkey, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		return nil, fmt.Errorf("auditlog: generate the signing key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, keyError("create", err)
	}
	content := []byte(skey + "\n" + vkey + "\n")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return LoadKey(path, origin, false) // made meanwhile by another process
	}
	if err != nil {
		return nil, keyError("create", err)
	}
	if _, err := f.Write(content); err != nil {
		f.Close()
		os.Remove(path)
		return nil, keyError("write", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return nil, keyError("write", err)
	}
	if err := f.Close(); err != nil {
		return nil, keyError("write", err)
	}
	return parseKey(content)
}

// keyError names what failed without the key file's path.
func keyError(what string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("cannot %s the audit signing key file: %w", what, err)
}

// ParseVerifierKey parses a verifier key an auditor kept (writerd audit
// key's output).
func ParseVerifierKey(vkey string) (note.Verifier, error) {
	v, err := note.NewVerifier(strings.TrimSpace(vkey))
	if err != nil {
		return nil, errors.New("not a verifier key (writerd audit key prints one)")
	}
	return v, nil
}

// KeyName names a verifier key in messages as a note's signature line
// does: its name, a plus and the hex of its key hash.
func KeyName(v note.Verifier) string {
	return fmt.Sprintf("%s+%08x", v.Name(), v.KeyHash())
}
