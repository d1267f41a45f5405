package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/floodgate-rl/floodgate/config"
)

// envoyFields maps each field of the config readEnvoyEnv builds to the
// peer's variables that set it, so that an error config.Parse finds in it
// names those variables and their values, never a line or a field of a
// document the user did not write. Under store.per_second, the REDIS_
// variables stand for their REDIS_PERSECOND_ twins (perSecondVar).
var envoyFields = map[string][]string{
	"listen":                               {"HOST", "PORT"},
	"grpc_listen":                          {"GRPC_HOST", "GRPC_PORT"},
	"envoy_config":                         {"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"},
	"log":                                  {"LOG_LEVEL", "LOG_FORMAT"},
	"log.level":                            {"LOG_LEVEL"},
	"log.format":                           {"LOG_FORMAT"},
	"tls":                                  {"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT"},
	"tls.cert_file":                        {"GRPC_SERVER_TLS_CERT"},
	"tls.key_file":                         {"GRPC_SERVER_TLS_KEY"},
	"tls.client_ca_file":                   {"GRPC_CLIENT_TLS_CACERT"},
	"store":                                {"REDIS_TYPE", "REDIS_SOCKET_TYPE", "REDIS_URL"},
	"store.type":                           {"REDIS_TYPE", "REDIS_SOCKET_TYPE"},
	"store.addrs":                          {"REDIS_URL", "REDIS_SOCKET_TYPE"},
	"store.master_name":                    {"REDIS_URL"},
	"store.db":                             {"REDIS_URL"},
	"store.username":                       {"REDIS_AUTH", "REDIS_URL"},
	"store.password":                       {"REDIS_AUTH", "REDIS_URL"},
	"store.sentinel_username":              {"REDIS_SENTINEL_AUTH", "REDIS_URL"},
	"store.sentinel_password":              {"REDIS_SENTINEL_AUTH", "REDIS_URL"},
	"store.key_prefix":                     {"CACHE_KEY_PREFIX"},
	"store.tls":                            {"REDIS_TLS", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT"},
	"store.tls_cert_file":                  {"REDIS_TLS_CLIENT_CERT"},
	"store.tls_key_file":                   {"REDIS_TLS_CLIENT_KEY"},
	"store.tls_ca_file":                    {"REDIS_TLS_CACERT"},
	"store.tls_skip_hostname_verification": {"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"},
	"store.timeout":                        {"REDIS_TIMEOUT"},
	"store.flush_delay":                    {"REDIS_PIPELINE_WINDOW"},
	"store.per_second":                     {"REDIS_PERSECOND"},
}

// secretVars are the variables whose values are never shown; urlVars those
// whose values are shown with their credentials masked (maskRedisURL).
var (
	secretVars = []string{"REDIS_AUTH", "REDIS_SENTINEL_AUTH", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_SENTINEL_AUTH"}
	urlVars    = []string{"REDIS_URL", "REDIS_PERSECOND_URL"}
)

// hiddenValues are the fields whose errors' values are not shown: the
// credentials, and the TLS sections, whose values list floodgate's fields
// (the variables shown say the same).
var hiddenValues = []string{"username", "password", "tls"}

// perSecondVar is the variable of the per-second Redis that stands for
// name, one of the main Redis's: the TLS files and CACHE_KEY_PREFIX are
// shared by both, as by the peer.
func perSecondVar(name string) string {
	if strings.HasPrefix(name, "REDIS_TLS_") || !strings.HasPrefix(name, "REDIS_") {
		return name
	}
	return "REDIS_PERSECOND_" + strings.TrimPrefix(name, "REDIS_")
}

var indexRE = regexp.MustCompile(`\[\d+\]`)

// envoyFieldVars returns the variables that set the config field at path
// (such as store.per_second.addrs[0]): those of the field, or of the
// nearest section holding it; nil if none is known.
func envoyFieldVars(path string) []string {
	p := indexRE.ReplaceAllString(path, "")
	perSecond := false
	if rest, ok := strings.CutPrefix(p, "store.per_second."); ok {
		p, perSecond = "store."+rest, true
	}
	for {
		if vars, ok := envoyFields[p]; ok {
			if !perSecond {
				return vars
			}
			out := make([]string, len(vars))
			for i, v := range vars {
				out[i] = perSecondVar(v)
			}
			return out
		}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			return nil
		}
		p = p[:i]
	}
}

// showVars writes the variables as NAME="value" (those set), or, when none
// is, names the first one unset, its default applying.
func showVars(vars []string, lookup func(string) (string, bool)) string {
	var set []string
	for _, v := range vars {
		if val, ok := lookup(v); ok {
			set = append(set, showVar(v, val))
		}
	}
	if len(set) == 0 {
		return vars[0] + " (unset, the peer's default)"
	}
	return strings.Join(set, ", ")
}

// showVar is one variable and its value as errors show it: credentials
// never.
func showVar(name, val string) string {
	switch {
	case slices.Contains(secretVars, name):
		return name + " (its value not shown)"
	case slices.Contains(urlVars, name):
		return name + "=" + strconv.Quote(maskRedisURL(val))
	}
	return name + "=" + strconv.Quote(val)
}

// envoyConfigError rewrites an error of config.Parse on the config built
// from the peer's variables: each bad field is named by the variables that
// set it, with their values (credentials masked) and the fix.
func envoyConfigError(err error, lookup func(string) (string, bool)) error {
	var msgs []string
	for _, leaf := range errLeaves(err) {
		var fe *config.FieldError
		if !errors.As(leaf, &fe) {
			msgs = append(msgs, maskRedisURL(leaf.Error()))
			continue
		}
		vars := envoyFieldVars(fe.Path)
		if vars == nil { // a field envoyFields does not know: a bug, caught by its test
			vars = []string{"(floodgate's " + fe.Path + ")"}
		}
		var b strings.Builder
		b.WriteString(showVars(vars, lookup))
		b.WriteString(": ")
		if fe.Value != "" && !slices.ContainsFunc(hiddenValues, func(f string) bool { return strings.HasSuffix(fe.Path, f) }) {
			b.WriteString(maskRedisURL(fe.Value))
			b.WriteString(addrItem(fe.Path, lookup))
			b.WriteByte(' ')
		}
		b.WriteString(fieldsToVars(fe.Reason, strings.HasPrefix(fe.Path, perSecondPath)))
		if fe.Fix != "" {
			b.WriteString("; ")
			b.WriteString(fieldsToVars(fe.Fix, strings.HasPrefix(fe.Path, perSecondPath)))
		}
		msgs = append(msgs, b.String())
	}
	return fmt.Errorf("envoyproxy/ratelimit environment: %s", strings.Join(msgs, "; "))
}

var addrIndexRE = regexp.MustCompile(`\.addrs\[(\d+)\]$`)

// addrItem names, for an error about one of the addresses (path
// store.addrs[i] or store.per_second.addrs[i]) of a REDIS_URL listing
// several, which one it is: " (its address 2)", or " (its sentinel 1)"
// after a sentinel list's master name; "" otherwise.
func addrItem(path string, lookup func(string) (string, bool)) string {
	m := addrIndexRE.FindStringSubmatch(path)
	if m == nil {
		return ""
	}
	prefix := "REDIS_"
	if strings.HasPrefix(path, perSecondPath+".") {
		prefix = "REDIS_PERSECOND_"
	}
	url, _ := lookup(prefix + "URL")
	i, _ := strconv.Atoi(m[1])
	if t, _ := lookup(prefix + "TYPE"); strings.EqualFold(t, "sentinel") {
		return fmt.Sprintf(" (its sentinel %d)", i+1)
	}
	if !strings.Contains(url, ",") {
		return ""
	}
	return fmt.Sprintf(" (its address %d)", i+1)
}

// perSecondPath is the config section of the per-second Redis.
const perSecondPath = "store.per_second"

// fieldsToVars replaces, in a message of config.Parse, the fields that one
// variable sets with that variable (those of the per-second Redis if
// perSecond), longest first.
func fieldsToVars(msg string, perSecond bool) string {
	fields := make([]string, 0, len(envoyFields))
	for f, vars := range envoyFields {
		if len(vars) == 1 && strings.Contains(f, ".") {
			fields = append(fields, f)
		}
	}
	slices.SortFunc(fields, func(a, b string) int { return len(b) - len(a) })
	for _, f := range fields {
		v := envoyFields[f][0]
		if perSecond {
			v = perSecondVar(v)
		}
		msg = strings.ReplaceAll(msg, f, v)
	}
	return msg
}

// errLeaves are the errors joined in err, each a FieldError where one is
// inside.
func errLeaves(err error) []error {
	switch u := err.(type) {
	case *config.FieldError:
		return []error{err}
	case interface{ Unwrap() []error }:
		var out []error
		for _, e := range u.Unwrap() {
			out = append(out, errLeaves(e)...)
		}
		return out
	case interface{ Unwrap() error }:
		var fe *config.FieldError
		if errors.As(err, &fe) {
			return errLeaves(u.Unwrap())
		}
	}
	return []error{err}
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

// envoyListeners are serve's listeners under --envoy-env, named by the
// peer's variables that set them, with fixes that work there: the
// environment has no setting for tokens, so requiring them means running
// with a config file instead.
func envoyListeners(listen, grpcListen string) ([]exposable, string) {
	listeners := []exposable{
		{"HOST/PORT", listen, "set HOST=127.0.0.1"},
		{"GRPC_HOST/GRPC_PORT", grpcListen, "set GRPC_HOST=127.0.0.1, or GRPC_UDS to a unix socket's path for an Envoy on this machine"},
	}
	return listeners, "run floodgate serve --config FILE with auth.tokens_file instead of --envoy-env, which has no setting for tokens " +
		"(and give Envoy the decide token in its gRPC service's initial_metadata)"
}
