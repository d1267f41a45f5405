// Package clientip finds the address of the client behind an HTTP request,
// for use as a rate-limit key, without letting the client choose it.
//
// By default the client is the peer of the connection (Request.RemoteAddr)
// and forwarding headers are ignored: anyone can write them. When requests
// arrive through reverse proxies, list the proxies' addresses in
// [Resolver.TrustedProxies]; then the forwarding header those proxies write
// (X-Forwarded-For, or the RFC 7239 Forwarded header) is walked from the
// right, hop by hop, for as long as each hop is a trusted proxy, and the first
// untrusted address is the client. Entries left of it were written by the
// client and are never read. An entry that is not an address (a host name,
// "unknown", an RFC 7239 obfuscated identifier, a syntax error) ends the walk
// and the last trusted hop is used instead: garbage never becomes a key.
//
// IPv4-mapped IPv6 addresses (::ffff:192.0.2.1) are folded to IPv4. IPv6
// clients are grouped by a prefix (/64 by default), since one subscriber
// usually holds a whole /64 or more and could otherwise rotate through
// addresses to get a fresh budget for each.
//
// The package serves the net/http middleware (package httplimit) and any
// front end that sees an http.Request.
package clientip

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// Header selects the forwarding header that trusted proxies write.
type Header uint8

const (
	// XForwardedFor is the de facto "X-Forwarded-For: client, proxy1, proxy2"
	// list (the zero value).
	XForwardedFor Header = iota
	// Forwarded is the RFC 7239 header: "Forwarded: for=192.0.2.60;proto=http,
	// for=\"[2001:db8::17]:4711\"".
	Forwarded
)

// String returns the header's canonical field name.
func (h Header) String() string {
	switch h {
	case XForwardedFor:
		return "X-Forwarded-For"
	case Forwarded:
		return "Forwarded"
	}
	return "Header(" + strconv.Itoa(int(h)) + ")"
}

// Defaults for the zero fields of a Resolver.
const (
	// DefaultIPv6Prefix groups IPv6 clients by /64, the smallest block a
	// subscriber is normally given.
	DefaultIPv6Prefix = 64
	// DefaultIPv4Prefix keys IPv4 clients by their whole address.
	DefaultIPv4Prefix = 32
)

// ErrNoAddress means the request's own peer address (Request.RemoteAddr) is
// not a usable IP address, so there is no client address to find: a
// listener on a Unix socket, a request built by hand, or an unspecified
// address (0.0.0.0, ::). Forwarding headers are not read in that case, since
// the peer cannot be known to be a trusted proxy.
var ErrNoAddress = errors.New("clientip: request has no peer IP address")

// Resolver configures how the client address is found. The zero value is
// ready to use and safe: it trusts no proxy (the key is the connection's
// peer address), folds IPv4-mapped addresses, groups IPv6 by /64 and keys
// IPv4 by the whole address. A Resolver is plain configuration; [New] checks
// it and returns the [Extractor] that does the work.
type Resolver struct {
	// TrustedProxies lists the proxies whose forwarding header is believed,
	// as CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") or single addresses
	// ("192.0.2.10"). Empty: trust nobody and ignore forwarding headers.
	// Never list a range that clients can send from.
	TrustedProxies []string
	// Header is the forwarding header the trusted proxies write; only that
	// one is read. It must be the header your proxy sets or appends to: a
	// header the proxy passes through untouched is written by the client.
	Header Header
	// IPv6Prefix is the prefix length that IPv6 clients are grouped by,
	// 1 to 128. Zero means DefaultIPv6Prefix (64); 128 keys each address.
	IPv6Prefix int
	// IPv4Prefix is the prefix length that IPv4 clients are grouped by,
	// 1 to 32. Zero means DefaultIPv4Prefix (32, each address).
	IPv4Prefix int
}

// ConfigError reports a bad Resolver field, naming the field and the value.
type ConfigError struct {
	Field  string // such as "TrustedProxies[2]" or "IPv6Prefix"
	Value  string // the bad value as given
	Reason string
}

