package server

import (
	"fmt"
	"net/http"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/problem"
)

// policy is everything Reload replaces at once: the rules, how to find a
// client's address, and the forward-auth settings.
type policy struct {
	cfg       *config.Config
	rules     map[string]*rule
	ordered   []*rule
	clientIP  *clientip.Extractor
	denyCode  int
	ruleField string
	headers   httplimit.HeaderMode
}

// rule is a config rule compiled for deciding.
type rule struct {
	name     string
	limit    floodgate.Limit
	failOpen bool
	shadow   bool
}

// storeKey namespaces a caller's key by rule. Rule names cannot contain '/',
// so distinct (rule, key) pairs never share a store key.
func (r *rule) storeKey(key string) string { return r.name + "/" + key }

func newPolicy(cfg *config.Config) (*policy, error) {
	ex, err := clientip.New(cfg.ClientIP.Resolver())
	if err != nil {
		return nil, fmt.Errorf("client_ip: %w", err)
	}
	p := &policy{
		cfg:       cfg,
		rules:     make(map[string]*rule, len(cfg.Rules)),
		clientIP:  ex,
		denyCode:  cfg.ForwardAuth.DenyStatus,
		ruleField: cfg.ForwardAuth.RuleHeader,
		headers:   cfg.HeaderMode(),
	}
	for _, r := range cfg.Rules {
		if err := r.RateLimit().Validate(); err != nil {
			return nil, fmt.Errorf("rule %q: %w", r.Name, err)
		}
		rl := &rule{name: r.Name, limit: r.RateLimit(), failOpen: r.FailOpen(), shadow: r.Shadow}
		p.rules[r.Name] = rl
		p.ordered = append(p.ordered, rl)
	}
	return p, nil
}

// handleForwardAuth answers a reverse proxy's sub-request: 200 when the
// original client is within the rule, the configured deny status when not.
// The rule comes from the "rule" query parameter or the rule header; the key
// is the client's address found with the trusted-proxy and IPv6-prefix
// rules, so a client cannot choose it.
func (s *Server) handleForwardAuth(w http.ResponseWriter, r *http.Request) {
	p := s.policy.Load()
	name := r.URL.Query().Get("rule")
	if name == "" {
		name = r.Header.Get(p.ruleField)
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
	out := s.decide(r.Context(), rl, key, 1)
	if out.err != nil {
		problem.Error(w, http.StatusInternalServerError, out.err.Error())
		return
	}
	if out.unavailable {
		if rl.failOpen {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("Retry-After", "1")
		problem.Error(w, http.StatusServiceUnavailable, fmt.Sprintf("the rate-limit store is unavailable and rule %q fails closed", rl.name))
		return
	}
	p.writeRateLimitHeaders(w.Header(), rl, out.d)
	if out.allowed {
		w.WriteHeader(http.StatusOK)
		return
	}
	problem.Write(w, problem.Details{
		Type:             problem.QuotaExceeded,
		Title:            "Too Many Requests",
		Status:           p.denyCode,
		Detail:           fmt.Sprintf("rule %q: limit of %s exceeded", rl.name, rl.limit),
		ViolatedPolicies: []string{rl.name},
	})
}
