package remotestore_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/remotestore"
	"github.com/floodgate-rl/floodgate/server"
)

// The net/http middleware deciding with a floodgate server's store: the
// server (here in the same process, as `floodgate serve --store-api` would
// run it) holds the shared state, the application its own rules.
func Example() {
	srv, err := server.New(memory.New(), server.Policy{}, server.Options{StoreAPI: &server.StoreAPI{}})
	if err != nil {
		log.Fatal(err)
	}
	floodgateServe := httptest.NewServer(srv.Handler())
	defer floodgateServe.Close()

	store, err := remotestore.New(remotestore.Config{URL: floodgateServe.URL})
	if err != nil {
		log.Fatal(err) // a *remotestore.ConfigError naming the field
	}
	defer store.Close()
	lim, err := httplimit.New(httplimit.Config{
		Store: store,
		Rules: []httplimit.Rule{{Name: "per-key", Limit: floodgate.PerMinute(2), Key: httplimit.Header("X-API-Key"), Failure: httplimit.FailClosed}},
	})
	if err != nil {
		log.Fatal(err)
	}
	app := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	})))
	defer app.Close()

	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, app.URL, nil)
		req.Header.Set("X-API-Key", "k-123")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status, resp.Header.Get("RateLimit"))
	}
	// Output:
	// 200 OK "per-key";r=1;t=60
	// 200 OK "per-key";r=0;t=60
	// 429 Too Many Requests "per-key";r=0;t=60
}
