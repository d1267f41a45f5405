package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/envoy"
	"github.com/floodgate-rl/floodgate/internal/authtoken"
	"github.com/floodgate-rl/floodgate/internal/connlimit"
	"github.com/floodgate-rl/floodgate/internal/tlsfiles"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/server"
)

// Per-connection limits of serve's listeners.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 10 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 64 << 10
	// grpcMaxMessage bounds a gRPC request; an RLS request is a few hundred
	// bytes.
	grpcMaxMessage = 64 << 10
	// grpcMaxStreams bounds the concurrent calls of one gRPC connection.
	grpcMaxStreams = 1024
	// grpcPingAfter is how long a gRPC connection may be silent before the
	// server pings it; one that does not answer within grpcPingTimeout is
	// closed, so a peer that vanished holds no place.
	grpcPingAfter   = 30 * time.Second
	grpcPingTimeout = 10 * time.Second
	// grpcMinPing is the least time between a client's pings; a client
	// that pings more often is disconnected.
	grpcMinPing = 10 * time.Second
	// secretsPoll is how often the tokens and certificate files are checked
	// for changes.
	secretsPoll = 2 * time.Second
	// sweepEvery is how often the memory store drops replenished keys.
	sweepEvery = time.Minute
	// freeAfterSweep is the number of keys a sweep must drop for serve to
	// return the freed memory to the system at once.
	freeAfterSweep = 10_000
)

// listenCapped opens a TCP listener capped at max connections, with its
// metrics.
func listenCapped(name, addr string, max int, reg prometheus.Registerer) (*connlimit.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	l := connlimit.New(ln, max)
	labels := prometheus.Labels{"listener": name}
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floodgate_connections_open", Help: "Open connections, by listener.", ConstLabels: labels},
			func() float64 { return float64(l.Open()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "floodgate_connections_rejected_total", Help: "Connections closed at once because the listener was at max_connections with none idle, by listener.", ConstLabels: labels},
			func() float64 { return float64(l.Rejected()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "floodgate_connections_evicted_total", Help: "Idle connections closed to make room under max_connections, by listener.", ConstLabels: labels},
			func() float64 { return float64(l.Evicted()) }),
	} {
		if err := reg.Register(c); err != nil {
			_ = ln.Close()
			return nil, err
		}
	}
	return l, nil
}

// newHTTPServer is an http.Server for h on l with serve's per-connection
// limits, over TLS when tlsSrv is not nil, logging connections' errors to
// errLog. A connection whose body stalls
// holds no place under l's cap (connlimit.Bodies).
func newHTTPServer(h http.Handler, l *connlimit.Listener, tlsSrv *tlsfiles.Server, errLog *log.Logger) *http.Server {
	s := &http.Server{
		Handler:           connlimit.Bodies(h),
		ConnContext:       l.ConnContext,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         l.ConnState,
		ErrorLog:          errLog,
	}
	if tlsSrv != nil {
		s.TLSConfig = tlsSrv.Config("h2", "http/1.1")
	}
	return s
}

// serveHTTP serves s on l, over TLS if s has a TLS config.
func serveHTTP(s *http.Server, l net.Listener) error {
	if s.TLSConfig != nil {
		return s.ServeTLS(l, "", "")
	}
	return s.Serve(l)
}

// scheme is the URL scheme of a listener.
func scheme(tlsSrv *tlsfiles.Server) string {
	if tlsSrv != nil {
		return "https"
	}
	return "http"
}

// isLoopback reports whether addr's host is a loopback address or
// localhost; an empty host (every interface) is not.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// exposable is a listener warnExposed checks: what set it (a config key,
// or the variables of --envoy-env), its address, and how to keep it on
// this machine in the same terms.
type exposable struct{ name, addr, local string }

// configListeners are serve's listeners as a config file sets them, with
// the fix for each: bind to loopback, or turn tokens on.
func configListeners(listen, grpcListen string) ([]exposable, string) {
	return []exposable{
		{"listen", listen, "set listen to a loopback address (127.0.0.1:PORT)"},
		{"grpc_listen", grpcListen, "set grpc_listen to a loopback address (127.0.0.1:PORT)"},
	}, "set auth.tokens_file"
}

