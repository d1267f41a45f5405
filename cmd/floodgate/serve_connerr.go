package main

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/credentials"

	"github.com/floodgate-rl/floodgate/internal/logthrottle"
)

// connErrorLogInterval is the least time between two log lines of
// per-connection errors: a scanner or a flood of plain requests to a TLS
// port makes one a connection.
const connErrorLogInterval = 10 * time.Second

// The kinds of floodgate_connection_errors_total.
const (
	connErrHandshake = "tls_handshake"
	connErrOther     = "other"
)

// connErrors counts the errors of single connections (a failed TLS
// handshake, a connection net/http or gRPC gives up on) by listener and
// kind, and logs them through a throttle that says how many it held back.
type connErrors struct {
	count *prometheus.CounterVec
	warn  *logthrottle.Logger
}

func newConnErrors(reg prometheus.Registerer, logger *slog.Logger) (*connErrors, error) {
	c := &connErrors{
		count: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floodgate_connection_errors_total",
			Help: "Errors of single connections (kind tls_handshake: a failed TLS handshake; other: a connection the server gave up on), by listener."},
			[]string{"listener", "kind"}),
		warn: logthrottle.New(logger, connErrorLogInterval, nil),
	}
	if err := reg.Register(c.count); err != nil {
		return nil, err
	}
	return c, nil
}

// report counts and logs one error of a connection to listener.
func (c *connErrors) report(listener, kind, msg string) {
	c.count.WithLabelValues(listener, kind).Inc()
	c.warn.Warn(context.Background(), "connection error", slog.String("listener", listener), slog.String("kind", kind), slog.String("err", msg))
}

// httpLog is an http.Server's ErrorLog for listener: each line is one
// connection's error.
func (c *connErrors) httpLog(listener string) *log.Logger {
	return log.New(httpErrorWriter{c, listener}, "", 0)
}

// httpErrorWriter reports each line net/http logs.
type httpErrorWriter struct {
	c        *connErrors
	listener string
}

func (w httpErrorWriter) Write(p []byte) (int, error) {
	msg := string(bytes.TrimSpace(p))
	kind := connErrOther
	if strings.Contains(msg, "TLS handshake error") {
		kind = connErrHandshake
	}
	w.c.report(w.listener, kind, msg)
	return len(p), nil
}

// grpcCreds wraps a gRPC listener's TLS so that failed handshakes are
// reported.
func (c *connErrors) grpcCreds(listener string, tc credentials.TransportCredentials) credentials.TransportCredentials {
	return reportingCreds{TransportCredentials: tc, c: c, listener: listener}
}

type reportingCreds struct {
	credentials.TransportCredentials
	c        *connErrors
	listener string
}

func (r reportingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := r.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		r.c.report(r.listener, connErrHandshake, "TLS handshake error from "+conn.RemoteAddr().String()+": "+err.Error())
	}
	return out, info, err
}

func (r reportingCreds) Clone() credentials.TransportCredentials {
	return reportingCreds{TransportCredentials: r.TransportCredentials.Clone(), c: r.c, listener: r.listener}
}
