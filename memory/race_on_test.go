//go:build race

package memory

// raceEnabled reports whether the race detector is on: single-goroutine
// tests of scale run smaller under it, where they are 30 times slower and
// have nothing for it to find.
const raceEnabled = true
