#!/usr/bin/env bash
# Local obsops stack without Docker: a project-local PostgreSQL and Redis under .local/ (git-ignored),
# every service and the gateway in the background, pids and logs under .local/.
#
#   stack.sh deps        install PostgreSQL (with q3c) and Redis with apt-get when missing
#   stack.sh infra-up    start the local PostgreSQL and Redis (skipped when OPS_DATABASE_URL / OPS_REDIS_URL are set)
#   stack.sh infra-down  stop them
#   stack.sh pg-dir      print where the local PostgreSQL keeps its files
#   stack.sh up          deps, infra, build, migrate, seed the demo catalogue, start every service, wait for /health, print URLs
#   stack.sh down        stop everything `up` started (by pid), then the local PostgreSQL and Redis
#   stack.sh logs        follow the services' logs
#   stack.sh test        run every module's tests against the local PostgreSQL (started if needed)
#   stack.sh bench       run every module's TestBench* benchmarks the same way (`make bench`)
#   stack.sh env         print the environment `up` gives the services (source it for admin commands)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=${OPS_LOCAL_STATE:-$ROOT/.local}
case $STATE in /*) ;; *) STATE=$PWD/$STATE ;; esac # absolute: PostgreSQL's tools run from /
PG_PORT=${OPS_LOCAL_PG_PORT:-55432}
REDIS_PORT=${OPS_LOCAL_REDIS_PORT:-56379}
SERVICES=(authtoken transfer catalog ingest site gateway)

log() { printf '\033[1m[stack]\033[0m %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

# as_pg runs a PostgreSQL tool as the postgres user when we are root (from /, which that user can
# always enter; the checkout may be private).
as_pg() {
	if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

deps() {
	local missing=()
	[ -n "$(pg_bin)" ] || missing+=(postgresql)
	command -v redis-server >/dev/null || missing+=(redis-server)
	command -v curl >/dev/null || missing+=(curl)
	if [ ${#missing[@]} -gt 0 ]; then
		[ "$(id -u)" = 0 ] || die "missing ${missing[*]}: install them (sudo apt-get install ${missing[*]})"
		log "installing ${missing[*]} with apt-get"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >/dev/null
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
	# The catalog's cone search needs the q3c extension for the PostgreSQL version in use.
	local pgv; pgv=$(basename "$(dirname "$(pg_bin)")")
	if [ ! -f "/usr/share/postgresql/$pgv/extension/q3c.control" ]; then
		[ "$(id -u)" = 0 ] || die "missing postgresql-$pgv-q3c: install it (sudo apt-get install postgresql-$pgv-q3c)"
		log "installing postgresql-$pgv-q3c with apt-get"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >/dev/null
		apt-get install -y -qq --no-install-recommends "postgresql-$pgv-q3c" >/dev/null
	fi
	# Debian's packages start system-wide daemons on install; ours run under .local and do not need them.
}

# pg_dir is where the local PostgreSQL keeps its files: .local/pg, unless the stack runs as root and
# the postgres user cannot reach the checkout (a private directory, e.g. one made by mktemp -d);
# then a directory of its own under /var/tmp, named after the checkout's path.
pg_dir() {
	mkdir -p "$STATE"
	if [ "$(id -u)" != 0 ] || ! id postgres >/dev/null 2>&1 || runuser -u postgres -- test -x "$STATE" 2>/dev/null; then
		echo "$STATE/pg"
	else
		echo "/var/tmp/obsops-pg-$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1)"
	fi
}
# (pg_dir is asked each time: before deps installs PostgreSQL there is no postgres user to ask about.)
pg_running() { local d; d=$(pg_dir); [ -f "$d/data/postmaster.pid" ] && as_pg "$(pg_bin)/pg_ctl" -D "$d/data" status >/dev/null 2>&1; }
redis_running() { [ -f "$STATE/redis/redis.pid" ] && kill -0 "$(cat "$STATE/redis/redis.pid")" 2>/dev/null; }

local_database_url() { echo "postgres://postgres@127.0.0.1:$PG_PORT/obsops?sslmode=disable"; }
local_redis_url() { echo "redis://127.0.0.1:$REDIS_PORT/0"; }

pg_up() {
	local bin dir; bin=$(pg_bin); dir=$(pg_dir)
	mkdir -p "$dir/run" "$dir/data"
	if [ "$(id -u)" = 0 ]; then chown -R postgres:postgres "$dir"; fi
	if [ ! -f "$dir/data/PG_VERSION" ]; then
		log "initialising PostgreSQL in $dir/data"
		as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >/dev/null
	fi
	if ! pg_running; then
		log "starting PostgreSQL on 127.0.0.1:$PG_PORT"
		as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
			-o "-p $PG_PORT -k $dir/run -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=on" start >/dev/null
	fi
	"$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='obsops'" | grep -q 1 ||
		"$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -qc "CREATE DATABASE obsops" >/dev/null
}

redis_up() {
	mkdir -p "$STATE/redis"
	if ! redis_running; then
		log "starting Redis on 127.0.0.1:$REDIS_PORT (AOF everysec, noeviction)"
		redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --daemonize yes \
			--pidfile "$STATE/redis/redis.pid" --dir "$STATE/redis" --logfile "$STATE/redis/redis.log" \
			--appendonly yes --appendfsync everysec --maxmemory-policy noeviction --save ""
		for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
	fi
}

infra_up() {
	if [ -z "${OPS_DATABASE_URL:-}" ]; then pg_up; fi
	if [ -z "${OPS_REDIS_URL:-}" ]; then redis_up; fi
}

infra_down() {
	if pg_running; then log "stopping PostgreSQL"; as_pg "$(pg_bin)/pg_ctl" -D "$(pg_dir)/data" -m fast -w stop >/dev/null; fi
	if redis_running; then
		log "stopping Redis"
		local pid; pid=$(cat "$STATE/redis/redis.pid")
		kill "$pid"
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	fi
}

# internal_secret prints the path of the local stack's internal secret (OPS_INTERNAL_SECRET),
# generating 32 random bytes (hex) the first time.
internal_secret() {
	local f="$STATE/keys/internal-secret"
	if [ ! -s "$f" ]; then
		mkdir -p "$STATE/keys"
		(umask 077; head -c 32 /dev/urandom | od -An -v -tx1 | tr -d ' \n' >"$f")
	fi
	printf '%s' "$f"
}

# write_env writes the environment every service of `up` runs with (and admins source), each
# value quoted for the shell (a database URL may hold '&', the checkout path a space).
write_env() {
	kv() { printf '%s=%q\n' "$1" "$2"; }
	mkdir -p "$STATE"
	{
		kv OPS_DATABASE_URL "${OPS_DATABASE_URL:-$(local_database_url)}"
		kv OPS_REDIS_URL "${OPS_REDIS_URL:-$(local_redis_url)}"
		kv OPS_LOG_LEVEL "${OPS_LOG_LEVEL:-info}"
		kv OPS_SHUTDOWN_DRAIN "${OPS_SHUTDOWN_DRAIN:-1s}"
		kv OPS_GATEWAY_ADDR "127.0.0.1:8080"
		kv OPS_GATEWAY_METRICS_ADDR "127.0.0.1:9080"
		kv OPS_AUTHTOKEN_ADDR "127.0.0.1:8081"
		kv OPS_TRANSFER_ADDR "127.0.0.1:8082"
		kv OPS_CATALOG_ADDR "127.0.0.1:8083"
		kv OPS_INGEST_ADDR "127.0.0.1:8084"
		kv OPS_SITE_ADDR "127.0.0.1:8085"
		kv OPS_JWT_SIGNING_KEY_FILE "$STATE/keys/jwt-signing.pem"
		# The gateway proves with it that the client address it forwards is genuine (README:
		# "Client addresses and the internal secret"); generated once, kept with the keys.
		if [ -n "${OPS_INTERNAL_SECRET:-}" ]; then kv OPS_INTERNAL_SECRET "$OPS_INTERNAL_SECRET"
		else kv OPS_INTERNAL_SECRET_FILE "${OPS_INTERNAL_SECRET_FILE:-$(internal_secret)}"; fi
		# Login through the local development identity provider (bin/devidp, deploy/devidp/README.md).
		kv OPS_OIDC_ISSUER "http://127.0.0.1:9998"
		kv OPS_OIDC_CLIENT_ID "obsops-dev"
		kv OPS_OIDC_CLIENT_SECRET "obsops-dev-secret"
		kv OPS_OIDC_REDIRECT_URL "http://127.0.0.1:8080/idp/callback"
		kv OPS_BOOTSTRAP_ADMINS "alice"
		if [ -f "$STATE/extra.env" ]; then cat "$STATE/extra.env"; fi
	} >"$STATE/env"
}

# service_running NAME: the process in .local/pids/NAME.pid is alive and still runs bin/NAME (after
# a crash the pid may belong to another program by now; a rebuilt binary shows as "(deleted)").
service_running() {
	local pidfile="$STATE/pids/$1.pid" pid exe
	[ -f "$pidfile" ] || return 1
	pid=$(cat "$pidfile")
	kill -0 "$pid" 2>/dev/null || return 1
	exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 0 # no /proc: trust the pid
	[ "${exe% (deleted)}" = "$ROOT/bin/$1" ]
}

# start_service NAME ARGS... starts bin/NAME unless it runs: `make up` restarts what died and
# leaves what runs alone (operators and the fault tests rely on it).
start_service() {
	local name=$1; shift
	local pidfile="$STATE/pids/$name.pid"
	if service_running "$name"; then
		log "$name already running (pid $(cat "$pidfile"))"
		return
	fi
	(
		set -a; . "$STATE/env"; set +a
		exec "$ROOT/bin/$name" "$@" >>"$STATE/logs/$name.log" 2>&1
	) &
	echo $! >"$pidfile"
}

wait_healthy() {
	local url=$1 body=""
	for _ in $(seq 120); do
		body=$(curl -fsS --max-time 2 "$url" 2>/dev/null || true)
		case "$body" in *'"status":"ok"'*) return 0 ;; esac
		sleep 0.5
	done
	log "not healthy after 60 s: $body"
	log "see the logs: make logs (or $STATE/logs/)"
	return 1
}

up() {
	deps
	infra_up
	write_env
	log "building"
	make -C "$ROOT" -s build
	mkdir -p "$STATE/pids" "$STATE/logs" "$STATE/keys"
	if [ ! -f "$STATE/keys/jwt-signing.pem" ]; then
		log "generating a development JWT signing key in $STATE/keys"
		"$ROOT/bin/authtoken" admin generate-signing-key --out "$STATE/keys/jwt-signing.pem"
	fi
	(set -a; . "$STATE/env"; set +a; "$ROOT/bin/migrate" up 2>>"$STATE/logs/migrate.log")
	# a usable catalogue for a new user (idempotent: names already there are left alone)
	(set -a; . "$STATE/env"; set +a; "$ROOT/bin/catalog" admin seed-demo 2>>"$STATE/logs/catalog-seed.log") >&2
	start_service devidp # the development identity provider (loopback only; dev users: deploy/devidp/README.md)
	for s in "${SERVICES[@]}"; do
		case $s in
		ingest) start_service ingest -role all ;;
		*) start_service "$s" ;;
		esac
	done
	if ! wait_healthy http://127.0.0.1:8080/health; then
		curl -s http://127.0.0.1:8080/health || true
		exit 1
	fi
	cat <<-MSG

	obsops is up.
	  Gateway        http://127.0.0.1:8080
	  API docs       http://127.0.0.1:8080/docs
	  Health         http://127.0.0.1:8080/health
	  Log in         http://127.0.0.1:8080/idp/login   (dev users: alice / wonderland = admin, bob / builder)
	  Site info      http://127.0.0.1:8080/api/site/info
	  Metrics        http://127.0.0.1:9080/metrics (gateway); each service's own port /metrics
	  Logs           make logs   ($STATE/logs/)
	  Environment    set -a; . $STATE/env; set +a   (for bin/* admin commands)
	  Stop           make down
	MSG
}

down() {
	local pids=()
	for f in "$STATE"/pids/*.pid; do
		[ -f "$f" ] || continue
		local pid; pid=$(cat "$f")
		if kill -0 "$pid" 2>/dev/null; then
			log "stopping $(basename "$f" .pid) (pid $pid)"
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("$pid")
		fi
		rm -f "$f"
	done
	for pid in "${pids[@]}"; do
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
	done
	infra_down
}

# TEST_STARTED_PG is 1 when test_database started the local PostgreSQL and must stop it on exit.
TEST_STARTED_PG=0

stop_test_pg() {
	if [ "$TEST_STARTED_PG" = 1 ]; then
		as_pg "$(pg_bin)/pg_ctl" -D "$(pg_dir)/data" -m fast -w stop >/dev/null || true
	fi
}

# test_database points OPS_TEST_DATABASE_URL at a PostgreSQL for the tests: the caller's, else the
# local one, started if needed and then stopped again on exit. Tests run their own Redis servers.
test_database() {
	deps
	if [ -z "${OPS_TEST_DATABASE_URL:-}" ]; then
		pg_running || TEST_STARTED_PG=1
		pg_up
		export OPS_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres?sslmode=disable"
	fi
	trap stop_test_pg EXIT
	make -C "$ROOT" -s build
	export OPS_BIN_DIR="$ROOT/bin"
	cd "$ROOT"
}

run_tests() {
	test_database
	# shellcheck disable=SC2046
	go test -count=1 -timeout 20m ${GOTESTFLAGS:-} $(go list -m -f '{{.Dir}}/...')
}

# run_bench runs the TestBench* tests of every module (they skip unless OPS_BENCH=1) against the
# real binaries; each prints its own baseline measured in the same run and the ratio.
# Knobs: OPS_BENCH_SECONDS (per measured cell, default 5), OPS_BENCH_CONNECTIONS (the gateway's
# sweep of connection counts, default 16,32,64,128,256), OPS_BENCH_CONCURRENCY (authtoken's
# callers, default 32), OPS_BENCH_LOG_LEVEL (default info), OPS_BENCH_RUN (test name regexp,
# default ^TestBench).
run_bench() {
	test_database
	export OPS_BENCH=1
	local run=${OPS_BENCH_RUN:-^TestBench} status=0 found=0 dir pkgs
	for dir in $(go list -m -f '{{.Dir}}'); do
		# packages of this module that declare a benchmark test
		pkgs=$(grep -rl --include='*_test.go' -E '^func TestBench[A-Za-z0-9_]*\(t \*testing\.T\)' "$dir" 2>/dev/null |
			xargs -r -n1 dirname | sort -u | sed "s|^$dir|.|" || true)
		[ -n "$pkgs" ] || continue
		found=1
		log "$(basename "$dir"): $(echo "$pkgs" | tr '\n' ' ')"
		# shellcheck disable=SC2086
		(cd "$dir" && go test -run "$run" -v -count=1 -timeout 20m $pkgs) || status=1
	done
	if [ "$found" = 0 ]; then log "no TestBench* tests found"; fi
	return $status
}

# run_chaos runs the long fault tests (TestChaos*, skipped unless OPS_CHAOS=1): PostgreSQL stopped
# for 60 s (a private cluster of the test's own), the worker↔PostgreSQL link dropping all traffic
# for 2 minutes (toxiproxy), Redis out of memory, and the two-site scenario (TestChaosSites, ~22
# minutes: 10-minute WAN outage, kills during replay, flapping, slow WAN, lagging replica).
# OPS_CHAOS_SECONDS shortens the first three, OPS_SITES_* the two-site phases (see README).
run_chaos() {
	test_database
	export OPS_CHAOS=1
	(cd services/ingest && go test -run "${OPS_CHAOS_RUN:-^TestChaos}" -v -count=1 -timeout 60m .)
}

case "${1:-}" in
deps) deps ;;
infra-up) deps; infra_up ;;
infra-down) infra_down ;;
pg-dir) pg_dir ;;
up) up ;;
down) down ;;
logs) mkdir -p "$STATE/logs"; tail -n 50 -F "$STATE"/logs/*.log ;;
test) run_tests ;;
bench) run_bench ;;
chaos) run_chaos ;;
env) write_env; cat "$STATE/env" ;;
*) die "usage: $0 deps|infra-up|infra-down|pg-dir|up|down|logs|test|bench|chaos|env" ;;
esac
