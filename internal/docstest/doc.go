// Package docstest holds the tests that keep the repository's documents
// true: the README's library example compiles and prints what it says,
// docs/GRPC.md's retry client builds and retries against a real server,
// the table of timeouts and key prefixes in docs/MIDDLEWARE.md and
// docs/GRPC.md gives the keys a request writes to a real Redis, the
// reverse-proxy recipes of docs/PROXIES.md work against real nginx and
// Caddy, and the container and Kubernetes files parse and hold what a
// deployment needs; TestRooms holds every package to the rooms table of
// docs/ARCHITECTURE.md, TestGoDirective each module's go directive to the
// lowest release it needs, and TestExportedNamesDocumented the library's
// exported names to doc comments. It has no code of its own.
//
// nginx and Caddy are Debian packages (nginx-light, caddy); the proxy
// tests skip when they are not installed, unless FLOODGATE_REQUIRE_PROXIES=1
// (which `make test` sets, after installing them).
package docstest
