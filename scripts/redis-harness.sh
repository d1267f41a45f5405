#!/usr/bin/env bash
# redis-harness.sh - the Redis servers that floodgate's tests run against.
#
#   scripts/redis-harness.sh up      start everything (no-op when already up and healthy)
#   scripts/redis-harness.sh down    stop exactly what `up` started, remove the state dir
#   scripts/redis-harness.sh status  PING every node; exit 1 if any is down
#   scripts/redis-harness.sh env     print the `export` lines the tests read
#
# Everything binds 127.0.0.1 and keeps nothing on disk (--save "" --appendonly no):
#   standalone        16379
#   cluster           17000-17005 (3 primaries, 3 replicas; bus ports 27000-27005)
#   sentinel setup    primary 16380, replica 16381, sentinel 26380 (master name "floodgate", quorum 1)
# Each server has its own dir (pidfile, logfile, cluster/sentinel config) under
# ${FLOODGATE_HARNESS_DIR:-/tmp/floodgate-harness}. Port 6379 (a Debian service
# redis, if any) is never used. Requires Redis >= 7.
set -euo pipefail

STATE_DIR="${FLOODGATE_HARNESS_DIR:-/tmp/floodgate-harness}"
# Absolute and free of symlinks, as /proc/PID/cwd shows it (see is_ours).
STATE_DIR="$(realpath -m "$STATE_DIR")"
LOCK_FILE="${STATE_DIR}.lock"
HOST=127.0.0.1

STANDALONE_PORT=16379
CLUSTER_PORTS=(17000 17001 17002 17003 17004 17005)
SENTINEL_PRIMARY_PORT=16380
SENTINEL_REPLICA_PORT=16381
SENTINEL_PORT=26380
SENTINEL_MASTER=floodgate
READY_TIMEOUT="${FLOODGATE_HARNESS_TIMEOUT:-60}" # seconds, for each wait below

# name:port of every process, in start order (primaries before their replicas).
NODES=("standalone:${STANDALONE_PORT}")
for p in "${CLUSTER_PORTS[@]}"; do NODES+=("cluster-${p}:${p}"); done
NODES+=("sentinel-primary:${SENTINEL_PRIMARY_PORT}" "sentinel-replica:${SENTINEL_REPLICA_PORT}" "sentinel:${SENTINEL_PORT}")

