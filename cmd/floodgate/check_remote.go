package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/filebound"
	"github.com/floodgate-rl/floodgate/internal/tlsfiles"
	"github.com/floodgate-rl/floodgate/server"
)

// checkTimeout bounds the whole exchange with a running server.
const checkTimeout = 10 * time.Second

// askServer asks the floodgate serve at base (POST /v1/check) to decide one
// request, and returns its answer and the body as sent. A problem answer
// (an unknown rule, a fail-closed outage, a refused token) is an error
// carrying its status and detail.
// remoteOpts are check's flags for --url: the token to send, and the TLS
// files of an https server.
type remoteOpts struct {
	tokenFile                 string
	caFile, certFile, keyFile string
	serverName                string // the name the server's certificate must hold; "": the URL's host
}

// tls reports whether any TLS setting is given.
func (o remoteOpts) tls() bool {
	return o.caFile != "" || o.certFile != "" || o.keyFile != "" || o.serverName != ""
}

// client returns the HTTP client that asks the server: with the TLS
// files' CAs and client certificate when given.
func (o remoteOpts) client() (*http.Client, error) {
	if !o.tls() {
		return http.DefaultClient, nil
	}
	c, err := tlsfiles.Client(o.caFile, o.certFile, o.keyFile, o.serverName)
	if err != nil {
		var fe *tlsfiles.FileError
		if errors.As(err, &fe) {
			flag := map[string]string{"tls_ca_file": "--ca-file", "tls_cert_file": "--cert-file", "tls_key_file": "--key-file"}[fe.Key]
			return nil, fmt.Errorf("%s %s: %w", flag, fe.File, fe.Err)
		}
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: c, ForceAttemptHTTP2: true}}, nil
}

func askServer(ctx context.Context, base string, o remoteOpts, rule, key string, cost int64) (server.CheckResponse, []byte, error) {
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
	if o.tokenFile != "" {
		tok, err := filebound.Read(o.tokenFile, filebound.MaxTokens)
		if err != nil {
			return resp, nil, fmt.Errorf("--token-file %s: %w", o.tokenFile, err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	client, err := o.client()
	if err != nil {
		return resp, nil, err
	}
	res, err := client.Do(req)
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
