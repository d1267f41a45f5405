package server

import (
	"net/http"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
)

// writeRateLimitHeaders sets the same rate-limit headers the middleware
// sends (IETF RateLimit/RateLimit-Policy and X-RateLimit-*, as configured),
// and Retry-After when d denied the request.
func (p *policy) writeRateLimitHeaders(h http.Header, rl *rule, d floodgate.Decision) {
	// Rule names are validated as tokens, so they are always valid
	// Structured Fields strings and WriteHeaders cannot fail.
	_ = httplimit.WriteHeaders(h, p.headers, rl.name, rl.limit, d, time.Now())
}