log() { printf 'redis-harness: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

join() { local IFS="$1"; shift; echo "$*"; }

# cli PORT ARGS... - one redis-cli command, never hanging on a stuck server.
cli() { local port="$1"; shift; timeout 3 redis-cli -h "$HOST" -p "$port" "$@" 2>/dev/null; }

# pingable PORT - the server answers PING within 2s (bash's /dev/tcp: no
# process to start, so cheap enough to call for every node).
pingable() {
	local reply=""
	{
		exec 3<>"/dev/tcp/$HOST/$1" &&
			printf 'PING\r\n' >&3 &&
			read -r -t 2 reply <&3
	} 2>/dev/null || { exec 3>&- 2>/dev/null; return 1; }
	exec 3>&-
	[[ "$reply" == $'+PONG\r' ]]
}

# ---------------------------------------------------------------- install --

ensure_redis() {
	if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
		log "installing redis-server and redis-tools (Debian packages)"
		local sudo=()
		[[ "$(id -u)" == 0 ]] || sudo=(sudo)
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
	fi
	local version major
	version="$(redis-server --version)"
	major="$(sed -n 's/.* v=\([0-9][0-9]*\)\..*/\1/p' <<<"$version")"
	[[ -n "$major" ]] || die "cannot read the version from: $version"
	((major >= 7)) || die "Redis >= 7 is required, found: $version"
	if ! command -v flock >/dev/null || ! command -v timeout >/dev/null; then
		die "flock and timeout (util-linux, coreutils) are required"
	fi
}

# ---------------------------------------------------------------- processes --

# pid_of NAME - the live pid from NAME's pidfile, or nothing.
pid_of() {
	local f="$STATE_DIR/$1/redis.pid" pid
	[[ -s "$f" ]] || return 0
	pid="$(<"$f")"
	[[ "$pid" =~ ^[0-9]+$ ]] && is_ours "$pid" && echo "$pid"
	return 0
}

# is_ours PID - PID is a live redis process whose working dir is in our state
# dir (redis chdirs to --dir), so a recycled pid is never mistaken for ours.
is_ours() {
	local cwd
	cwd="$(readlink "/proc/$1/cwd" 2>/dev/null)" || return 1
	[[ "$cwd" == "$STATE_DIR/"* ]]
}

# orphans - pids of redis processes running in our state dir that no pidfile
# names any more (e.g. the state dir was removed under them).
orphans() {
	local p pid comm
	for p in /proc/[0-9]*; do
		pid="${p#/proc/}"
		{ read -r comm <"$p/comm"; } 2>/dev/null || continue
		[[ "$comm" == redis-server* || "$comm" == redis-sentinel* ]] || continue
		is_ours "$pid" && echo "$pid"
	done
	return 0
}

# alive PID - PID runs (a zombie waiting to be reaped does not count).
alive() {
	local stat
	stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
	stat="${stat##*) }"
	[[ "${stat:0:1}" != Z ]]
}

wait_gone() { # wait_gone PID SECONDS
	local i
	for ((i = 0; i < $2 * 20; i++)); do
		alive "$1" || return 0
		sleep 0.05
	done
	return 1
}

stop_pid() { # stop_pid PID [PORT]
	local pid="$1" port="${2:-}"
	if [[ -n "$port" ]]; then cli "$port" SHUTDOWN NOSAVE NOW >/dev/null || true; fi
	wait_gone "$pid" 5 && return 0
	kill -TERM "$pid" 2>/dev/null || true
	wait_gone "$pid" 5 && return 0
	kill -KILL "$pid" 2>/dev/null || true
	wait_gone "$pid" 5 || log "warning: pid $pid did not exit"
}

teardown() {
	local i entry name port pid stopped=0
	# Reverse start order: replicas go before their primaries, so no primary
	# waits for a replica to catch up.
	for ((i = ${#NODES[@]} - 1; i >= 0; i--)); do
		entry="${NODES[i]}" name="${entry%%:*}" port="${entry##*:}"
		pid="$(pid_of "$name")"
		[[ -n "$pid" ]] || continue
		stop_pid "$pid" "$port"
		stopped=$((stopped + 1))
	done
	for pid in $(orphans); do
		log "stopping orphaned redis pid $pid"
		stop_pid "$pid"
		stopped=$((stopped + 1))
	done
	rm -rf "$STATE_DIR"
	log "stopped $stopped process(es), removed $STATE_DIR"
}

# ---------------------------------------------------------------- start --

# start_server NAME PORT ARGS... - a daemonized redis-server in its own dir.
start_server() {
	local name="$1" port="$2"; shift 2
	local dir="$STATE_DIR/$name"
	mkdir -p "$dir"
	redis-server --port "$port" --bind "$HOST" --dir "$dir" \
		--daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
		--save "" --appendonly no --repl-diskless-sync-delay 0 --repl-diskless-load on-empty-db \
		"$@" >/dev/null 9>&- ||
		die "$name: redis-server failed to start (see $dir/redis.log)"
}

start_sentinel() {
	local dir="$STATE_DIR/sentinel"
	mkdir -p "$dir"
	# Sentinel rewrites its config file as it learns, so it lives in its dir.
	cat >"$dir/sentinel.conf" <<EOF
port $SENTINEL_PORT
bind $HOST
dir $dir
daemonize yes
pidfile $dir/redis.pid
logfile $dir/redis.log
sentinel monitor $SENTINEL_MASTER $HOST $SENTINEL_PRIMARY_PORT 1
sentinel down-after-milliseconds $SENTINEL_MASTER 30000
sentinel failover-timeout $SENTINEL_MASTER 60000
sentinel parallel-syncs $SENTINEL_MASTER 1
EOF
	redis-server "$dir/sentinel.conf" --sentinel >/dev/null 9>&- ||
		die "sentinel: failed to start (see $dir/redis.log)"
}

# wait_for DESCRIPTION COMMAND... - retry COMMAND until it succeeds or READY_TIMEOUT passes.
wait_for() {
	local what="$1"; shift
	local deadline=$((SECONDS + READY_TIMEOUT))
	until "$@"; do
		((SECONDS < deadline)) || die "timed out after ${READY_TIMEOUT}s waiting for $what (logs: $STATE_DIR/*/redis.log)"
		sleep 0.1
	done
}

all_pingable() {
	local entry
	for entry in "${NODES[@]}"; do pingable "${entry##*:}" || return 1; done
}

# has_line TEXT LINE - TEXT (CRLF or LF lines) has a line that is exactly LINE.
# Bash only: these checks run often, and forks are slow on a busy machine.
has_line() {
	local text=$'\n'"${1//$'\r'/}"$'\n'
	[[ "$text" == *$'\n'"$2"$'\n'* ]]
}

# cluster_ready - every node: state ok, 16384 slots, 6 known nodes, 3 masters
# and 3 slaves in CLUSTER NODES with no failure or handshake flags; every
# replica's link to its primary up.
cluster_ready() {
	local port info flags masters slaves
	for port in "${CLUSTER_PORTS[@]}"; do
		info="$(cli "$port" CLUSTER INFO)" || return 1
		has_line "$info" cluster_state:ok || return 1
		has_line "$info" cluster_slots_assigned:16384 || return 1
		has_line "$info" cluster_known_nodes:6 || return 1
		masters=0 slaves=0
		while read -r _ _ flags _; do
			case ",$flags," in *,fail,* | *,fail\?,* | *,handshake,* | *,noaddr,*) return 1 ;; esac
			case ",$flags," in *,master,*) masters=$((masters + 1)) ;; *,slave,*) slaves=$((slaves + 1)) ;; esac
		done < <(cli "$port" CLUSTER NODES)
		((masters == 3 && slaves == 3)) || return 1
		info="$(cli "$port" INFO replication)" || return 1
		if has_line "$info" role:slave; then
			has_line "$info" master_link_status:up || return 1
		fi
	done
}

sentinel_ready() {
	local info
	info="$(cli "$SENTINEL_PORT" SENTINEL get-master-addr-by-name "$SENTINEL_MASTER")" || return 1
	[[ "$info" == "$HOST"$'\n'"$SENTINEL_PRIMARY_PORT" ]] || return 1
	info="$(cli "$SENTINEL_REPLICA_PORT" INFO replication)" || return 1
	has_line "$info" master_link_status:up || return 1
	# The sentinel has found the replica too (tests may ask it for replicas).
	info="$(cli "$SENTINEL_PORT" SENTINEL replicas "$SENTINEL_MASTER")" || return 1
	has_line "$info" "$HOST:$SENTINEL_REPLICA_PORT"
}

# healthy - every process is ours, alive and answering, and both the
# cluster and the sentinel setup are fully formed.
healthy() {
	local entry
	[[ -d "$STATE_DIR" ]] || return 1
	for entry in "${NODES[@]}"; do
		[[ -n "$(pid_of "${entry%%:*}")" ]] || return 1
	done
	all_pingable && cluster_ready && sentinel_ready
}

port_free() {
	! (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

start_all() {
	local entry port nodes=()
	for entry in "${NODES[@]}"; do
		port="${entry##*:}"
		port_free "$port" || die "port $port is in use by a process this harness did not start ($STATE_DIR); stop it first"
	done
	for port in "${CLUSTER_PORTS[@]}"; do
		port_free $((port + 10000)) || die "cluster bus port $((port + 10000)) is in use; stop whatever holds it first"
	done
	mkdir -p "$STATE_DIR"

	log "starting standalone on $HOST:$STANDALONE_PORT"
	start_server standalone "$STANDALONE_PORT"

	log "starting cluster nodes on $HOST:${CLUSTER_PORTS[0]}-${CLUSTER_PORTS[-1]}"
	for port in "${CLUSTER_PORTS[@]}"; do
		start_server "cluster-$port" "$port" --cluster-enabled yes --cluster-node-timeout 2000 \
			--cluster-config-file "$STATE_DIR/cluster-$port/nodes.conf"
		nodes+=("$HOST:$port")
	done

	log "starting sentinel setup: primary $SENTINEL_PRIMARY_PORT, replica $SENTINEL_REPLICA_PORT, sentinel $SENTINEL_PORT"
	start_server sentinel-primary "$SENTINEL_PRIMARY_PORT"
	start_server sentinel-replica "$SENTINEL_REPLICA_PORT" --replicaof "$HOST" "$SENTINEL_PRIMARY_PORT"
	start_sentinel

	wait_for "every server to answer PING" all_pingable

	log "creating the cluster (3 primaries, 3 replicas)"
	local out
	out="$(timeout "$READY_TIMEOUT" redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes 2>&1)" ||
		die "redis-cli --cluster create failed: $out"
	log "waiting for the cluster to settle"
	wait_for "the cluster to be fully formed" cluster_ready
	log "cluster formed; waiting for the sentinel"
	wait_for "the sentinel to report master $SENTINEL_MASTER" sentinel_ready
}

# ---------------------------------------------------------------- commands --

# with_lock - serialize up and down between concurrent callers. The servers
# are started with fd 9 closed, so they never inherit the lock.
with_lock() {
	mkdir -p "$(dirname "$LOCK_FILE")"
	exec 9>"$LOCK_FILE"
	if ! flock -n 9; then
		log "waiting for another harness up/down to finish ($LOCK_FILE)"
		flock -w 300 9 || die "could not lock $LOCK_FILE within 300s"
	fi
}

cmd_up() {
	local start=$SECONDS
	ensure_redis
	with_lock
	if healthy; then
		log "already up and healthy ($STATE_DIR)"
		return 0
	fi
	if [[ -d "$STATE_DIR" ]] || [[ -n "$(orphans)" ]]; then
		log "found a stale or unhealthy harness in $STATE_DIR; recreating it"
		teardown
	fi
	start_all
	log "up in $((SECONDS - start))s; state in $STATE_DIR"
}

cmd_down() {
	with_lock
	teardown
}

cmd_status() {
	local entry name port pid state bad=0
	for entry in "${NODES[@]}"; do
		name="${entry%%:*}" port="${entry##*:}"
		pid="$(pid_of "$name")"
		if pingable "$port"; then state=up; else state=DOWN bad=1; fi
		printf '%-18s %s:%-5s %-4s pid=%s\n' "$name" "$HOST" "$port" "$state" "${pid:--}"
	done
	if ((bad == 0)); then
		if cluster_ready; then echo "cluster            formed (3 primaries, 3 replicas, 16384 slots)"; else echo "cluster            NOT fully formed"; bad=1; fi
		if sentinel_ready; then echo "sentinel           master $SENTINEL_MASTER at $HOST:$SENTINEL_PRIMARY_PORT, replica up"; else echo "sentinel           NOT ready"; bad=1; fi
	fi
	return "$bad"
}

cmd_env() {
	local cluster=() port
	for port in "${CLUSTER_PORTS[@]}"; do cluster+=("$HOST:$port"); done
	echo "export FLOODGATE_REDIS_ADDR=$HOST:$STANDALONE_PORT"
	echo "export FLOODGATE_REDIS_CLUSTER_ADDRS=$(join , "${cluster[@]}")"
	echo "export FLOODGATE_REDIS_SENTINEL_ADDRS=$HOST:$SENTINEL_PORT"
	echo "export FLOODGATE_REDIS_SENTINEL_MASTER=$SENTINEL_MASTER"
	echo "export FLOODGATE_REDIS_SENTINEL_DATA_ADDRS=$HOST:$SENTINEL_PRIMARY_PORT,$HOST:$SENTINEL_REPLICA_PORT"
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
env) cmd_env ;;
*)
	echo "usage: $0 up|down|status|env" >&2
	exit 2
	;;
esac
