// Package syncbuf is a bytes.Buffer safe for one writer goroutine (a
// process's output, a server's log) and readers in another (a test).
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects what is written to it. The zero value is ready to use;
// it is safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
