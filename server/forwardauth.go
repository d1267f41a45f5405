package server

import (
	"net/http"

	"github.com/floodgate-rl/floodgate/internal/problem"
)

// handleForwardAuth answers a reverse proxy's sub-request: 200 when the
// original client is within the rule, the configured deny status when not.
// The rule comes from the "rule" query parameter or the rule header; the key
// is the client's address found with the trusted-proxy and IPv6-prefix
// rules, so a client cannot choose it.
func (s *Server) handleForwardAuth(w http.ResponseWriter, r *http.Request, shed error) {
	p := s.policy.Load()
	name := r.URL.Query().Get("rule")
	if name == "" {
		name = r.Header.Get(p.ruleHeader)
	}
	rl, ok := p.ruleFor(w, name)
	if !ok {
		return
	}
	key, err := p.clientIP.Key(r)
	if err != nil {
		problem.Error(w, http.StatusBadRequest, "cannot find the client's address: "+err.Error())
		return
	}
	var q oneCheck
	res := s.decide(r.Context(), &q, rl, key, 1, shed)
	if !s.answerFailure(w, r, rl, &res) {
		return
	}
	p.writeHeaders(w.Header(), rl, &res, s.now())
	if res.Allowed() {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header()["Cache-Control"] = []string{"no-store"}
	o := &res.Outcomes[0] // denied: its one check decided
	problem.Write(w, problem.Quota(p.denyStatus, rl.Name, o.Limit.String(), o.Local))
}
