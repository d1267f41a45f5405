package health

import "testing"

func TestAvailable(t *testing.T) {
	up, down := Node{Addr: "a", Available: true}, Node{Addr: "b"}
	cases := []struct {
		name string
		r    Report
		want bool
	}{
		{"never connected", Report{Error: "dial tcp: refused"}, false},
		{"connected, no nodes (a store without a backend)", Report{Connected: true}, true},
		{"connected, every node up", Report{Connected: true, Nodes: []Node{up, up}}, true},
		{"connected, one node's breaker open", Report{Connected: true, Nodes: []Node{up, down}}, false},
		{"not connected though the nodes say up", Report{Nodes: []Node{up}}, false},
	}
	for _, c := range cases {
		if got := c.r.Available(); got != c.want {
			t.Errorf("%s: Available() = %v, want %v", c.name, got, c.want)
		}
	}
}