// warnExposed warns, on stderr and in the log, about each listener that
// others can reach while anyone may use it: beyond loopback with no tokens.
// The warning says how to fix it: the listener's local fix, or authFix.
func warnExposed(stderr io.Writer, logger *slog.Logger, auth bool, listeners []exposable, authFix string) {
	exposed, msgs := exposedWarnings(auth, listeners, authFix)
	for i, msg := range msgs {
		fmt.Fprintf(stderr, "WARNING: %s\n", msg)
		logger.Warn("listening beyond loopback without authentication", "listener", exposed[i].name, "addr", exposed[i].addr)
	}
}

// exposedWarnings returns the listeners warnExposed warns about, with the
// text of each warning: `config validate` prints them too.
func exposedWarnings(auth bool, listeners []exposable, authFix string) (exposed []exposable, msgs []string) {
	if auth {
		return nil, nil
	}
	for _, l := range listeners {
		if l.addr == "" || isLoopback(l.addr) || strings.HasPrefix(l.addr, "/") || strings.HasPrefix(l.addr, "@") {
			continue // a unix socket (GRPC_UDS) is this machine's only
		}
		exposed = append(exposed, l)
		msgs = append(msgs, fmt.Sprintf("%s %s is reachable beyond this machine and needs no token: anyone who reaches it can decide, reset and list limits. "+
			"To keep it on this machine %s; to require tokens %s (docs/SECURITY.md).", l.name, l.addr, l.local, authFix))
	}
	return exposed, msgs
}

// secrets are the files serve reads again on SIGHUP and when they change:
// the tokens and the listeners' certificates.
type secrets struct {
	srv    atomic.Pointer[server.Server] // nil until serve
	tls    *tlsfiles.Server              // nil: no TLS
	logger *slog.Logger
	auth   atomic.Pointer[config.Auth]
	tokens atomic.Pointer[server.Tokens]
	stamp  atomic.Pointer[string] // the tokens file's size and time
}

// newSecrets returns the secrets in force: auth's tokens (already read)
// and the listeners' TLS files.
func newSecrets(auth config.Auth, tlsSrv *tlsfiles.Server, tokens *server.Tokens, logger *slog.Logger) *secrets {
	s := &secrets{tls: tlsSrv, logger: logger}
	s.auth.Store(&auth)
	s.tokens.Store(tokens)
	st := fileStamp(auth.TokensFile)
	s.stamp.Store(&st)
	return s
}

// serve makes reloads of the tokens reach srv too.
func (s *secrets) serve(srv *server.Server) {
	srv.SetTokens(s.tokens.Load())
	s.srv.Store(srv)
}

// current returns the tokens in force (nil: no authentication).
func (s *secrets) current() *server.Tokens { return s.tokens.Load() }

// reloadTokens reads the tokens of auth and puts them in force; on error
// the tokens in force stay.
func (s *secrets) reloadTokens(auth config.Auth, why string) {
	st := fileStamp(auth.TokensFile)
	tokens, err := auth.Tokens()
	if err != nil {
		s.logger.Error("tokens reload failed; keeping the tokens in force", "why", why, "err", err)
		return
	}
	if tokens == nil && s.tokens.Load() != nil {
		s.logger.Error("a reload cannot turn authentication off; keeping the tokens in force (restart to serve without tokens)", "why", why)
		return
	}
	s.auth.Store(&auth)
	s.stamp.Store(&st)
	s.tokens.Store(tokens)
	if srv := s.srv.Load(); srv != nil {
		srv.SetTokens(tokens)
	}
	if tokens == nil {
		return // no authentication before, none now
	}
	s.logger.Info("tokens reloaded", "why", why, "tokens", strings.Join(tokens.Names(), ","))
}

// reload reads every file again (SIGHUP), with auth from the config now in
// force.
func (s *secrets) reload(auth config.Auth) {
	s.reloadTokens(auth, "SIGHUP")
	if s.tls != nil {
		if err := s.tls.Reload(); err != nil {
			s.logger.Error("certificate reload failed; keeping the certificate in force", "err", err)
		} else {
			s.logger.Info("certificate reloaded")
		}
	}
}

// watch reloads the tokens file and the certificate files when they change,
// until ctx is done.
func (s *secrets) watch(ctx context.Context) {
	t := time.NewTicker(secretsPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if auth := *s.auth.Load(); auth.TokensFile != "" && fileStamp(auth.TokensFile) != *s.stamp.Load() {
			s.reloadTokens(auth, "tokens file changed")
		}
		if s.tls != nil {
			if changed, err := s.tls.ReloadIfChanged(); err != nil {
				s.logger.Error("certificate files changed but do not load; keeping the certificate in force", "err", err)
			} else if changed {
				s.logger.Info("certificate reloaded", "why", "files changed")
			}
		}
	}
}

