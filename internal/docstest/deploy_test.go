package docstest

import (
	"crypto/rand"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate/config"
)

// object is one Kubernetes object, as parsed YAML.
type object = map[string]any

// dig follows keys (strings for mappings, ints for lists) into v.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// kubeObjects parses every file in deploy/kubernetes by kind.
func kubeObjects(t *testing.T) map[string]object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root(t), "deploy", "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no files in deploy/kubernetes: %v", err)
	}
	byKind := map[string]object{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(data)))
		for {
			var o object
			if err := dec.Decode(&o); err != nil {
				if err.Error() == "EOF" {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			kind, _ := o["kind"].(string)
			for _, field := range []string{"apiVersion", "kind"} {
				if s, _ := o[field].(string); s == "" {
					t.Errorf("%s: no %s", f, field)
				}
			}
			if name, _ := dig(o, "metadata", "name").(string); name == "" {
				t.Errorf("%s: %s has no metadata.name", f, kind)
			}
			if _, dup := byKind[kind]; dup {
				t.Errorf("%s: a second %s", f, kind)
			}
			byKind[kind] = o
		}
	}
	for _, kind := range []string{"Deployment", "ConfigMap", "Secret", "Service"} {
		if byKind[kind] == nil {
			t.Fatalf("deploy/kubernetes has no %s", kind)
		}
	}
	return byKind
}

