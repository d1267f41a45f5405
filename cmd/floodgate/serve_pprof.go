package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// startPprof serves Go's runtime profiles (net/http/pprof's /debug/pprof/)
// on a listener of their own, for `go tool pprof
// http://ADDR/debug/pprof/profile?seconds=10`, when serve's --pprof-listen
// names an address. The address must be a loopback one: profiles show the
// process's internals and cost CPU. It returns the listener's address and
// a function that closes it.
func startPprof(addr string, logger *slog.Logger) (string, func(), error) {
	if !isLoopback(addr) {
		return "", nil, fmt.Errorf("--pprof-listen %s: the profiling listener takes a loopback address only, such as 127.0.0.1:6060", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--pprof-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	logger.Info("serving Go profiles (--pprof-listen)", "addr", ln.Addr().String(), "path", "/debug/pprof/")
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}
