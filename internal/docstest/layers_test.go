package docstest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/grpclimit"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/remotestore"
	"github.com/floodgate-rl/floodgate/server"
)

// The layers table's example: its rule, client and front-end prefix.
const (
	layersRule   = "per-ip"
	layersClient = "203.0.113.7"
	layersPrefix = "shop|"
)

// TestLayersTable: the table of timeouts and key prefixes is the same in
// docs/MIDDLEWARE.md and docs/GRPC.md, its defaults are the packages'
// constants, and its keys are the ones a request writes: the middleware
// and the interceptors, each over a Redis store and over a remote store
// through a server's store API, on a Redis of the test's own that holds
// exactly the key the table shows.
func TestLayersTable(t *testing.T) {
	rows := layersRows(t, "docs/MIDDLEWARE.md")
	if grpc := layersRows(t, "docs/GRPC.md"); !slices.EqualFunc(rows, grpc, slices.Equal) {
		t.Fatalf("the layers tables differ:\nMIDDLEWARE.md %q\nGRPC.md       %q", rows, grpc)
	}
	if len(rows) != 4 {
		t.Fatalf("the layers table has %d rows, want the front end, the Redis store, the remote store and the server's Redis store", len(rows))
	}
	front, redis, remote, serverRedis := rows[0], rows[1], rows[2], rows[3]
	for _, c := range []struct {
		cell, want string
	}{
		{front[1], "none"},
		{front[2], "(`\"\"`)"},
		{redis[1], redisstore.DefaultTimeout.String()},
		{redis[2], "(`" + strconv.Quote(redisstore.DefaultKeyPrefix) + "`)"},
		{remote[1], remotestore.DefaultTimeout.String()},
		{remote[2], "(`" + strconv.Quote(server.DefaultStoreNamespace) + "`)"},
		{serverRedis[1], redisstore.DefaultTimeout.String()},
		{serverRedis[2], "(`" + strconv.Quote(redisstore.DefaultKeyPrefix) + "`)"},
	} {
		if !strings.Contains(c.cell, c.want) {
			t.Errorf("the cell %q does not say the default %s", c.cell, c.want)
		}
	}
	keyOf := func(row []string) string {
		cell := row[len(row)-1]
		if len(cell) < 2 || cell[0] != '`' || cell[len(cell)-1] != '`' {
			t.Fatalf("the last cell %q is not one key in backticks", cell)
		}
		return cell[1 : len(cell)-1]
	}
	alg := floodgate.SlidingWindowLog
	if got, want := keyOf(redis), redisstore.Key(redisstore.DefaultKeyPrefix, keyOf(front), alg); got != want {
		t.Errorf("the Redis store's key %q, want %q of the front end's %q", got, want, keyOf(front))
	}
	if got, want := keyOf(remote), server.DefaultStoreNamespace+keyOf(front); got != want {
		t.Errorf("the remote store's key %q, want %q", got, want)
	}

	srv := redistest.Spawn(t)
	direct, err := redisstore.New(redisstore.Config{Addrs: []string{srv.Addr}, Mode: redisstore.ModeStandalone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	storeSrv, err := server.New(direct, server.Policy{}, server.Options{StoreAPI: &server.StoreAPI{}})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(storeSrv.Handler())
	t.Cleanup(api.Close)
	viaServer, err := remotestore.New(remotestore.Config{URL: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(viaServer.Close)

	for _, fe := range []struct {
		name    string
		request func(t *testing.T, store floodgate.Store)
	}{
		{"httplimit", httplimitRequest},
		{"grpclimit", grpclimitRequest},
	} {
		for _, chain := range []struct {
			name  string
			store floodgate.Store
			want  string
		}{
			{"over the Redis store", direct, keyOf(redis)},
			{"over the remote store", viaServer, keyOf(serverRedis)},
		} {
			t.Run(fe.name+" "+chain.name, func(t *testing.T) {
				if err := srv.Do(t, "FLUSHALL").Error(); err != nil {
					t.Fatal(err)
				}
				fe.request(t, chain.store)
				keys, err := srv.Do(t, "KEYS", "*").AsStrSlice()
				if err != nil || len(keys) != 1 || keys[0] != chain.want {
					t.Fatalf("Redis holds %q (%v), want the table's %q", keys, err, chain.want)
				}
			})
		}
	}
}

// layersLimit is the limit of the table's rule.
var layersLimit = floodgate.PerMinute(100)

// httplimitRequest sends one request from the table's client through the
// middleware with the table's prefix and rule over store.
func httplimitRequest(t *testing.T, store floodgate.Store) {
	lim, err := httplimit.New(httplimit.Config{Store: store, KeyPrefix: layersPrefix,
		Rules: []httplimit.Rule{{Name: layersRule, Limit: layersLimit}}})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = net.JoinHostPort(layersClient, "4711")
	w := httptest.NewRecorder()
	lim.Handler(http.NotFoundHandler()).ServeHTTP(w, r)
	if w.Header().Get("X-Ratelimit-Remaining") != "99" {
		t.Fatalf("the request was not counted: %d %v", w.Code, w.Header())
	}
}

// grpclimitRequest makes one unary call from the table's client through
// the interceptor with the table's prefix and rule over store.
func grpclimitRequest(t *testing.T, store floodgate.Store) {
	lim, err := grpclimit.New(grpclimit.Config{Store: store, KeyPrefix: layersPrefix,
		Rules: []grpclimit.Rule{{Name: layersRule, Limit: layersLimit}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := peer.NewContext(t.Context(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(layersClient), Port: 4711}})
	ran := false
	_, err = lim.Unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/shop.Catalog/Search"}, func(context.Context, any) (any, error) {
		ran = true
		return nil, nil
	})
	if err != nil || !ran {
		t.Fatalf("the call was not admitted: %v", err)
	}
}

// layersRows returns the cells of the rows of the table after doc's
// "<!-- tested: layers" marker, with "\|" read as '|'.
func layersRows(t *testing.T, doc string) [][]string {
	t.Helper()
	text := readDoc(t, doc)
	i := strings.Index(text, "<!-- tested: layers")
	if i < 0 {
		t.Fatalf("%s has no layers table marker", doc)
	}
	var rows [][]string
	lines := strings.Split(text[i:], "\n")[1:]
	for n, line := range lines {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if n < 2 {
			continue // the header and its separator
		}
		var cells []string
		var cell strings.Builder
		for j := 1; j < len(line); j++ {
			switch {
			case line[j] == '\\' && j+1 < len(line) && line[j+1] == '|':
				cell.WriteByte('|')
				j++
			case line[j] == '|':
				cells = append(cells, strings.TrimSpace(cell.String()))
				cell.Reset()
			default:
				cell.WriteByte(line[j])
			}
		}
		rows = append(rows, cells)
	}
	return rows
}
