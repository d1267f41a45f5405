#!/usr/bin/env bash
# proxies.sh - the reverse proxies docs/PROXIES.md's recipes are tested
# against (internal/docstest): nginx and Caddy, Debian packages; and
# twemproxy (nutcracker), which redisstore's tests show floodgate refusing
# in words (envoyproxy/ratelimit's default REDIS_URL is its socket).
#
#   scripts/proxies.sh ensure   install nginx-light, caddy and nutcracker when missing
#
# The tests start their own nginx and Caddy processes on loopback ports,
# with configs in temporary folders; the packages' own services are never
# started (in a container, policy-rc.d usually forbids that anyway) nor
# used.
set -euo pipefail

log() { printf 'proxies: %s\n' "$*" >&2; }

ensure() {
	local missing=()
	command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || missing+=(nginx-light)
	command -v caddy >/dev/null || missing+=(caddy)
	command -v nutcracker >/dev/null || [[ -x /usr/sbin/nutcracker ]] || missing+=(nutcracker)
	((${#missing[@]} == 0)) && return 0
	log "installing ${missing[*]} (Debian packages)"
	local sudo=()
	[[ "$(id -u)" == 0 ]] || sudo=(sudo)
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

case "${1:-}" in
ensure) ensure ;;
*)
	echo "usage: $0 ensure" >&2
	exit 2
	;;
esac
