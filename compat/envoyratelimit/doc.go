// Package envoyratelimit holds floodgate's side-by-side test against the
// real envoyproxy/ratelimit: its own module, like bench/, so that the peer
// never enters floodgate's go.mod.
//
// The test builds the peer at the version pinned in go.mod (from the Go
// module proxy), starts it and floodgate's Envoy service on loopback, each
// with a Redis server of its own (spawned for the test, never the shared
// harness), loads both with the peer's own example and integration rule
// files, sends both the peer's integration-test request sequences, and
// diffs every answer field by field. The deliberate differences are listed
// once, in [Differences] (and, from it, in docs/ENVOY.md); any other
// difference fails the test.
//
// Run it with `make test` (or `go test ./...` in this folder). It needs
// redis-server on the PATH and a Go toolchain; the first run downloads and
// builds the peer (about a minute), later runs take it from the build cache.
package envoyratelimit
