package server

import (
	"net/http"

	"github.com/floodgate-rl/floodgate"
)

func writeRateLimitHeaders(h http.Header, rl *rule, d floodgate.Decision) {}
