package pathless_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/writerd/writerd/internal/pathless"
)

// Ensure a file error loses its path, wrapped or not, and keeps its kind.
func TestError_DropsThePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret-name")
	_, err := os.Open(path)
	for _, e := range []error{err, fmt.Errorf("open: %w", err)} {
		got := pathless.Error(e)
		if strings.Contains(got.Error(), "secret-name") || !errors.Is(got, fs.ErrNotExist) {
			t.Errorf("Error(%v) = %v, want the cause without the path", e, got)
		}
	}
	plain := errors.New("no file here")
	if pathless.Error(plain) != plain {
		t.Error("an error that is not a file error changed")
	}
}
