package main

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// redisURLCreds are what the peer's Redis client (radix v4's
// parseRedisURL) reads from the redis:// URLs of REDIS_URL: the
// credentials and the database the connections use.
type redisURLCreds struct {
	user, pass string
	db         int
}

// parseRedisAddrs reads the addresses of the variable name (value val,
// already split at its commas), each host:port or, as for the peer, a URL
// redis://[user:password@]host:port[/db][?username=&password=&db=]. It
// returns the addresses as host:port and the credentials the URLs carry,
// which must be the same in every one (floodgate uses one user, password
// and database for every node). Errors go to e, never with a credential.
func parseRedisAddrs(e *envReader, name, val string, items []string) ([]string, redisURLCreds) {
	addrs := make([]string, len(items))
	var creds redisURLCreds
	for i, item := range items {
		addrs[i] = item
		at := ""
		if len(items) > 1 {
			at = fmt.Sprintf(" (its address %d)", i+1)
		}
		scheme, _, isURL := strings.Cut(item, "://")
		if !isURL {
			if i > 0 && creds != (redisURLCreds{}) {
				e.fail("%s=%q%s: the other addresses are redis:// URLs with credentials or a db: floodgate uses the same for every node, so give each the same, or set them once (%sAUTH)",
					name, maskRedisURL(val), at, strings.TrimSuffix(name, "URL"))
			}
			continue
		}
		if scheme != "redis" {
			// radix reads redis:// only: the peer would dial the whole
			// string as an address and fail.
			e.fail("%s=%q%s: the peer's Redis client reads only redis:// URLs (not %s://); for TLS write redis://host:port and set %sTLS=true",
				name, maskRedisURL(val), at, scheme, strings.TrimSuffix(name, "URL"))
			continue
		}
		u, err := url.Parse(item)
		if err != nil || u.Host == "" {
			e.fail("%s=%q%s is not a URL redis://[user:password@]host:port[/db]", name, maskRedisURL(val), at)
			continue
		}
		q := u.Query()
		c := redisURLCreds{user: q.Get("username"), pass: q.Get("password")}
		if n := u.User.Username(); n != "" {
			c.user = n
		}
		if p, ok := u.User.Password(); ok {
			c.pass = p
		}
		db := q.Get("db")
		if u.Path != "" && u.Path != "/" {
			db = u.Path[1:]
		}
		if db != "" {
			n, err := strconv.Atoi(db)
			if err != nil || n < 0 {
				e.fail("%s=%q%s: its database %q is not a whole number", name, maskRedisURL(val), at, db)
			}
			c.db = n
		}
		if i > 0 && c != creds {
			e.fail("%s=%q%s: its credentials or db differ from the first address's: floodgate uses the same for every node, so give each the same",
				name, maskRedisURL(val), at)
		}
		creds = c
		addrs[i] = u.Host
	}
	return addrs, creds
}

// maskRedisURL hides the credentials of the redis:// URLs in s (a value of
// REDIS_URL, a comma list, or a message quoting one): user:password@
// becomes *****@, and a query naming a password is hidden whole.
func maskRedisURL(s string) string {
	return urlCredsRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := urlCredsRE.FindStringSubmatch(m)
		out := sub[1] + "://"
		if sub[2] != "" {
			out += "*****@"
		}
		out += sub[3]
		if q := sub[4]; q != "" {
			if strings.Contains(strings.ToLower(q), "pass") || strings.Contains(strings.ToLower(q), "user") {
				q = "?*****"
			}
			out += q
		}
		return out
	})
}

// urlCredsRE matches a URL: its scheme, userinfo (up to the last @ before
// the host), host and path, and query, up to a comma, quote or space.
var urlCredsRE = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*)://(?:([^,"\s]*)@)?([^,"\s?@]*)(\?[^,"\s]*)?`)
