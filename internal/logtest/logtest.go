// Package logtest holds the log sink tests read: a buffer that a
// logger's goroutines write to while the test reads it, safely under
// -race. It imports only the standard library, so that any package's
// tests may use it.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer is a log's output: Write from any goroutine, String to read what
// was written so far. The zero Buffer is empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
