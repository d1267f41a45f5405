# floodgate's developer and CI entry points. `make test` is what .ci/run runs.
#
#   make test       go vet, then the whole suite (-race) against the Redis harness
#                   and real nginx and Caddy (installed by scripts/proxies.sh), and
#                   compat/envoyratelimit: floodgate beside the real envoyproxy/ratelimit
#                   (built at its pinned version; its own spawned Redis servers)
#   make bench      floodgate against its peers (bench/cmd/peerbench): rewrites the
#                   "Peers" block of docs/PERFORMANCE.md and its charts in docs/img;
#                   then leased quota on one hot key (bench/cmd/leasebench), its block
#                   (a few minutes; PEERBENCHFLAGS=-long for steadier figures)
#   make bench-envoy floodgate's Envoy service against envoyproxy/ratelimit (compat/envoyratelimit)
#   make bench-gubernator floodgate's leased quota beside gubernator GLOBAL, three peers
#                   each (bench/gubernator, a module of its own): its block of
#                   docs/PERFORMANCE.md (about two minutes; not in make test nor CI)
#   make bench-go   every package's go test benchmarks, against the Redis harness
#   make redis-up   start the Redis harness (scripts/redis-harness.sh)
#   make redis-down stop it
#   make run        go run ./cmd/floodgate serve
#   make vet / fmt  go vet; list files gofmt would change (fails if any)
#
# test and bench start the harness, run with its addresses in the environment
# (FLOODGATE_REQUIRE_REDIS=1: a missing Redis fails instead of skipping), and
# stop it afterwards whatever the outcome, keeping the go test exit status.
# test also installs nginx and Caddy when missing and sets
# FLOODGATE_REQUIRE_PROXIES=1, so docs/PROXIES.md's recipes cannot be skipped.
# A harness that was already up and healthy before they started is left
# running: it belongs to whoever started it (`make redis-down` stops it).

export PATH := /usr/local/go/bin:$(PATH)
SHELL := /bin/bash

GO      ?= go
HARNESS := scripts/redis-harness.sh
TESTFLAGS  ?= -race -shuffle=on -count=1 -timeout 20m
BENCHFLAGS ?= -run '^$$' -bench . -benchmem
PEERBENCHFLAGS ?=
PKGS    ?= ./...
# A -race binary sleeps 1s at exit by default (atexit_sleep_ms) so that
# goroutines still running can report races: a second per test binary, ~45
# of them. A race during a test is reported and fails it either way.
GORACE  ?= atexit_sleep_ms=0
export GORACE

# with_harness runs $(1) with the harness up and its env exported, then takes
# the harness down (unless it was already up) and exits with $(1)'s status.
define with_harness
	@set -uo pipefail; \
	owned=1; \
	if $(HARNESS) status >/dev/null 2>&1; then owned=0; echo "redis harness already up: leaving it running afterwards" >&2; fi; \
	teardown() { if [ "$$owned" = 1 ]; then $(HARNESS) down || true; fi; }; \
	trap 'teardown; exit 130' INT TERM; \
	$(HARNESS) up || { rc=$$?; teardown; exit $$rc; }; \
	eval "$$($(HARNESS) env)"; \
	$(1); rc=$$?; \
	trap - INT TERM; \
	teardown; \
	exit $$rc
endef

.PHONY: all test bench bench-envoy bench-gubernator bench-go vet fmt run redis-up redis-down

all: test

# test runs the main module's suite in the foreground and, beside it, the
# routertest and compat/envoyratelimit modules (whose output follows the
# suite's): compat's side-by-side sets spend most of their time waiting for
# rate windows and statsd flushes, so they overlap each other (-parallel 6)
# and the suite. It fails if any of the three fails.
# go test starts packages in the order it is given them (-p at a time), and
# the suite ends when its slowest one does: with PKGS=./..., the slowest
# (the seconds of real hangs, or of CPU under -race) start first instead of
# last.
SLOW_PKGS   = ./redisstore ./memory ./remotestore ./cmd/floodgate ./internal/redistest
TEST_MAIN   = FLOODGATE_REQUIRE_REDIS=1 FLOODGATE_REQUIRE_PROXIES=1 $(GO) test $(TESTFLAGS) $(if $(filter ./...,$(PKGS)),$(SLOW_PKGS)) $(PKGS)
TEST_BESIDE = $(GO) -C httplimit/routertest test $(TESTFLAGS) ./... && \
	FLOODGATE_REQUIRE_REDIS=1 $(GO) -C compat/envoyratelimit test $(TESTFLAGS) -parallel 6 ./...
define test_all
	beside=$$(mktemp); \
	( $(TEST_BESIDE) ) >"$$beside" 2>&1 & pid=$$!; \
	$(TEST_MAIN); main=$$?; \
	wait $$pid; other=$$?; \
	echo "--- httplimit/routertest and compat/envoyratelimit (run beside the suite):"; \
	cat "$$beside"; rm -f "$$beside"; \
	[ $$main = 0 ] && [ $$other = 0 ]
endef

test: vet
	scripts/proxies.sh ensure
	$(call with_harness,$(test_all))

# bench runs in the bench module (peer libraries never enter floodgate's
# go.mod); -docs and -img are relative to it.
bench:
	$(call with_harness,FLOODGATE_REQUIRE_REDIS=1 $(GO) -C bench run ./cmd/peerbench -docs ../docs/PERFORMANCE.md -img ../docs/img $(PEERBENCHFLAGS) && $(GO) -C bench run ./cmd/leasebench -docs ../docs/PERFORMANCE.md)
	$(MAKE) bench-envoy

# bench-envoy: floodgate's Envoy service against envoyproxy/ratelimit (its own
# spawned Redis; docs/PERFORMANCE.md, "Envoy RLS against envoyproxy/ratelimit").
# Each round loads both services uncapped (sharing the 2 cores with the client
# and Redis) and capped at half a core each (a cgroup quota, needs root).
RLSBENCHFLAGS ?= -server-cpus 0,0.5
bench-envoy:
	$(GO) -C compat/envoyratelimit run ./cmd/rlsbench $(RLSBENCHFLAGS)

# bench-gubernator: floodgate's lease cell beside gubernator v2.13.0 (GLOBAL,
# three daemons in process) on the harness's Redis Cluster, in interleaved
# rounds; bench/gubernator is its own module so gubernator never enters
# floodgate's go.mod nor bench/go.mod (docs/PERFORMANCE.md, "Beside
# gubernator"). It fails if floodgate broke its stated bound.
GUBERBENCHFLAGS ?= -rounds 5 -duration 5s
bench-gubernator:
	$(call with_harness,$(GO) -C bench/gubernator run . -docs ../../docs/PERFORMANCE.md $(GUBERBENCHFLAGS))

bench-go:
	$(call with_harness,FLOODGATE_REQUIRE_REDIS=1 $(GO) test $(BENCHFLAGS) $(PKGS))

vet:
	$(GO) vet $(PKGS)
	$(GO) -C compat/envoyratelimit vet ./...

fmt:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

run:
	$(GO) run ./cmd/floodgate serve

redis-up:
	$(HARNESS) up

redis-down:
	$(HARNESS) down