// fileStamp is a file's size and modification time ("" for no file).
func fileStamp(name string) string {
	if name == "" {
		return ""
	}
	fi, err := os.Stat(name)
	if err != nil {
		return "missing"
	}
	return fmt.Sprintf("%d:%d", fi.Size(), fi.ModTime().UnixNano())
}

// grpcOptions are the gRPC server's TLS, token check and per-connection
// limits.
func grpcOptions(tlsSrv *tlsfiles.Server, tokens func() *server.Tokens, connErr *connErrors, maxInFlight int) []grpc.ServerOption {
	if maxInFlight <= 0 {
		maxInFlight = server.DefaultMaxInFlight
	}
	inFlight := make(chan struct{}, maxInFlight)
	// limit holds a place among the calls in progress, or refuses the call
	// when there is none; health checks are never refused.
	limit := func(method string) (release func(), err error) {
		// Quota streams last as long as their Envoy: they are bounded by
		// the connection cap and each connection's streams, not held among
		// the calls in progress.
		if strings.HasPrefix(method, "/grpc.health.v1.Health/") || strings.HasPrefix(method, "/"+envoy.QuotaServiceName+"/") {
			return func() {}, nil
		}
		select {
		case inFlight <- struct{}{}:
			return func() { <-inFlight }, nil
		default:
			return nil, status.Error(codes.Unavailable, "the server is at its limit of concurrent calls (max_in_flight); retry later")
		}
	}
	check := func(ctx context.Context, method string) error {
		t := tokens()
		if t == nil || strings.HasPrefix(method, "/grpc.health.v1.Health/") {
			return nil // health checks are open, as /healthz
		}
		var value string
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get("authorization"); len(v) > 0 {
				value = v[0]
			}
		}
		_, err := t.Authorize(value, server.ScopeDecide)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, authtoken.ErrForbidden):
			return status.Error(codes.PermissionDenied, "the token lacks the decide scope")
		case errors.Is(err, authtoken.ErrMissing):
			return status.Error(codes.Unauthenticated, "send a token in the metadata as authorization: Bearer TOKEN")
		}
		return status.Error(codes.Unauthenticated, "the bearer token is not valid")
	}
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			release, err := limit(info.FullMethod)
			if err != nil {
				return nil, err
			}
			defer release()
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			release, err := limit(info.FullMethod)
			if err != nil {
				return err
			}
			defer release()
			return h(srv, ss)
		}),
		grpc.MaxRecvMsgSize(grpcMaxMessage),
		grpc.MaxConcurrentStreams(grpcMaxStreams),
		grpc.MaxHeaderListSize(maxHeaderBytes),
		grpc.ConnectionTimeout(readHeaderTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idleTimeout, Time: grpcPingAfter, Timeout: grpcPingTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: grpcMinPing, PermitWithoutStream: true}),
	}
	if tlsSrv != nil {
		opts = append(opts, grpc.Creds(connErr.grpcCreds("grpc_listen", credentials.NewTLS(tlsSrv.Config("h2")))))
	}
	return opts
}

// serveMemory registers the memory store's metrics and sweeps it every
// minute until ctx is done, so its memory is given back while idle.
func serveMemory(ctx context.Context, m *memory.Store, reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floodgate_memory_keys", Help: "Keys the memory store holds."},
			func() float64 { return float64(m.Stats().Keys) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floodgate_memory_max_keys", Help: "The memory store's cap on keys (store.max_keys)."},
			func() float64 { return float64(m.Stats().MaxKeys) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "floodgate_memory_evictions_total", Help: "Keys the memory store evicted, least recently decided first, to stay within store.max_keys."},
			func() float64 { return float64(m.Stats().Evictions) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	go func() {
		t := time.NewTicker(sweepEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				before := m.Len()
				m.Sweep()
				// After a burst, hand the pages back now rather than over
				// the runtime's slow background scavenging.
				if before-m.Len() >= freeAfterSweep {
					debug.FreeOSMemory()
				}
			}
		}
	}()
	return nil
}
