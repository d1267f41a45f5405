package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// CheckListen checks a listen address as serve will listen on it, without
// listening or looking anything up: host:port with a port from 0 to 65535
// (or an /etc/services name) and a host that is empty (every interface),
// an IP address or localhost. Other host names are refused, as serve would
// have to resolve them at start. The error says what is wrong and how to
// write it.
func CheckListen(addr string) error {
	const how = "; write host:port, such as 127.0.0.1:8080 or :8080"
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return fmt.Errorf("is not a listen address: %s%s", ae.Err, how)
		}
		return fmt.Errorf("is not a listen address%s", how)
	}
	if port == "" {
		return fmt.Errorf("has no port%s", how)
	}
	if n, err := strconv.ParseUint(port, 10, 64); err == nil {
		if n > 65535 {
			return fmt.Errorf("has port %s, over 65535", port)
		}
	} else if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("has port %q, which is not a number from 0 to 65535%s", port, strings.TrimPrefix(how, ";"))
	}
	switch {
	case host == "" || strings.EqualFold(host, "localhost"):
		return nil
	case validIP(host):
		return nil
	}
	if full, ok := shorthandIPv4(host); ok {
		return fmt.Errorf("has host %q, a shorthand of %s that serve does not read as an address; write %s", host, full, net.JoinHostPort(full, port))
	}
	if validHostname(host) {
		return fmt.Errorf("has host %q, a host name: a listener needs an IP address of this machine (0.0.0.0 or an empty host: every interface; 127.0.0.1: this machine only) or localhost, and is never looked up in DNS; write such as %s", host, net.JoinHostPort("0.0.0.0", port))
	}
	return fmt.Errorf("has host %q, which is not an IP address%s", host, how)
}

// validIP reports whether host is an IP address as a listener reads it,
// an IPv6 zone (fe80::1%eth0) included.
func validIP(host string) bool {
	_, err := netip.ParseAddr(host)
	return err == nil
}

// shorthandIPv4 returns the dotted quad of an inet_aton shorthand such as
// "0" (0.0.0.0) or "127.1" (127.0.0.1): one to three decimal parts, the
// last filling the bytes left.
func shorthandIPv4(host string) (string, bool) {
	parts := strings.Split(host, ".")
	if len(parts) > 3 {
		return "", false
	}
	var out [4]uint64
	for i, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" || len(p) > 10 {
			return "", false
		}
		n, _ := strconv.ParseUint(p, 10, 64)
		if i < len(parts)-1 {
			if n > 255 {
				return "", false
			}
			out[i] = n
			continue
		}
		rest := 4 - i // bytes the last part fills
		if n >= 1<<(8*rest) {
			return "", false
		}
		for j := 3; j >= i; j-- {
			out[j] = n & 0xff
			n >>= 8
		}
	}
	return fmt.Sprintf("%d.%d.%d.%d", out[0], out[1], out[2], out[3]), true
}

// validHostname reports whether h is a DNS name: dot-separated labels of
// letters, digits and hyphens.
func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// listener is one listen address of the file.
type listener struct{ path, addr string }

// listeners returns the listeners serve opens: listen, grpc_listen when
// the Envoy service is on (grpc true) and metrics_listen when set.
func (c *Config) listeners(grpc bool) []listener {
	ls := []listener{{"listen", c.Listen}}
	if grpc {
		ls = append(ls, listener{"grpc_listen", c.GRPCListen})
	}
	if c.MetricsListen != "" {
		ls = append(ls, listener{"metrics_listen", c.MetricsListen})
	}
	return ls
}

// checkListeners checks each listen address and that no two of the
// listeners serve opens take the same port on the same interface.
func (c *Config) checkListeners() []error {
	var errs []error
	for _, l := range []listener{{"listen", c.Listen}, {"grpc_listen", c.GRPCListen}, {"metrics_listen", c.MetricsListen}} {
		if l.addr == "" {
			continue // metrics_listen: off
		}
		if err := CheckListen(l.addr); err != nil {
			errs = append(errs, c.lines.Error(l.path, l.addr, err.Error()))
		}
	}
	// grpc_listen has a default that matters only with the Envoy service;
	// written in the file, it is held to its own port anyway.
	_, grpcWritten := c.lines["grpc_listen"]
	return append(errs, leaves(c.ListenerClashes(c.EnvoyConfig != "" || grpcWritten))...)
}

// ListenerClashes reports each pair of the listeners serve opens (listen,
// grpc_listen when grpc is true, metrics_listen) that would take the same
// port on the same interface: the same address, or a port that one of
// them takes on every interface. Port 0 (a port the system picks) never
// clashes, and an address CheckListen refuses is left to its error. nil if
// none clash.
func (c *Config) ListenerClashes(grpc bool) error {
	var errs []error
	ls := c.listeners(grpc)
	for i, b := range ls {
		for _, a := range ls[:i] {
			if why := ListenClash(a.addr, b.addr); why != "" {
				errs = append(errs, c.lines.Error(b.path, b.addr, why+" as "+a.path+" ("+a.addr+"); give "+b.path+" a port of its own"))
			}
		}
	}
	for _, e := range errs {
		if e != nil {
			return errors.Join(errs...)
		}
	}
	return nil
}

// ListenClash says why listeners on the addresses a and b cannot both
// listen: "takes the same address", "takes the same port on every
// interface", or "" when they can. Port 0 (a port the system picks) never
// clashes, and an address CheckListen refuses is left to its error.
func ListenClash(a, b string) string {
	if CheckListen(a) != nil || CheckListen(b) != nil {
		return ""
	}
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	na, _ := net.LookupPort("tcp", pa) // numbers and /etc/services only: checked above
	nb, _ := net.LookupPort("tcp", pb)
	if na != nb || na == 0 {
		return ""
	}
	ia, ib := listenHost(ha), listenHost(hb)
	if ia == ib {
		return "takes the same address"
	}
	if every(ia, ib) || every(ib, ia) {
		return "takes the same port on every interface"
	}
	return ""
}

// every reports whether a listener on host a takes its port on the
// interface of b too: a is every interface (an empty host, or :: with
// IPv4 mapped in, as Linux binds it by default), or 0.0.0.0 and b IPv4.
func every(a, b netip.Addr) bool {
	return !a.IsValid() || a == netip.IPv6Unspecified() || a == netip.IPv4Unspecified() && b.Is4()
}

// listenHost returns the address a listener's host binds: localhost is
// 127.0.0.1 (the address serve listens on first), an empty host the zero
// Addr (every interface).
func listenHost(host string) netip.Addr {
	if host == "" {
		return netip.Addr{}
	}
	if strings.EqualFold(host, "localhost") {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap()
}
