package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/memory"
	"github.com/floodgate-rl/floodgate/server"
)

const (
	decideToken  = "decide-0123456789abcdef0123456789abcdef"
	adminToken   = "admin-0123456789abcdef0123456789abcdef"
	metricsToken = "metrics-0123456789abcdef0123456789abcdef"
)

func tokensOf(t *testing.T, text string) *server.Tokens {
	t.Helper()
	tokens, err := server.ParseTokens(text, "tokens")
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}

func TestAuthScopes(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	f.srv.SetTokens(tokensOf(t, "# name scopes token\ningress decide "+decideToken+"\nops admin "+adminToken+"; prom metrics "+metricsToken))
	check := `{"rule":"api","key":"k"}`
	cases := []struct {
		name, method, path, body, token string
		status                          int
		challenge                       string // the WWW-Authenticate value's start
	}{
		{"check without a token", "POST", "/v1/check", check, "", 401, `Bearer realm="floodgate"`},
		{"check with a wrong token", "POST", "/v1/check", check, "Bearer nope-0123456789abcdef", 401, `Bearer realm="floodgate", error="invalid_token"`},
		{"check with a token of another scheme", "POST", "/v1/check", check, "Basic " + decideToken, 401, `Bearer realm="floodgate"`},
		{"check with the decide token", "POST", "/v1/check", check, "Bearer " + decideToken, 200, ""},
		{"scheme is case-insensitive", "POST", "/v1/check", check, "bearer " + decideToken, 200, ""},
		{"check with the admin token", "POST", "/v1/check", check, "Bearer " + adminToken, 403, `Bearer realm="floodgate", error="insufficient_scope", scope="decide"`},
		{"forward auth without a token", "GET", "/v1/forward-auth?rule=api", "", "", 401, "Bearer"},
		{"forward auth with the decide token", "GET", "/v1/forward-auth?rule=api", "", "Bearer " + decideToken, 200, ""},
		{"reset with the decide token", "POST", "/v1/reset", check, "Bearer " + decideToken, 403, `Bearer realm="floodgate", error="insufficient_scope", scope="admin"`},
		{"reset with the admin token", "POST", "/v1/reset", check, "Bearer " + adminToken, 200, ""},
		{"rules without a token", "GET", "/v1/rules", "", "", 401, "Bearer"},
		{"rules with the decide token", "GET", "/v1/rules", "", "Bearer " + decideToken, 403, "Bearer"},
		{"rules with the admin token", "GET", "/v1/rules", "", "Bearer " + adminToken, 200, ""},
		{"metrics without a token", "GET", "/metrics", "", "", 401, "Bearer"},
		{"metrics with the metrics token", "GET", "/metrics", "", "Bearer " + metricsToken, 200, ""},
		{"healthz is open", "GET", "/healthz", "", "", 200, ""},
		{"readyz is open", "GET", "/readyz", "", "", 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := f.do(c.method, c.path, c.body, "Authorization", c.token)
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.status, rec.Body)
			}
			if got := rec.Header().Get("WWW-Authenticate"); !strings.HasPrefix(got, c.challenge) || (c.challenge == "") != (got == "") {
				t.Fatalf("WWW-Authenticate %q, want %q", got, c.challenge)
			}
			if c.status >= 400 {
				if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
					t.Fatalf("Content-Type %q", ct)
				}
				if strings.Contains(rec.Body.String(), decideToken) || strings.Contains(rec.Body.String(), adminToken) {
					t.Fatalf("the answer shows a token: %s", rec.Body)
				}
			}
		})
	}
	// A refused request consumed nothing: 10 decisions fit the bucket.
	for i := range 10 {
		if rec := f.do("POST", "/v1/check", check, "Authorization", "Bearer "+decideToken); rec.Code != 200 {
			t.Fatalf("decision %d: %d", i, rec.Code)
		}
	}
	body := f.do("GET", "/metrics", "", "Authorization", "Bearer "+metricsToken).Body.String()
	for _, want := range []string{
		`floodgate_http_auth_failures_total{reason="missing"} 5`, // a Basic token is no bearer token
		`floodgate_http_auth_failures_total{reason="invalid"} 1`,
		`floodgate_http_auth_failures_total{reason="forbidden"} 3`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestTokensRotate(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	check := `{"rule":"api","key":"k"}`
	if rec := f.do("POST", "/v1/check", check); rec.Code != 200 || f.srv.AuthEnabled() {
		t.Fatalf("no tokens: %d, auth %v; want the API open", rec.Code, f.srv.AuthEnabled())
	}
	f.srv.SetTokens(tokensOf(t, "old decide "+decideToken))
	if rec := f.do("POST", "/v1/check", check, "Authorization", "Bearer "+decideToken); rec.Code != 200 {
		t.Fatalf("old token: %d", rec.Code)
	}
	f.srv.SetTokens(tokensOf(t, "new decide "+adminToken))
	if rec := f.do("POST", "/v1/check", check, "Authorization", "Bearer "+decideToken); rec.Code != 401 {
		t.Fatalf("old token after rotation: %d, want 401", rec.Code)
	}
	if rec := f.do("POST", "/v1/check", check, "Authorization", "Bearer "+adminToken); rec.Code != 200 {
		t.Fatalf("new token: %d", rec.Code)
	}
	f.srv.SetTokens(nil)
	if rec := f.do("POST", "/v1/check", check); rec.Code != 200 {
		t.Fatalf("tokens removed: %d", rec.Code)
	}
}

func TestParseTokensErrors(t *testing.T) {
	cases := []struct{ name, text, want string }{
		{"empty", "# nothing\n\n", "no token"},
		{"two fields", "ingress " + decideToken, "want NAME SCOPES TOKEN"},
		{"short token", "ingress decide short", "shorter than 16"},
		{"unknown scope", "ingress decide,root " + decideToken, `scope "root"`},
		{"bad name", "in/gress decide " + decideToken, "name"},
		{"duplicate name", "a decide " + decideToken + "\na admin " + adminToken, "used twice"},
		{"duplicate secret", "a decide " + decideToken + "\nb admin " + decideToken, "same secret"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := server.ParseTokens(c.text, "tokens.txt")
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "tokens.txt") {
				t.Fatalf("error %v, want one naming tokens.txt and %q", err, c.want)
			}
			if strings.Contains(err.Error(), decideToken) {
				t.Fatalf("the error shows the token: %v", err)
			}
		})
	}
	// Every bad line is reported, with its line number.
	_, err := server.ParseTokens("a decide short\n\nb nope "+adminToken, "t")
	if err == nil || !strings.Contains(err.Error(), "t:1:") || !strings.Contains(err.Error(), "t:3:") {
		t.Fatalf("error %v, want lines 1 and 3", err)
	}
}

