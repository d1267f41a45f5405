package clientip_test

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/clientip"
)

func mustNew(t testing.TB, r clientip.Resolver) *clientip.Extractor {
	t.Helper()
	e, err := clientip.New(r)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func request(remote string, header ...string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "http://example.test/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

const (
	proxy  = "10.0.0.1:40000"
	proxy2 = "10.0.0.2"
)

var behindProxies = clientip.Resolver{TrustedProxies: []string{"10.0.0.0/8", "2001:db8:ffff::/48"}}

func TestKey(t *testing.T) {
	tests := []struct {
		name     string
		resolver clientip.Resolver
		remote   string
		header   []string
		want     string
	}{
		// Trust nobody (the zero value): headers are ignored.
		{"zero value uses the peer", clientip.Resolver{}, "203.0.113.7:5555", nil, "203.0.113.7"},
		{"zero value ignores a spoofed XFF", clientip.Resolver{}, "203.0.113.7:5555",
			[]string{"X-Forwarded-For", "198.51.100.99"}, "203.0.113.7"},
		{"zero value ignores a spoofed Forwarded", clientip.Resolver{}, "203.0.113.7:5555",
			[]string{"Forwarded", "for=198.51.100.99"}, "203.0.113.7"},
		{"untrusted peer's XFF is ignored", behindProxies, "203.0.113.7:5555",
			[]string{"X-Forwarded-For", "10.0.0.3, 198.51.100.99"}, "203.0.113.7"},
		{"bare IP remote address", clientip.Resolver{}, "203.0.113.7", nil, "203.0.113.7"},
		{"IPv6 peer with port", clientip.Resolver{}, "[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1:2::/64"},

		// X-Forwarded-For behind trusted proxies.
		{"trusted peer without header", behindProxies, proxy, nil, "10.0.0.1"},
		{"one hop", behindProxies, proxy, []string{"X-Forwarded-For", "203.0.113.7"}, "203.0.113.7"},
		{"rightmost untrusted wins over spoofed left entries", behindProxies, proxy,
			[]string{"X-Forwarded-For", "198.51.100.99, 203.0.113.7"}, "203.0.113.7"},
		{"trusted hops are skipped", behindProxies, proxy,
			[]string{"X-Forwarded-For", "198.51.100.99, 203.0.113.7, 10.1.2.3, 10.0.0.9"}, "203.0.113.7"},
		{"several header lines form one list", behindProxies, proxy,
			[]string{"X-Forwarded-For", "198.51.100.99, 203.0.113.7", "X-Forwarded-For", "10.1.2.3"}, "203.0.113.7"},
		{"last line is read first", behindProxies, proxy,
			[]string{"X-Forwarded-For", "198.51.100.99", "X-Forwarded-For", "203.0.113.7, 10.1.2.3"}, "203.0.113.7"},
		{"all hops trusted: the leftmost", behindProxies, proxy,
			[]string{"X-Forwarded-For", "10.9.9.9, 10.1.2.3"}, "10.9.9.9"},
		{"empty elements are skipped", behindProxies, proxy,
			[]string{"X-Forwarded-For", " , 203.0.113.7 ,, "}, "203.0.113.7"},
		{"entries with ports", behindProxies, proxy,
			[]string{"X-Forwarded-For", "[2001:db8:1:2::9]:1234, 10.1.2.3:80"}, "2001:db8:1:2::/64"},
		{"bracketed IPv6 without port", behindProxies, proxy,
			[]string{"X-Forwarded-For", "[2001:db8:1:2::9]"}, "2001:db8:1:2::/64"},
		{"IPv6 trusted proxy", behindProxies, "[2001:db8:ffff::1]:443",
			[]string{"X-Forwarded-For", "203.0.113.7"}, "203.0.113.7"},
		{"IPv4-mapped client folds to IPv4", behindProxies, proxy,
			[]string{"X-Forwarded-For", "::ffff:203.0.113.7"}, "203.0.113.7"},
		{"IPv4-mapped trusted hop is trusted", behindProxies, proxy,
			[]string{"X-Forwarded-For", "203.0.113.7, ::ffff:10.1.2.3"}, "203.0.113.7"},
		{"IPv4-mapped peer is trusted", behindProxies, "[::ffff:10.0.0.1]:80",
			[]string{"X-Forwarded-For", "203.0.113.7"}, "203.0.113.7"},

		// Garbage stops the walk at the last trusted hop.
		{"garbage right after the peer: the peer", behindProxies, proxy,
			[]string{"X-Forwarded-For", "203.0.113.7, not-an-ip"}, "10.0.0.1"},
		{"garbage after a trusted hop: that hop", behindProxies, proxy,
			[]string{"X-Forwarded-For", "203.0.113.7, unknown, 10.1.2.3"}, "10.1.2.3"},
		{"host name", behindProxies, proxy, []string{"X-Forwarded-For", "evil.example"}, "10.0.0.1"},
		{"address with zone", behindProxies, proxy, []string{"X-Forwarded-For", "fe80::1%25eth0"}, "10.0.0.1"},
		{"overlong element", behindProxies, proxy,
			[]string{"X-Forwarded-For", strings.Repeat("9", 4000)}, "10.0.0.1"},
		{"unspecified address", behindProxies, proxy, []string{"X-Forwarded-For", "203.0.113.7, ::"}, "10.0.0.1"},
		{"CIDR is not an address", behindProxies, proxy, []string{"X-Forwarded-For", "203.0.113.0/24"}, "10.0.0.1"},
		{"garbage left of the client is never read", behindProxies, proxy,
			[]string{"X-Forwarded-For", "<script>, 203.0.113.7"}, "203.0.113.7"},

		// Grouping.
		{"IPv6 grouped by /64", clientip.Resolver{}, "[2001:db8:1:2:aaaa::1]:1", nil, "2001:db8:1:2::/64"},
		{"IPv6 grouped by /56", clientip.Resolver{IPv6Prefix: 56}, "[2001:db8:1:2ff:aaaa::1]:1", nil, "2001:db8:1:200::/56"},
		{"IPv6 by address", clientip.Resolver{IPv6Prefix: 128}, "[2001:db8::1]:1", nil, "2001:db8::1"},
		{"IPv4 grouped by /24", clientip.Resolver{IPv4Prefix: 24}, "198.51.100.77:1", nil, "198.51.100.0/24"},
		{"IPv4-mapped peer folds before grouping", clientip.Resolver{}, "[::ffff:198.51.100.77]:1", nil, "198.51.100.77"},
		{"IPv6 zone dropped", clientip.Resolver{IPv6Prefix: 128}, "[fe80::1%eth0]:1", nil, "fe80::1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustNew(t, tt.resolver)
			got, err := e.Key(request(tt.remote, tt.header...))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Key = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestForwarded(t *testing.T) {
	r := behindProxies
	r.Header = clientip.Forwarded
	tests := []struct {
		name   string
		header []string
		want   string
	}{
		{"simple", []string{"Forwarded", "for=203.0.113.7"}, "203.0.113.7"},
		{"with other parameters", []string{"Forwarded", "for=203.0.113.7;proto=https;by=10.0.0.1;host=api.example"}, "203.0.113.7"},
		{"parameter names are case-insensitive", []string{"Forwarded", "For=203.0.113.7"}, "203.0.113.7"},
		{"quoted IPv4 with port", []string{"Forwarded", `for="203.0.113.7:8080"`}, "203.0.113.7"},
		{"quoted IPv6 with port", []string{"Forwarded", `for="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::/64"},
		{"quoted IPv6 without port", []string{"Forwarded", `for="[2001:db8:cafe::17]"`}, "2001:db8:cafe::/64"},
		{"obfuscated port", []string{"Forwarded", `for="203.0.113.7:_p1"`}, "203.0.113.7"},
		{"spaces around separators", []string{"Forwarded", `for=198.51.100.99 , for=203.0.113.7 ; proto=http`}, "203.0.113.7"},
		{"trusted hops skipped", []string{"Forwarded", `for=198.51.100.99, for=203.0.113.7, for=10.1.2.3`}, "203.0.113.7"},
		{"several lines", []string{"Forwarded", `for=198.51.100.99, for=203.0.113.7`, "Forwarded", `for=10.1.2.3;proto=http`}, "203.0.113.7"},
		{"comma inside a quoted string", []string{"Forwarded", `for=203.0.113.7;host="a,b"`}, "203.0.113.7"},
		{"escaped quote", []string{"Forwarded", `for=203.0.113.7;ext="a\"b"`}, "203.0.113.7"},
		{"all trusted: leftmost", []string{"Forwarded", `for=10.3.3.3, for=10.1.2.3`}, "10.3.3.3"},

		{"unknown stops at the peer", []string{"Forwarded", `for=203.0.113.7, for=unknown`}, "10.0.0.1"},
		{"obfuscated identifier stops at the last trusted hop", []string{"Forwarded", `for=203.0.113.7, for=_hidden, for=10.1.2.3`}, "10.1.2.3"},
		{"unquoted IPv6 is invalid", []string{"Forwarded", `for=2001:db8::1`}, "10.0.0.1"},
		{"IPv6 needs brackets", []string{"Forwarded", `for="2001:db8::1"`}, "10.0.0.1"},
		{"bracketed IPv4 is invalid", []string{"Forwarded", `for="[203.0.113.7]"`}, "10.0.0.1"},
		{"bad port", []string{"Forwarded", `for="203.0.113.7:99999"`}, "10.0.0.1"},
		{"element without for", []string{"Forwarded", `for=203.0.113.7, proto=https`}, "10.0.0.1"},
		{"duplicate for", []string{"Forwarded", `for=203.0.113.7;for=198.51.100.1`}, "10.0.0.1"},
		{"unterminated quote", []string{"Forwarded", `for="203.0.113.7`}, "10.0.0.1"},
		{"bad syntax in the last line", []string{"Forwarded", "for=203.0.113.7", "Forwarded", "for=198.51.100.1 junk"}, "10.0.0.1"},
		{"bad syntax in an earlier line is never read", []string{"Forwarded", `for="x`, "Forwarded", "for=203.0.113.7"}, "203.0.113.7"},
		{"bad syntax after a trusted line", []string{"Forwarded", "for=203.0.113.7 x", "Forwarded", "for=10.1.2.3"}, "10.1.2.3"},
		{"X-Forwarded-For is ignored in Forwarded mode", []string{"X-Forwarded-For", "203.0.113.7"}, "10.0.0.1"},
		{"control character in quoted string", []string{"Forwarded", "for=\"203.0.113.7\x01\""}, "10.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustNew(t, r)
			got, err := e.Key(request(proxy, tt.header...))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Key = %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("XFF mode ignores Forwarded", func(t *testing.T) {
		got, _ := mustNew(t, behindProxies).Key(request(proxy, "Forwarded", "for=203.0.113.7"))
		if got != "10.0.0.1" {
			t.Errorf("Key = %q, want the peer", got)
		}
	})
}

func TestNoAddress(t *testing.T) {
	e := mustNew(t, behindProxies)
	for _, remote := range []string{"", "@", "/run/app.sock", "example.test:80", "10.0.0.1:x"} {
		_, err := e.Key(request(remote, "X-Forwarded-For", "203.0.113.7"))
		if !errors.Is(err, clientip.ErrNoAddress) {
			t.Errorf("RemoteAddr %q: err = %v, want ErrNoAddress", remote, err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		resolver   clientip.Resolver
		field, val string
	}{
		{clientip.Resolver{TrustedProxies: []string{"10.0.0.0/8", "10.0.0.0/33"}}, "TrustedProxies[1]", "10.0.0.0/33"},
		{clientip.Resolver{TrustedProxies: []string{"proxy.internal"}}, "TrustedProxies[0]", "proxy.internal"},
		{clientip.Resolver{TrustedProxies: []string{"fe80::1%eth0"}}, "TrustedProxies[0]", "fe80::1%eth0"},
		{clientip.Resolver{IPv6Prefix: 129}, "IPv6Prefix", "129"},
		{clientip.Resolver{IPv6Prefix: -1}, "IPv6Prefix", "-1"},
		{clientip.Resolver{IPv4Prefix: 33}, "IPv4Prefix", "33"},
		{clientip.Resolver{Header: 7}, "Header", "Header(7)"},
	}
	for _, tt := range tests {
		err := tt.resolver.Validate()
		var ce *clientip.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%+v: err = %v, want a *ConfigError", tt.resolver, err)
			continue
		}
		if ce.Field != tt.field || ce.Value != tt.val {
			t.Errorf("%+v: error names %s %q, want %s %q", tt.resolver, ce.Field, ce.Value, tt.field, tt.val)
		}
		if msg := err.Error(); !strings.Contains(msg, tt.field) || !strings.Contains(msg, tt.val) {
			t.Errorf("message %q does not name the field and value", msg)
		}
	}
	if err := (clientip.Resolver{}).Validate(); err != nil {
		t.Errorf("zero value: %v", err)
	}
}

func TestTrustedProxyForms(t *testing.T) {
	e := mustNew(t, clientip.Resolver{TrustedProxies: []string{"192.0.2.10", "::ffff:10.0.0.0/104", " 2001:db8::1 "}})
	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"192.0.2.10", true}, {"192.0.2.11", false},
		{"10.200.0.1", true}, {"::ffff:10.200.0.1", true}, {"11.0.0.1", false},
		{"2001:db8::1", true}, {"2001:db8::2", false},
	} {
		if got := e.Trusted(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("Trusted(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

// TestRotatingIPv6 checks that every address of one /64 has one key, and
// the next /64 another.
func TestRotatingIPv6(t *testing.T) {
	e := mustNew(t, clientip.Resolver{})
	want := "2001:db8:aa:bb::/64"
	for _, a := range []string{"2001:db8:aa:bb::1", "2001:db8:aa:bb:ffff:ffff:ffff:ffff", "2001:db8:aa:bb:1234:5678:9abc:def0"} {
		if got := e.KeyOf(netip.MustParseAddr(a)); got != want {
			t.Errorf("KeyOf(%s) = %s, want %s", a, got, want)
		}
	}
	if got := e.KeyOf(netip.MustParseAddr("2001:db8:aa:bc::1")); got == want {
		t.Errorf("the next /64 shares the key %s", got)
	}
}

// FuzzResolve checks that any forwarding header yields a clean address
// (unmapped, no zone, not unspecified), and that a header without a hex
// digit in it, which holds no address, yields the peer.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{
		"203.0.113.7", "a, 203.0.113.7, 10.1.1.1", `for="[2001:db8::1]:80", for=10.1.1.1`,
		`for="x`, "for=unknown", ",,,", `for=1.2.3.4;for=5.6.7.8`, "\x00\xff",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, header string, forwarded bool) {
		r := behindProxies
		name := "X-Forwarded-For"
		if forwarded {
			r.Header, name = clientip.Forwarded, "Forwarded"
		}
		e := mustNew(t, r)
		a, err := e.Resolve(proxy, http.Header{name: {header}})
		if err != nil {
			t.Fatal(err)
		}
		if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
			t.Fatalf("Resolve = %v", a)
		}
		if !strings.ContainsAny(header, "0123456789abcdefABCDEF") && a != netip.MustParseAddr("10.0.0.1") {
			t.Fatalf("Resolve = %v from a header with no digits: %q", a, header)
		}
		if a.IsUnspecified() {
			t.Fatalf("Resolve = %v", a)
		}
	})
}
