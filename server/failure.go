package server

import (
	"log/slog"
	"net/http"

	"github.com/floodgate-rl/floodgate/internal/problem"
)

// fail answers a request the server could not serve with problem.Failure
// and logs err with the answer's request id.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, kind, detail string, err error) {
	s.logFailure(r, status, kind, problem.Failure(w, status, kind, detail), err)
}

// logFailure logs a 5xx answer with its request id and err: every 500; a
// 503 (an outage, or a load a flood of requests can cause) through the
// log throttle.
func (s *Server) logFailure(r *http.Request, status int, kind, id string, err error) {
	attrs := []slog.Attr{slog.String("request_id", id), slog.String("kind", kind), slog.Int("status", status),
		slog.String("method", r.Method), slog.String("path", r.URL.Path)}
	if err != nil {
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	if status == http.StatusServiceUnavailable {
		s.failLog.Warn(r.Context(), "request failed", attrs...)
		return
	}
	s.logger.LogAttrs(r.Context(), slog.LevelError, "request failed", attrs...)
}