func TestMutatingEndpointsNeedJSON(t *testing.T) {
	f := newFixture(t, testConfig, nil)
	body := `{"rule":"login","key":"victim"}`
	for _, path := range []string{"/v1/check", "/v1/reset"} {
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "application/jsonx"} {
			rec := f.do("POST", path, body, "Content-Type", ct)
			if rec.Code != http.StatusUnsupportedMediaType || rec.Header().Get("Content-Type") != "application/problem+json" ||
				rec.Header().Get("Accept-Post") != "application/json" {
				t.Errorf("POST %s as %q: %d %v, want 415 problem+json", path, ct, rec.Code, rec.Header())
			}
		}
		for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON"} {
			if rec := f.do("POST", path, body, "Content-Type", ct); rec.Code != 200 {
				t.Errorf("POST %s as %q: %d: %s", path, ct, rec.Code, rec.Body)
			}
		}
	}
	// The refused checks took nothing: login allows 3 a minute, two were
	// taken by the accepted ones above (and the reset cleared the key).
	rec := f.do("POST", "/v1/check", `{"rule":"login","key":"victim","cost":3}`)
	if rec.Code != 200 {
		t.Fatalf("cost 3 after refused requests: %d %s", rec.Code, rec.Body)
	}
}

func TestOpsHandler(t *testing.T) {
	srv, err := server.New(memory.New(), policyOf(t, testConfig), server.Options{Tokens: tokensOf(t, "a decide "+decideToken)})
	if err != nil {
		t.Fatal(err)
	}
	ops, api := srv.OpsHandler(), srv.APIHandler()
	get := func(h http.Handler, path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code
	}
	for path, want := range map[string]int{"/metrics": 200, "/healthz": 200, "/readyz": 200, "/v1/rules": 404} {
		if got := get(ops, path); got != want {
			t.Errorf("ops %s: %d, want %d", path, got, want)
		}
	}
	for path, want := range map[string]int{"/metrics": 404, "/healthz": 200, "/v1/rules": 401} {
		if got := get(api, path); got != want {
			t.Errorf("api %s: %d, want %d", path, got, want)
		}
	}
}

func TestHugeKeysAreBounded(t *testing.T) {
	store := memory.New()
	srv, err := server.New(store, policyOf(t, testConfig), server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	const n = 200
	for i := range n {
		key := strings.Repeat(string(rune('a'+i%26)), 15<<10) + string(rune('0'+i/26%10)) + string(rune('0'+i%10))
		body, _ := json.Marshal(map[string]any{"rule": "api", "key": key})
		req := httptest.NewRequest("POST", "/v1/check", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("key %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if got := store.Len(); got != n {
		t.Fatalf("%d keys stored, want %d (distinct huge keys must stay distinct)", got, n)
	}
	// Every stored key is a hash: far below the 15 KB the client sent.
	if got := store.Stats().KeyBytes; got > n*128 {
		t.Fatalf("the store holds %d bytes of keys for %d keys of 15 KB; want them hashed (under 128 bytes each)", got, n)
	}
}

func TestStoreAPIAccess(t *testing.T) {
	srv, err := server.New(memory.New(), server.Policy{}, server.Options{StoreAPI: &server.StoreAPI{},
		Tokens: tokensOf(t, "remote decide "+decideToken+"\nops admin "+adminToken)})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	const body = `{"key":"a","limit":{"algorithm":"fixed_window","quota":2,"window_us":60000000},"cost":1}`
	cases := []struct {
		name, token, ct string
		status          int
	}{
		{"no token", "", "application/json", 401},
		{"admin token", adminToken, "application/json", 403},
		{"decide token", decideToken, "application/json", 200},
		{"decide token, text/plain", decideToken, "text/plain", 415},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/v1/store/allow", strings.NewReader(body))
			r.Header.Set("Content-Type", c.ct)
			if c.token != "" {
				r.Header.Set("Authorization", "Bearer "+c.token)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.status {
				t.Fatalf("%d %s, want %d", w.Code, w.Body, c.status)
			}
		})
	}
}
