package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// These tests prove that scripts/redis-harness.sh formed what the other
// packages' tests rely on. They speak raw RESP through respDo below.

func TestHarnessStandalone(t *testing.T) {
	addr := StandaloneAddr(t)
	if got := respDo(t, addr, "PING"); got != "PONG" {
		t.Fatalf("PING = %#v, want PONG", got)
	}
	checkRedis7(t, addr)
}

func TestHarnessCluster(t *testing.T) {
	addrs := ClusterAddrs(t)
	if len(addrs) != 6 {
		t.Fatalf("ClusterAddrs = %v, want 6 nodes", addrs)
	}
	for _, addr := range addrs {
		info := infoFields(respString(t, addr, "CLUSTER", "INFO"))
		for field, want := range map[string]string{
			"cluster_state":          "ok",
			"cluster_slots_assigned": "16384",
			"cluster_slots_ok":       "16384",
			"cluster_known_nodes":    "6",
			"cluster_size":           "3",
		} {
			if info[field] != want {
				t.Errorf("%s: CLUSTER INFO %s = %q, want %q", addr, field, info[field], want)
			}
		}

		var masters, slaves int
		nodes := respString(t, addr, "CLUSTER", "NODES")
		for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 {
				t.Fatalf("%s: CLUSTER NODES line %q", addr, line)
			}
			flags := strings.Split(f[2], ",")
			for _, fl := range flags {
				switch fl {
				case "master":
					masters++
				case "slave":
					slaves++
				case "fail", "fail?", "handshake", "noaddr":
					t.Errorf("%s: CLUSTER NODES has a node flagged %s: %q", addr, fl, line)
				}
			}
		}
		if masters != 3 || slaves != 3 {
			t.Errorf("%s: CLUSTER NODES shows %d masters and %d slaves, want 3 and 3:\n%s", addr, masters, slaves, nodes)
		}
		checkRedis7(t, addr)
	}
}

func TestHarnessSentinel(t *testing.T) {
	sentinels, master := SentinelAddrs(t)
	data := SentinelDataAddrs(t)
	got := respDo(t, sentinels[0], "SENTINEL", "get-master-addr-by-name", master)
	arr, ok := got.([]any)
	if !ok || len(arr) != 2 {
		t.Fatalf("SENTINEL get-master-addr-by-name %s = %#v, want [host port]", master, got)
	}
	if addr := net.JoinHostPort(fmt.Sprint(arr[0]), fmt.Sprint(arr[1])); addr != data[0] {
		t.Fatalf("sentinel says master %s is at %s, want %s (a failover happened? `scripts/redis-harness.sh down && scripts/redis-harness.sh up` resets it)", master, addr, data[0])
	}
	for _, addr := range data {
		checkRedis7(t, addr)
	}
}

// checkRedis7 fails t unless INFO server on addr reports redis_version 7 or newer.
func checkRedis7(t *testing.T, addr string) {
	t.Helper()
	version := infoFields(respString(t, addr, "INFO", "server"))["redis_version"]
	major, _, _ := strings.Cut(version, ".")
	if n, err := strconv.Atoi(major); err != nil || n < 7 {
		t.Errorf("%s: redis_version %q, want 7 or newer", addr, version)
	}
}

// infoFields parses "key:value" lines (INFO, CLUSTER INFO) into a map.
func infoFields(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// respString is respDo for commands that answer a string.
func respString(t *testing.T, addr string, args ...string) string {
	t.Helper()
	v := respDo(t, addr, args...)
	s, ok := v.(string)
	if !ok {
		t.Fatalf("%s: %s = %#v, want a string", addr, strings.Join(args, " "), v)
	}
	return s
}

// respDo sends one command to addr on a fresh connection and returns the
// reply: a string (simple or bulk), an int64, nil, or a []any of those. An
// error reply or a connection error fails t.
func respDo(t *testing.T, addr string, args ...string) any {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, req.String()); err != nil {
		t.Fatalf("%s: writing %s: %v", addr, args[0], err)
	}
	v, err := readRESP(bufio.NewReader(c))
	if err != nil {
		t.Fatalf("%s: %s: %v", addr, strings.Join(args, " "), err)
	}
	return v
}

// readRESP reads one RESP2 reply: simple string, error, integer, bulk
// string or array (nested).
func readRESP(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return nil, fmt.Errorf("malformed RESP line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return nil, errors.New(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return nil, fmt.Errorf("bad bulk length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return nil, fmt.Errorf("bad array length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = readRESP(r); err != nil {
				return nil, err
			}
		}
		return arr, nil
	}
	return nil, fmt.Errorf("unknown RESP type %q", kind)
}

func TestReadRESP(t *testing.T) {
	in := "*5\r\n+OK\r\n:-42\r\n$5\r\nab\r\nc\r\n$-1\r\n*1\r\n$0\r\n\r\n"
	got, err := readRESP(bufio.NewReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%#v", []any{"OK", int64(-42), "ab\r\nc", nil, []any{""}})
	if fmt.Sprintf("%#v", got) != want {
		t.Fatalf("readRESP = %#v, want %s", got, want)
	}
	if _, err := readRESP(bufio.NewReader(strings.NewReader("-ERR nope\r\n"))); err == nil || err.Error() != "ERR nope" {
		t.Fatalf("error reply: err = %v, want ERR nope", err)
	}
}
