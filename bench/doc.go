// Package bench compares floodgate with the libraries its users would pick
// instead, on the same machine in the same run. It is a module of its own so
// peer libraries never enter floodgate's dependencies.
//
// Run from this folder:
//
//	go test -run '^$' -bench . -benchmem -count 5 | tee memory.txt
package bench
