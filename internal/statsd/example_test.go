package statsd_test

import (
	"fmt"
	"net"

	"github.com/floodgate-rl/floodgate/internal/statsd"
)

// A source reports its totals; the client sends what they gained since the
// previous flush, with the tags appended to each name.
func Example() {
	conn, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer conn.Close()
	hits := uint64(0)
	c, _ := statsd.New(statsd.Config{Addr: conn.LocalAddr().String(), Tags: map[string]string{"release": "v1.2"}},
		func(emit func(string, statsd.Kind, uint64)) {
			emit("ratelimit.service.rate_limit.api.user.total_hits", statsd.Counter, hits)
		})
	defer c.Close()
	buf := make([]byte, 1500)
	for _, total := range []uint64{5, 12} {
		hits = total
		_ = c.Flush()
		n, _ := conn.Read(buf)
		fmt.Print(string(buf[:n]))
	}
	// Output:
	// ratelimit.service.rate_limit.api.user.total_hits.__release=v1_2:5|c
	// ratelimit.service.rate_limit.api.user.total_hits.__release=v1_2:7|c
}
