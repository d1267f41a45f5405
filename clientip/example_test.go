package clientip_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/floodgate-rl/floodgate/clientip"
)

// Behind a load balancer in 10.0.0.0/8 that appends to X-Forwarded-For, the
// client is the rightmost address the balancer did not write itself; what
// the client wrote further left is ignored.
func Example() {
	ips, err := clientip.New(clientip.Resolver{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.1:51234"
	r.Header.Set("X-Forwarded-For", "192.0.2.1, 203.0.113.7") // 192.0.2.1 is spoofed
	key, _ := ips.Key(r)
	fmt.Println(key)

	r.Header.Set("X-Forwarded-For", "2001:db8:1:2:aaaa:bbbb:cccc:dddd")
	key, _ = ips.Key(r)
	fmt.Println(key)
	// Output:
	// 203.0.113.7
	// 2001:db8:1:2::/64
}