// Error implements error.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("clientip: %s %q %s", e.Field, e.Value, e.Reason)
}

// Validate reports whether r is usable. The error is a *ConfigError naming
// the first bad field and its value.
func (r Resolver) Validate() error {
	_, err := New(r)
	return err
}

// Extractor finds client addresses and keys as its Resolver says. Build it
// with [New]. It is immutable and safe for concurrent use.
type Extractor struct {
	trusted []netip.Prefix
	header  Header
	v6Bits  int
	v4Bits  int
}

// New checks r and returns its Extractor. The error is a *ConfigError.
func New(r Resolver) (*Extractor, error) {
	e := &Extractor{header: r.Header, v6Bits: r.IPv6Prefix, v4Bits: r.IPv4Prefix}
	if e.v6Bits == 0 {
		e.v6Bits = DefaultIPv6Prefix
	}
	if e.v4Bits == 0 {
		e.v4Bits = DefaultIPv4Prefix
	}
	if e.v6Bits < 1 || e.v6Bits > 128 {
		return nil, &ConfigError{"IPv6Prefix", strconv.Itoa(r.IPv6Prefix), "must be between 1 and 128 (0 means 64)"}
	}
	if e.v4Bits < 1 || e.v4Bits > 32 {
		return nil, &ConfigError{"IPv4Prefix", strconv.Itoa(r.IPv4Prefix), "must be between 1 and 32 (0 means 32)"}
	}
	if r.Header != XForwardedFor && r.Header != Forwarded {
		return nil, &ConfigError{"Header", r.Header.String(), "must be XForwardedFor or Forwarded"}
	}
	for i, s := range r.TrustedProxies {
		p, err := parseTrusted(s)
		if err != nil {
			return nil, &ConfigError{fmt.Sprintf("TrustedProxies[%d]", i), s, "is not a CIDR prefix or IP address"}
		}
		e.trusted = append(e.trusted, p)
	}
	return e, nil
}