// TestKubernetesExample: the example's objects fit together: the probes
// ask /healthz and /readyz on the port the config listens on, the config
// the ConfigMap holds is valid to floodgate itself, and the Secret holds
// the keys the Deployment refers to.
func TestKubernetesExample(t *testing.T) {
	objs := kubeObjects(t)
	dep, cm, secret, svc := objs["Deployment"], objs["ConfigMap"], objs["Secret"], objs["Service"]

	if dig(dep, "apiVersion") != "apps/v1" {
		t.Errorf("Deployment apiVersion %v", dig(dep, "apiVersion"))
	}
	labels, _ := dig(dep, "spec", "template", "metadata", "labels").(map[string]any)
	selector, _ := dig(dep, "spec", "selector", "matchLabels").(map[string]any)
	for k, v := range selector {
		if labels[k] != v {
			t.Errorf("the Deployment's selector %s=%v does not match its pods' labels %v", k, v, labels)
		}
	}
	for k, v := range dig(svc, "spec", "selector").(map[string]any) {
		if labels[k] != v {
			t.Errorf("the Service's selector %s=%v does not match the pods' labels %v", k, v, labels)
		}
	}
	pod := dig(dep, "spec", "template", "spec")
	if dig(pod, "securityContext", "runAsNonRoot") != true {
		t.Error("the pod does not require a non-root user")
	}
	c := dig(pod, "containers", 0)
	// On a release: a version tag or a digest, never :latest nor no tag.
	img, _ := dig(c, "image").(string)
	if !regexp.MustCompile(`^[\w./-]+(:v\d+\.\d+\.\d+[\w.-]*)?(@sha256:[0-9a-f]{64})?$`).MatchString(img) ||
		!strings.Contains(img, ":v") && !strings.Contains(img, "@sha256:") {
		t.Errorf("the container's image %q is on no release: want a version tag (:v1.2.3) or a digest, never :latest", img)
	}
	ports := map[string]int{}
	for _, p := range dig(c, "ports").([]any) {
		ports[dig(p, "name").(string)] = dig(p, "containerPort").(int)
	}
	probePorts := map[string]int{} // probe -> the container port it asks
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		if got := dig(c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s asks %v, want %s", probe, got, path)
		}
		port, _ := dig(c, probe, "httpGet", "port").(string)
		if ports[port] == 0 {
			t.Errorf("%s's port %v is none of the container's ports %v", probe, dig(c, probe, "httpGet", "port"), ports)
		}
		probePorts[probe] = ports[port]
	}
	if tp, _ := dig(svc, "spec", "ports", 0, "targetPort").(string); ports[tp] == 0 {
		t.Errorf("the Service's targetPort %v is none of the container's ports", dig(svc, "spec", "ports", 0, "targetPort"))
	}

	// Volumes: the ConfigMap and the Secret, by name, the config mounted
	// where the container's --config reads it.
	volumes := map[string]any{}
	for _, v := range dig(pod, "volumes").([]any) {
		volumes[dig(v, "name").(string)] = v
	}
	mounts := map[string]string{}
	for _, m := range dig(c, "volumeMounts").([]any) {
		mounts[dig(m, "name").(string)] = dig(m, "mountPath").(string)
		if dig(m, "readOnly") != true {
			t.Errorf("volume %v is mounted writable", dig(m, "name"))
		}
	}
	var cfgVolume, secretVolume string
	for name, v := range volumes {
		if dig(v, "configMap", "name") == dig(cm, "metadata", "name") {
			cfgVolume = name
		}
		if dig(v, "secret", "secretName") == dig(secret, "metadata", "name") {
			secretVolume = name
		}
	}
	if cfgVolume == "" || secretVolume == "" || mounts[cfgVolume] == "" || mounts[secretVolume] == "" {
		t.Fatalf("the ConfigMap and the Secret are not both mounted: volumes %v, mounts %v", volumes, mounts)
	}
	if strings.HasPrefix(mounts[secretVolume], mounts[cfgVolume]+"/") {
		t.Errorf("the Secret is mounted inside the ConfigMap's read-only volume (%s in %s)", mounts[secretVolume], mounts[cfgVolume])
	}
	args := dig(c, "args").([]any)
	i := slices.Index(args, any("--config"))
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("the container's args %v have no --config", args)
	}
	cfgPath := args[i+1].(string)
	if filepath.Dir(cfgPath) != mounts[cfgVolume] {
		t.Errorf("--config %s is not in the ConfigMap's mount %s", cfgPath, mounts[cfgVolume])
	}
	data, _ := dig(cm, "data", filepath.Base(cfgPath)).(string)
	if data == "" {
		t.Fatalf("the ConfigMap has no %s", filepath.Base(cfgPath))
	}

	// The Secret's keys the Deployment refers to exist.
	secretKeys := dig(secret, "stringData").(map[string]any)
	for _, item := range dig(volumes[secretVolume], "secret", "items").([]any) {
		if _, ok := secretKeys[dig(item, "key").(string)]; !ok {
			t.Errorf("the tokens volume names Secret key %v, which the Secret lacks", dig(item, "key"))
		}
	}
	env := map[string]bool{}
	for _, e := range dig(c, "env").([]any) {
		key, _ := dig(e, "valueFrom", "secretKeyRef", "key").(string)
		if key != "" {
			if _, ok := secretKeys[key]; !ok {
				t.Errorf("env %v names Secret key %s, which the Secret lacks", dig(e, "name"), key)
			}
			t.Setenv(dig(e, "name").(string), secretKeys[key].(string))
			env[dig(e, "name").(string)] = true
		}
	}

	// The Secret's files, where the pod would see them: under a temp
	// folder standing for the Secret volume's mount.
	secretMount := t.TempDir()
	secretFiles := map[string]string{} // path in the pod -> the file's text
	for _, item := range dig(volumes[secretVolume], "secret", "items").([]any) {
		text, _ := secretKeys[dig(item, "key").(string)].(string)
		inPod := filepath.Join(mounts[secretVolume], dig(item, "path").(string))
		secretFiles[inPod] = text
		if err := os.WriteFile(filepath.Join(secretMount, dig(item, "path").(string)), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// The config is valid to floodgate, listens on the container's port
	// beyond loopback, and reads its Redis password from the Secret.
	inTest := strings.ReplaceAll(data, mounts[secretVolume]+"/", secretMount+"/")
	// Applied as it is, the example refuses to start: its tokens are
	// public placeholders.
	if _, err := config.Parse([]byte(inTest), "configmap.yaml"); err == nil || !strings.Contains(err.Error(), "placeholder") {
		t.Fatalf("the config with the Secret's placeholder tokens loads (err %v): the example would start with public tokens", err)
	}
	// With each placeholder replaced by a generated token, it loads.
	placeholder := regexp.MustCompile(`replace-me[\w-]*`)
	for inPod, text := range secretFiles {
		generated := placeholder.ReplaceAllStringFunc(text, func(string) string { return rand.Text() + rand.Text() })
		if err := os.WriteFile(filepath.Join(secretMount, strings.TrimPrefix(inPod, mounts[secretVolume])), []byte(generated), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Parse([]byte(inTest), "configmap.yaml "+filepath.Base(cfgPath))
	if err != nil {
		t.Fatal(err)
	}
	// It listens beyond loopback, so the API needs tokens: auth names a
	// file of the Secret's, in the tokens format, that loads.
	if !cfg.Auth.Enabled() {
		t.Fatal("the config listens beyond loopback with no auth: an unauthenticated API")
	}
	if cfg.Auth.TokensFile == "" {
		t.Fatalf("auth does not name a tokens file of the Secret's (auth %+v)", cfg.Auth)
	}
	inPod := strings.Replace(cfg.Auth.TokensFile, secretMount, mounts[secretVolume], 1)
	if _, ok := secretFiles[inPod]; !ok {
		t.Fatalf("auth.tokens_file %s is none of the Secret's files %v", inPod, secretFiles)
	}
	tokens, err := cfg.Auth.Tokens()
	if err != nil {
		t.Fatalf("the Secret's tokens file does not load: %v", err)
	}
	if tokens.Len() < 1 {
		t.Fatal("the tokens file holds no token")
	}
	if names := strings.Join(tokens.Names(), " "); !strings.Contains(names, "(decide)") {
		t.Errorf("no token has the decide scope alone, for the ingress: %s", names)
	}
	for _, doc := range []string{"deploy/kubernetes/secret.yaml", "deploy/kubernetes/README.md"} {
		if !strings.Contains(readDoc(t, doc), "openssl rand -hex 32") {
			t.Errorf("%s does not say how to generate a token", doc)
		}
	}
	if w := cfg.Warnings(); len(w) > 0 {
		t.Errorf("the config warns: %q", w)
	}
	host, port, _ := net.SplitHostPort(cfg.Listen)
	if host != "0.0.0.0" && host != "" && host != "::" {
		t.Errorf("listen %s is not reachable from outside the pod", cfg.Listen)
	}
	if port != "8080" || ports["http"] != 8080 {
		t.Errorf("listen %s, container port %d: they differ", cfg.Listen, ports["http"])
	}
	// The probes ask the metrics listener, never the API's port, which a
	// flood of callers can fill.
	if cfg.MetricsListen == "" {
		t.Fatal("the config has no metrics_listen: the probes would share the API's port with its callers")
	}
	mhost, mport, _ := net.SplitHostPort(cfg.MetricsListen)
	if mhost != "0.0.0.0" && mhost != "" && mhost != "::" {
		t.Errorf("metrics_listen %s is not reachable by the kubelet's probes from outside the pod", cfg.MetricsListen)
	}
	for probe, p := range probePorts {
		if strconv.Itoa(p) != mport {
			t.Errorf("%s asks port %d, want the metrics listener's %s (metrics_listen %s; listen %s)", probe, p, mport, cfg.MetricsListen, cfg.Listen)
		}
	}
	if cfg.Store.Type == config.StoreMemory {
		t.Error("several replicas on the memory store would each count alone")
	}
	if cfg.Store.Password != "" || !env[cfg.Store.PasswordEnv] {
		t.Errorf("the Redis password is not read from the Secret (password %q, password_env %q)", cfg.Store.Password, cfg.Store.PasswordEnv)
	}
	if _, err := cfg.RedisConfig(); err != nil {
		t.Error(err)
	}
	checkScrape(t, objs, cfg, ports)
}

// checkScrape: the pods' prometheus.io annotations name the container's
// metrics port, on which the config serves /metrics (metrics_listen), and
// the NetworkPolicy, if any, names only ports the container has.
func checkScrape(t *testing.T, objs map[string]object, cfg *config.Config, ports map[string]int) {
	t.Helper()
	ann, _ := dig(objs["Deployment"], "spec", "template", "metadata", "annotations").(map[string]any)
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("the pods' annotations %v do not ask Prometheus to scrape /metrics", ann)
	}
	_, port, _ := net.SplitHostPort(cfg.MetricsListen)
	if p, _ := ann["prometheus.io/port"].(string); p == "" || p != port || strconv.Itoa(ports["metrics"]) != p {
		t.Errorf("prometheus.io/port %v, metrics_listen %q, container port metrics %d: they differ", ann["prometheus.io/port"], cfg.MetricsListen, ports["metrics"])
	}
	np := objs["NetworkPolicy"]
	if np == nil {
		return
	}
	rules, _ := dig(np, "spec", "ingress").([]any)
	for i := range rules {
		for j := 0; dig(rules[i], "ports", j) != nil; j++ {
			if name, _ := dig(rules[i], "ports", j, "port").(string); ports[name] == 0 {
				t.Errorf("the NetworkPolicy's ingress %d names port %v, none of the container's %v", i, dig(rules[i], "ports", j, "port"), ports)
			}
		}
	}
}

// TestDockerfile: a multi-stage build of a static binary (CGO_ENABLED=0)
// whose final stage is distroless or scratch, runs as a non-root user, and
// starts serve with the config where the Kubernetes example mounts it.
func TestDockerfile(t *testing.T) {
	src := readDoc(t, "Dockerfile")
	var froms, runs []string
	var user, cmd, healthcheck string
	args := map[string]string{} // the ARGs before the first FROM, which FROM may use
	copiedFromBuild := false
	var copiedTo []string
	for _, line := range strings.Split(strings.ReplaceAll(src, "\\\n", " "), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(instr) {
		case "ARG":
			if name, value, ok := strings.Cut(rest, "="); ok && len(froms) == 0 {
				args[name] = value
			}
		case "HEALTHCHECK":
			healthcheck = rest
		case "FROM":
			froms = append(froms, os.Expand(rest, func(name string) string { return args[name] }))
			user = ""
		case "RUN":
			runs = append(runs, rest)
		case "USER":
			user = rest
		case "CMD":
			cmd = rest
		case "COPY":
			if strings.HasPrefix(rest, "--from=") && len(froms) > 1 {
				copiedFromBuild = true
			}
			if f := strings.Fields(rest); len(f) > 0 {
				copiedTo = append(copiedTo, f[len(f)-1])
			}
		}
	}
	if len(froms) < 2 || !copiedFromBuild {
		t.Fatalf("not a multi-stage build: FROM %q", froms)
	}
	// docs/ENVOY.md's migration: the peer's manifests run /bin/ratelimit.
	if !slices.Contains(copiedTo, "/bin/ratelimit") {
		t.Errorf("the image has no /bin/ratelimit (envoyproxy/ratelimit's binary path, which its manifests run): COPY targets %q", copiedTo)
	}
	if final := froms[len(froms)-1]; !strings.Contains(final, "distroless") && !strings.HasPrefix(final, "scratch") {
		t.Errorf("the final stage %q is neither distroless nor scratch", final)
	}
	static := regexp.MustCompile(`CGO_ENABLED=0 .*go build .*\./cmd/floodgate`)
	if !slices.ContainsFunc(runs, static.MatchString) {
		t.Errorf("no RUN builds ./cmd/floodgate with CGO_ENABLED=0: %q", runs)
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "root" || u == "0" {
		t.Errorf("the final stage runs as %q, not a non-root user", user)
	}
	if !strings.Contains(cmd, `"serve"`) || !strings.Contains(cmd, "/etc/floodgate/floodgate.yaml") {
		t.Errorf("CMD %s does not serve /etc/floodgate/floodgate.yaml, where the Kubernetes example mounts it", cmd)
	}

	// The base images: the build's on an exact Go release no older than
	// go.mod's, each by digest or with the documented way to pin one.
	goImage := regexp.MustCompile(`^golang:(\d+)\.(\d+)\.\d+-\w+(@sha256:[0-9a-f]{64})?( AS \w+)?$`).FindStringSubmatch(froms[0])
	goMod := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)`).FindStringSubmatch(readDoc(t, "go.mod"))
	if goImage == nil || goMod == nil {
		t.Errorf("the build stage %q is not on an exact Go release (golang:1.N.P-VARIANT)", froms[0])
	} else if v, min := goImage[1]+"."+goImage[2], goMod[1]+"."+goMod[2]; goImage[1] != goMod[1] || atoi(goImage[2]) < atoi(goMod[2]) {
		t.Errorf("the build stage's Go %s is older than go.mod's %s", v, min)
	}
	for _, from := range froms {
		if !strings.Contains(from, "@sha256:") && !strings.Contains(src, "docker buildx imagetools inspect "+strings.Fields(from)[0]) {
			t.Errorf("FROM %s has no digest, and the Dockerfile does not say how to find its digest (docker buildx imagetools inspect %s)", from, strings.Fields(from)[0])
		}
	}

	// The health check runs floodgate health, in exec form (distroless has
	// no shell), on the config CMD serves.
	var hc []string
	_, exec, _ := strings.Cut(healthcheck, "CMD ")
	if err := json.Unmarshal([]byte(exec), &hc); err != nil || len(hc) < 2 {
		t.Fatalf("HEALTHCHECK %q does not run a command in exec form: %v", healthcheck, err)
	}
	if !slices.Contains(copiedTo, hc[0]) || hc[1] != "health" {
		t.Errorf("HEALTHCHECK runs %q, want the image's floodgate (one of %q) health", hc, copiedTo)
	}
	if i := slices.Index(hc, "--config"); i < 0 || i+1 >= len(hc) || !strings.Contains(cmd, `"`+hc[i+1]+`"`) {
		t.Errorf("HEALTHCHECK %q does not ask the config CMD %s serves", hc, cmd)
	}
	// Run as /bin/ratelimit, the image reads no config file: the check
	// falls back to the peer's variables.
	if slices.Contains(copiedTo, "/bin/ratelimit") && !slices.Contains(hc, "--or-envoy-env") {
		t.Errorf("HEALTHCHECK %q fails for the image run as /bin/ratelimit: want --or-envoy-env", hc)
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
