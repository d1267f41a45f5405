package server

import (
	"net/http"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/ratelimitheader"
)

// writeRateLimitHeaders sets the same rate-limit headers the middleware
// sends (IETF RateLimit/RateLimit-Policy and X-RateLimit-*, as configured),
// and Retry-After when d denied the request.
func (p *policy) writeRateLimitHeaders(h http.Header, rl *rule, d floodgate.Decision) {
	// Rule names are validated as tokens, so they are always valid
	// Structured Fields strings and ForLimit cannot fail.
	pol, _ := ratelimitheader.ForLimit(rl.name, rl.limit)
	ratelimitheader.Write(h, p.headers, "", &pol, d, time.Now())
	if pol != (ratelimitheader.Policy{}) {
		var l ratelimitheader.List
		l.Add(&pol)
		if p.headers == ratelimitheader.Both || p.headers == ratelimitheader.IETF {
			h[ratelimitheader.HeaderPolicy] = []string{l.String()}
		}
	}
}