// parseTrusted parses a CIDR prefix or a single address. An IPv4-mapped
// IPv6 prefix (::ffff:10.0.0.0/104) becomes the IPv4 prefix it covers, since
// addresses are folded to IPv4 before they are compared.
func parseTrusted(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, errors.New("bad address")
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// Trusted reports whether a is one of the trusted proxies.
func (e *Extractor) Trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range e.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Addr returns the client's address for r: the peer address, or, when the
// peer is a trusted proxy, the first untrusted hop of the forwarding header
// read from the right. The address is unmapped (IPv4-mapped IPv6 becomes
// IPv4) and has no zone. The only error is [ErrNoAddress].
func (e *Extractor) Addr(r *http.Request) (netip.Addr, error) {
	return e.Resolve(r.RemoteAddr, r.Header)
}

// Resolve is Addr for a peer address ("host:port" as in
// Request.RemoteAddr, or a bare IP) and the request's header, for front ends
// that do not hold an http.Request.
func (e *Extractor) Resolve(remoteAddr string, h http.Header) (netip.Addr, error) {
	peer, ok := parseNode(remoteAddr, true)
	if !ok {
		return netip.Addr{}, ErrNoAddress
	}
	if !e.Trusted(peer) {
		return peer, nil
	}
	if e.header == Forwarded {
		return e.walkForwarded(peer, h.Values("Forwarded")), nil
	}
	return e.walkXFF(peer, h.Values("X-Forwarded-For")), nil
}

// Key returns the rate-limit key of r's client: the address for IPv4 (or
// its prefix when IPv4Prefix is below 32, "198.51.100.0/24"), and the
// masked prefix for IPv6 ("2001:db8:1:2::/64"; the bare address when
// IPv6Prefix is 128). The only error is [ErrNoAddress].
func (e *Extractor) Key(r *http.Request) (string, error) {
	a, err := e.Addr(r)
	if err != nil {
		return "", err
	}
	return e.KeyOf(a), nil
}

// KeyOf returns the rate-limit key of a client address, grouped as Key
// does.
func (e *Extractor) KeyOf(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	bits := e.v6Bits
	if a.Is4() {
		bits = e.v4Bits
	}
	if bits >= a.BitLen() {
		return a.String()
	}
	p, _ := a.Prefix(bits) // bits is within range for a's family
	return p.String()
}

// walkXFF walks X-Forwarded-For from the right. Every header line counts, in
// order, as one comma-separated list; empty elements are skipped as RFC 9110
// lists allow.
func (e *Extractor) walkXFF(peer netip.Addr, lines []string) netip.Addr {
	last := peer // the last trusted hop
	for i := len(lines) - 1; i >= 0; i-- {
		rest := lines[i]
		for rest != "" {
			var elem string
			if j := strings.LastIndexByte(rest, ','); j >= 0 {
				rest, elem = rest[:j], rest[j+1:]
			} else {
				rest, elem = "", rest
			}
			elem = strings.TrimSpace(elem)
			if elem == "" {
				continue
			}
			a, ok := parseNode(elem, false)
			if !ok {
				return last
			}
			if !e.Trusted(a) {
				return a
			}
			last = a
		}
	}
	return last
}

// walkForwarded walks RFC 7239 Forwarded elements from the right. A header
// line that does not parse, an element without a for= parameter, or a node
// that is not an IP address ("unknown", an obfuscated "_id") stops the walk
// at the last trusted hop.
func (e *Extractor) walkForwarded(peer netip.Addr, lines []string) netip.Addr {
	last := peer
	for i := len(lines) - 1; i >= 0; i-- {
		// A line that does not parse is garbage as a whole: the elements
		// right of the error cannot be told apart from what the client wrote.
		fors, ok := forwardedFors(lines[i])
		if !ok {
			return last
		}
		for j := len(fors) - 1; j >= 0; j-- {
			a, valid := parseForwardedNode(fors[j])
			if !valid {
				return last
			}
			if !e.Trusted(a) {
				return a
			}
			last = a
		}
	}
	return last
}

// parseNode parses an address as proxies write it in X-Forwarded-For and
// as net/http writes RemoteAddr: "192.0.2.1", "2001:db8::1",
// "192.0.2.1:8080" or "[2001:db8::1]:8080". The address is unmapped. A peer
// (remote true) usually has a port, so that form is tried first, and its
// zone ("fe80::1%eth0") is dropped; a header entry usually has none, and a
// zone makes it invalid: a proxy has no use for one in a header. The
// unspecified addresses (0.0.0.0, ::) are never a client.
func parseNode(s string, remote bool) (netip.Addr, bool) {
	var a netip.Addr
	ok := false
	if remote {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			a, ok = ap.Addr(), true
		}
	}
	if !ok {
		if a, ok = parseAddrMaybePort(s); !ok {
			return netip.Addr{}, false
		}
	}
	if a.Zone() != "" && !remote || a.IsUnspecified() {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// parseAddrMaybePort parses an address with or without a port, the IPv6
// form of which may be bracketed.
func parseAddrMaybePort(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a, true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr(), true
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// parseForwardedNode parses an RFC 7239 node (section 6): an IPv4 address or
// a bracketed IPv6 address, each with an optional port. "unknown" and
// obfuscated identifiers are not addresses.
func parseForwardedNode(s string) (netip.Addr, bool) {
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host, port = s[1:end], s[end+1:]
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" || a.IsUnspecified() || !validNodePort(port) {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	if i := strings.IndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i:]
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() || a.IsUnspecified() || !validNodePort(port) {
		return netip.Addr{}, false
	}
	return a, true
}

// validNodePort accepts "" or ":" followed by a port number or an
// obfuscated port ("_abc"), as RFC 7239 section 6 allows.
func validNodePort(p string) bool {
	if p == "" {
		return true
	}
	if p[0] != ':' || len(p) == 1 {
		return false
	}
	p = p[1:]
	if p[0] == '_' {
		for i := 1; i < len(p); i++ {
			if c := p[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
				return false
			}
		}
		return true
	}
	n, err := strconv.ParseUint(p, 10, 16)
	return err == nil && len(p) <= 5 && n <= 65535
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
