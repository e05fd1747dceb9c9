package bolt

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
)

// redactedError is a storage error whose text names files under the data
// directory as <data>/… (docs/DESIGN.md section 8: no log line or answer holds
// a file path). It unwraps to the original error, for errors.Is and
// errors.As.
type redactedError struct {
	text string
	err  error
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }

// redact returns err with every mention of dir replaced by <data>. A path
// outside dir that an os error names (a parent that is not a directory,
// say) is replaced by <data> as well.
func redact(dir string, err error) error {
	if err == nil {
		return nil
	}
	var re *redactedError
	var de *DamagedError
	if errors.As(err, &re) && re == err || errors.As(err, &de) && de == err || err == ErrLocked {
		return err
	}
	text := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path != "" && !within(pe.Path, dir) {
		text = strings.ReplaceAll(text, pe.Path, "<data>")
	}
	for _, d := range []string{dir, filepath.Clean(dir)} {
		if len(d) > 1 {
			text = strings.ReplaceAll(text, d, "<data>")
		}
	}
	return &redactedError{text: text, err: err}
}

// within reports whether path is dir or lies under it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
