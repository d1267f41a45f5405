package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/server"
)

// checkTimeout bounds the whole exchange with a running server.
const checkTimeout = 10 * time.Second

// askServer asks the floodgate serve at base (POST /v1/check) to decide one
// request, and returns its answer and the body as sent. A problem answer
// (an unknown rule, a fail-closed outage, a refused token) is an error
// carrying its status and detail.
func askServer(ctx context.Context, base, tokenFile, rule, key string, cost int64) (server.CheckResponse, []byte, error) {
	var resp server.CheckResponse
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return resp, nil, fmt.Errorf("--url %q is not a base URL such as http://127.0.0.1:8080", base)
	}
	body, err := json.Marshal(map[string]any{"rule": rule, "key": key, "cost": cost})
	if err != nil {
		return resp, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(u.String(), "/")+"/v1/check", bytes.NewReader(body))
	if err != nil {
		return resp, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if tokenFile != "" {
		tok, err := os.ReadFile(tokenFile)
		if err != nil {
			return resp, nil, fmt.Errorf("--token-file: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return resp, nil, fmt.Errorf("asking %s: %w", base, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return resp, nil, fmt.Errorf("reading the answer of %s: %w", base, err)
	}
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusTooManyRequests {
		var p struct {
			Title  string `json:"title"`
			Detail string `json:"detail"`
		}
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &p) == nil && (p.Detail != "" || p.Title != "") {
			msg = strings.TrimSpace(p.Title + ": " + p.Detail)
		}
		return resp, nil, fmt.Errorf("%s answered %s: %s", base, res.Status, msg)
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		return resp, nil, fmt.Errorf("%s answered %s with a body that is not a decision: %w", base, res.Status, err)
	}
	return resp, raw, nil
}
