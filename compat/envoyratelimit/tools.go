//go:build tools

// This file keeps the peer's service command in the module's dependency
// graph, so `go build github.com/envoyproxy/ratelimit/src/service_cmd` works
// here at the pinned version.
package envoyratelimit

import _ "github.com/envoyproxy/ratelimit/src/service_cmd"
