package config

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// docKeys walks t's yaml keys as docs/CONFIG.md writes them: "store.addrs",
// "rules[].name"; a struct is walked into, a list of structs too, a
// pointer to a struct (an optional section) is a key and walked into (but
// store.per_second, a Store within the Store, is one key), and anything else (durations, text-unmarshalled types) is a key.
func docKeys(t reflect.Type, prefix string) map[string]reflect.Type {
	keys := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		path := prefix + name
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Duration]() && !textual(ft):
			for k, v := range docKeys(ft, path+".") {
				keys[k] = v
			}
		case ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct && ft.Elem() != t && !textual(ft.Elem()):
			// An optional section (rules[].lease): the key, and its keys.
			keys[path] = ft
			for k, v := range docKeys(ft.Elem(), path+".") {
				keys[k] = v
			}
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && !textual(ft.Elem()):
			for k, v := range docKeys(ft.Elem(), path+"[].") {
				keys[k] = v
			}
		default:
			keys[path] = ft
		}
	}
	return keys
}

func textual(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return p.Implements(reflect.TypeFor[interface{ UnmarshalText([]byte) error }]())
}

// docRow is a row of docs/CONFIG.md's key tables.
var docRow = regexp.MustCompile("(?m)^\\| `([^`]+)` \\|(.*)\\|\\s*$")

// TestConfigDocIsComplete: docs/CONFIG.md has a row for every key of the
// configuration types, with a type, a default, an example and a meaning,
// and no row for a key that does not exist.
func TestConfigDocIsComplete(t *testing.T) {
	data, err := os.ReadFile("../docs/CONFIG.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	want := docKeys(reflect.TypeFor[Config](), "")
	got := map[string]bool{}
	for _, m := range docRow.FindAllStringSubmatch(doc, -1) {
		key := m[1]
		if got[key] {
			t.Errorf("docs/CONFIG.md: key %s has two rows", key)
		}
		got[key] = true
		cells := strings.Split(m[2], "|")
		if len(cells) != 4 {
			t.Errorf("docs/CONFIG.md: the row of %s has %d cells after the key, want 4: type | default | example | meaning", key, len(cells))
			continue
		}
		for i, name := range []string{"type", "default", "example", "meaning"} {
			if strings.TrimSpace(cells[i]) == "" {
				t.Errorf("docs/CONFIG.md: the row of %s has no %s", key, name)
			}
		}
		if _, ok := want[key]; !ok {
			t.Errorf("docs/CONFIG.md documents %s, which is no key of config.Config: remove the row or fix its name", key)
		}
	}
	var missing []string
	for key, typ := range want {
		if !got[key] {
			missing = append(missing, key+" ("+typ.String()+")")
		}
	}
	slices.Sort(missing)
	for _, key := range missing {
		t.Errorf("docs/CONFIG.md lacks the key %s: add a row | `key` | type | default | example | meaning | to its table", key)
	}
}

// TestConfigDocExample: the complete example of docs/CONFIG.md is a valid
// config that sets every key of the reference.
func TestConfigDocExample(t *testing.T) {
	data, err := os.ReadFile("../docs/CONFIG.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i := strings.Index(doc, "<!-- tested: complete example")
	if i < 0 {
		t.Fatal("docs/CONFIG.md has no tested complete example")
	}
	rest := doc[i:]
	start := strings.Index(rest, "```yaml\n") + len("```yaml\n")
	end := strings.Index(rest[start:], "\n```")
	src := rest[start : start+end+1]
	t.Setenv("REDIS_PASSWORD", "example")
	t.Setenv("SENTINEL_PASSWORD", "example")
	t.Setenv("FLOODGATE_TOKENS", "ingress decide 0123456789abcdef0123456789abcdef")
	cfg, err := Parse([]byte(src), "docs/CONFIG.md example")
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	index := regexp.MustCompile(`\[\d+\]`)
	for path := range cfg.lines {
		set[index.ReplaceAllString(path, "[]")] = true
	}
	for key := range docKeys(reflect.TypeFor[Config](), "") {
		switch key {
		case "store.password", "store.sentinel_password":
			continue // exclude password_env and sentinel_password_env, which the example shows
		case "auth.tokens_file":
			continue // excludes tokens_env, which the example shows
		case "tls.cert_file", "tls.key_file", "tls.client_ca_file", "store.tls_ca_file", "store.tls_cert_file", "store.tls_key_file":
			continue // name files validation reads (docs/SECURITY.md shows them)
		case "store.max_keys":
			continue // the memory store's, and the example's store is Redis
		}
		if !set[key] {
			t.Errorf("the complete example does not set %s", key)
		}
	}
}
