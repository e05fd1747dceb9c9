// Package pathless keeps file paths out of messages: writerd names a file
// in a sentence of its own choosing (<data>/writerd.db, or the path the
// user gave), never as the system's error spells it. It imports only the
// standard library.
package pathless

import (
	"errors"
	"io/fs"
)

// Error returns a file error without its path (the *fs.PathError's
// cause), or err as it is.
func Error(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
