#!/usr/bin/env bash
# Local obsops stack without Docker: a project-local PostgreSQL and Redis under .local/ (git-ignored),
# every service and the gateway in the background, pids and logs under .local/.
#
#   stack.sh deps        install what the suite needs to run (PostgreSQL with q3c, Redis, curl, python3) with apt-get, when missing
#   stack.sh test-deps   deps, and what only the tests use: promtool (Debian package prometheus), chromium and xxhsum
#   stack.sh screenshots the web console's screenshots in docs/ from its browser test (make screenshots)
#   stack.sh infra-up    start the local PostgreSQL and Redis (skipped when OPS_DATABASE_URL / OPS_REDIS_URL are set)
#   stack.sh infra-down  stop them
#   stack.sh pg-dir      print where the local PostgreSQL keeps its files
#   stack.sh up          deps, infra, build, migrate, seed the demo catalogue, start every service, wait for /health, print URLs
#   stack.sh down        stop everything `up` / `up-sites` started (by pid), both sites, then the local
#                        PostgreSQL clusters (primary, replica) and Redis servers
#   stack.sh logs        follow the services' logs
#   stack.sh test        test-deps, then every module's tests against the local PostgreSQL (started if needed),
#                        reported by deploy/testreport: failures and skips listed, counts on the last line
#                        (OPS_REQUIRED_TESTS: a file of tests that must not be skipped, as .ci/run sets)
#   stack.sh bench       run every module's TestBench* benchmarks the same way (`make bench`)
#   stack.sh env         print the environment `up` gives the services (source it for admin commands)
#   stack.sh secondary-env  print the environment `up-sites` gives the secondary's services (keys not generated)
#   stack.sh up-sites    `up` (the main site), then the WAN and a secondary site: a streaming replica of the
#                        main PostgreSQL cloned through the WAN, its own Redis, and the observatory's services
#   stack.sh wan-down    cut the WAN (open connections dropped, new ones refused)
#   stack.sh wan-up      restore it and clear its toxics
#   stack.sh wan-slow    add latency and loss to it (OPS_WAN_LATENCY_MS, OPS_WAN_JITTER_MS, OPS_WAN_LOSS)
#
# Ports and places (docs/two-sites.md, "Running it"), each overridable so a test can run a whole stack of its own:
#   OPS_LOCAL_STATE                 state folder (.local)
#   OPS_LOCAL_PG_PORT               main PostgreSQL (55432)        OPS_LOCAL_REDIS_PORT            main Redis (56379)
#   OPS_LOCAL_HTTP_BASE             main gateway (8080); services BASE+1…+5, gateway metrics BASE+1000
#   OPS_LOCAL_DEVIDP_PORT           local identity provider (9998)
#   OPS_LOCAL_SECONDARY_HTTP_BASE   secondary gateway (BASE+100 = 8180); services +1…+5, metrics +1000
#   OPS_LOCAL_REPLICA_PORT          secondary's replica (PG_PORT+1)  OPS_LOCAL_SECONDARY_REDIS_PORT  its Redis (REDIS_PORT+1)
#   OPS_LOCAL_WAN_PORT              the WAN's near end (PG_PORT+10)  OPS_LOCAL_WAN_API_PORT          its API (58474)
#   OPS_LOCAL_NO_BUILD=1            use the binaries in bin/ as they are (the tests build them first)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=${OPS_LOCAL_STATE:-$ROOT/.local}
case $STATE in /*) ;; *) STATE=$PWD/$STATE ;; esac # absolute: PostgreSQL's tools run from /
PG_PORT=${OPS_LOCAL_PG_PORT:-55432}
REDIS_PORT=${OPS_LOCAL_REDIS_PORT:-56379}
HTTP_BASE=${OPS_LOCAL_HTTP_BASE:-8080}
DEVIDP_PORT=${OPS_LOCAL_DEVIDP_PORT:-9998}
SEC_HTTP_BASE=${OPS_LOCAL_SECONDARY_HTTP_BASE:-$((HTTP_BASE + 100))}
REPLICA_PORT=${OPS_LOCAL_REPLICA_PORT:-$((PG_PORT + 1))}
SEC_REDIS_PORT=${OPS_LOCAL_SECONDARY_REDIS_PORT:-$((REDIS_PORT + 1))}
WAN_PORT=${OPS_LOCAL_WAN_PORT:-$((PG_PORT + 10))}
WAN_API_PORT=${OPS_LOCAL_WAN_API_PORT:-58474}
# The WAN's other direction: the main site's site service polls the observatory's /buffer-stats here.
WAN_OBSERVATORY_PORT=${OPS_LOCAL_WAN_OBSERVATORY_PORT:-$((WAN_PORT + 1))}
SERVICES=(authtoken transfer catalog ingest site gateway)
# The services an observatory (the secondary site) runs: all but transfer, which only the data centre
# runs (write_secondary_env points the secondary's OPS_TRANSFER_URL at nothing).
SECONDARY_SERVICES=(authtoken catalog ingest site gateway)
SEC=$STATE/secondary          # the secondary site's env, pids, logs and Redis
# Whether the caller brought their own PostgreSQL or Redis (then the services connect as the URLs
# say; with ours, each service connects as its own PostgreSQL role and Redis user).
CALLER_DATABASE_URL=${OPS_DATABASE_URL:-}
CALLER_REDIS_URL=${OPS_REDIS_URL:-}
SLOT=obsops_secondary         # the replica's replication slot on the main primary

log() { printf '\033[1m[stack]\033[0m %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

# as_pg runs a PostgreSQL tool as the postgres user when we are root (from /, which that user can
# always enter; the checkout may be private).
as_pg() {
	if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

# Packages come from apt-get, each installed only when missing, so a machine that has them all
# needs no network. NEED holds the missing packages of one step, WHY what each is for (logged).
NEED=()
WHY=()
APT_UPDATED=0 # apt-get update runs at most once per run, and only when something is missing

# quietly COMMAND... runs COMMAND with its output kept aside, shown only if it fails.
quietly() {
	local out
	out=$(mktemp)
	if ! "$@" >"$out" 2>&1; then
		cat "$out" >&2
		rm -f "$out"
		die "$* failed"
	fi
	rm -f "$out"
}

# need PACKAGE WHY queues PACKAGE for install_needed.
need() { NEED+=("$1"); WHY+=("$2"); }

# install_needed installs the queued packages (as root; otherwise it says what to install),
# logging each with what it is for.
install_needed() {
	[ ${#NEED[@]} -gt 0 ] || return 0
	local i
	for i in "${!NEED[@]}"; do log "missing ${NEED[$i]}: ${WHY[$i]}"; done
	[ "$(id -u)" = 0 ] || die "install them: sudo apt-get install ${NEED[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# Lists refreshed within the hour (by an earlier step: make up, then make test) are kept.
	if [ "$APT_UPDATED" = 0 ] && ! find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -60 2>/dev/null | grep -q .; then
		log "apt-get update (package lists, for the missing packages)"
		quietly apt-get update
	fi
	APT_UPDATED=1
	log "installing ${NEED[*]} with apt-get"
	quietly apt-get install -y --no-install-recommends "${NEED[@]}"
	NEED=()
	WHY=()
}

# deps installs what the suite needs to run (make up, and every target that starts it). Debian's
# packages may start system-wide daemons on install; ours run under .local on ports of their own.
deps() {
	[ -n "$(pg_bin)" ] || need postgresql "the services' database"
	command -v redis-server >/dev/null || need redis-server "the ingest buffer, rate limits and caches"
	command -v curl >/dev/null || need curl "waiting for the services' /health (and the WAN's API, make up-sites)"
	command -v python3 >/dev/null || need python3 "the demo weather series' generator (deploy/local/demo/weather.py, make up)"
	install_needed
	# The q3c package is per PostgreSQL version: known once PostgreSQL is there.
	local pgv; pgv=$(basename "$(dirname "$(pg_bin)")")
	[ -f "/usr/share/postgresql/$pgv/extension/q3c.control" ] || need "postgresql-$pgv-q3c" "the catalog's cone search (PostgreSQL extension q3c)"
	install_needed
}

# test_deps installs, beyond deps, the tools only tests use (make test).
test_deps() {
	deps
	command -v promtool >/dev/null ||
		need prometheus "its promtool checks and unit-tests deploy/prometheus/alerts.yml (services/site TestAlertRules)"
	command -v chromium >/dev/null ||
		need chromium "the headless-browser checks: /docs renders without internet (services/gateway TestGatewayEndToEnd), the web console (TestConsoleInBrowser)"
	command -v xmllint >/dev/null ||
		need libxml2-utils "xmllint validates the catalog's VOTable answers against the IVOA schema (services/catalog TestTablesInAndOut)"
	command -v xxhsum >/dev/null ||
		need xxhash "xxhsum, the baseline of the register checksummer's rate (cli TestBenchCLIRegister, make bench)"
	[ -f /usr/lib/python3/dist-packages/astropy/io/votable/data/VOTable.v1.4.xsd ] ||
		need python3-astropy "the VOTable 1.4 schema and astropy.io.votable reading the catalog's VOTables (services/catalog TestTablesInAndOut)"
	install_needed
}

# pg_dir is where the local PostgreSQL keeps its files: .local/pg, unless the stack runs as root and
# the postgres user cannot reach the checkout (a private directory, e.g. one made by mktemp -d);
# then a directory of its own under /var/tmp, named after the checkout's path (or after the state
# folder, when OPS_LOCAL_STATE names another one: each state folder has its own clusters).
# The main primary's files are in PG_DIR/data, the secondary's replica in PG_DIR/replica.
pg_dir() {
	mkdir -p "$STATE"
	if [ "$(id -u)" != 0 ] || ! id postgres >/dev/null 2>&1 || runuser -u postgres -- test -x "$STATE" 2>/dev/null; then
		echo "$STATE/pg"
	else
		local key=$ROOT
		if [ "$STATE" != "$ROOT/.local" ]; then key=$STATE; fi
		echo "/var/tmp/obsops-pg-$(printf '%s' "$key" | cksum | cut -d' ' -f1)"
	fi
}
# (pg_dir is asked each time: before deps installs PostgreSQL there is no postgres user to ask about.)
pg_running() { local d; d=$(pg_dir); [ -f "$d/data/postmaster.pid" ] && as_pg "$(pg_bin)/pg_ctl" -D "$d/data" status >/dev/null 2>&1; }
# redis_running [DIR]: the Redis whose pid file is in DIR/redis (default: the main site's).
redis_running() { local d=${1:-$STATE}; [ -f "$d/redis/redis.pid" ] && kill -0 "$(cat "$d/redis/redis.pid")" 2>/dev/null; }

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

# redis_up [DIR PORT]: a Redis with its files in DIR/redis (default: the main site's).
redis_up() {
	local d=${1:-$STATE} port=${2:-$REDIS_PORT}
	mkdir -p "$d/redis"
	if ! redis_running "$d"; then
		log "starting Redis on 127.0.0.1:$port (AOF fsync always, noeviction)"
		redis-server --port "$port" --bind 127.0.0.1 --daemonize yes \
			--pidfile "$d/redis/redis.pid" --dir "$d/redis" --logfile "$d/redis/redis.log" \
			--appendonly yes --appendfsync always --auto-aof-rewrite-percentage 400 --auto-aof-rewrite-min-size 512mb \
			--maxmemory-policy noeviction --save ""
		for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
	fi
}

# redis_down [DIR]
redis_down() {
	local d=${1:-$STATE}
	if redis_running "$d"; then
		log "stopping Redis ($d/redis)"
		local pid; pid=$(cat "$d/redis/redis.pid")
		kill "$pid"
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	fi
}

infra_up() {
	if [ -z "${OPS_DATABASE_URL:-}" ]; then pg_up; fi
	if [ -z "${OPS_REDIS_URL:-}" ]; then redis_up; redis_users "$REDIS_PORT"; fi
}

# redis_password NAME prints the path of the local stack's password of the Redis user NAME
# (pkg/redisacl/users.acl), generating 24 random bytes (hex) the first time. Both sites use them.
redis_password() {
	local f="$STATE/keys/redis-$1"
	if [ ! -s "$f" ]; then
		mkdir -p "$STATE/keys"
		(umask 077; head -c 24 /dev/urandom | od -An -v -tx1 | tr -d ' \n' >"$f")
	fi
	printf '%s' "$f"
}

# redis_users PORT gives the Redis on PORT the services' ACL users (pkg/redisacl/users.acl), each
# with its password (redis_password): ACL SETUSER NAME reset RULES >PASSWORD, again at every start,
# since Redis keeps them in memory only. Its default user keeps every permission (admin commands,
# redis-cli). Redis joins a selector's words, "(" ... ")", back into one rule.
redis_users() {
	local port=$1 kw name rules pw
	while read -r kw name rules; do
		[ "$kw" = user ] || continue
		pw=$(cat "$(redis_password "$name")")
		# shellcheck disable=SC2086 # the rules are words; no globbing (set -f): they hold * and {}
		(set -f; redis-cli -p "$port" ACL SETUSER "$name" reset $rules ">$pw" >/dev/null) ||
			die "Redis on $port: ACL SETUSER $name failed"
	done <"$ROOT/pkg/redisacl/users.acl"
}

# service_credentials NAME exports the PostgreSQL role and Redis user the service NAME connects
# as (docs/operations.md, "Database roles", "Redis users"; at a secondary, ingest's role at the main is
# obsops_replay), unless the caller brought their own
# PostgreSQL or Redis. The local clusters trust loopback connections: roles need no password.
service_credentials() {
	case " ${SERVICES[*]} " in *" $1 "*) ;; *) return 0 ;; esac
	if [ -z "$CALLER_DATABASE_URL" ] && [ "$1" != gateway ]; then export OPS_DATABASE_USER="obsops_$1"; fi
	# A secondary's ingest reaches the main's database as the replay role only (docs/decisions.md §45).
	if [ -z "$CALLER_DATABASE_URL" ] && [ "$1" = ingest ] && [ "${OPS_SITE_TYPE:-}" = secondary ]; then
		export OPS_MAIN_DATABASE_USER=obsops_replay
	fi
	# A secondary's authtoken, catalog and site make no change at the main: no way there (§45).
	case "$1:${OPS_SITE_TYPE:-}" in authtoken:secondary | catalog:secondary | site:secondary) unset OPS_MAIN_DATABASE_URL ;; esac
	if [ -z "$CALLER_REDIS_URL" ]; then
		export OPS_REDIS_USERNAME="$1" OPS_REDIS_PASSWORD_FILE
		OPS_REDIS_PASSWORD_FILE=$(redis_password "$1")
	fi
}

infra_down() {
	if pg_running; then log "stopping PostgreSQL"; as_pg "$(pg_bin)/pg_ctl" -D "$(pg_dir)/data" -m fast -w stop >/dev/null; fi
	redis_down "$STATE"
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

# kv prints NAME=VALUE quoted for the shell (a database URL may hold '&', the checkout path a space).
kv() { printf '%s=%q\n' "$1" "$2"; }

# dev_token ACCOUNT SCOPES FLAGS... writes a 365-day token of service account ACCOUNT (created with
# the kind and bindings FLAGS) to $STATE/tokens/ACCOUNT.token unless that file exists.
dev_token() {
	local account=$1 scopes=$2
	shift 2
	[ -s "$STATE/tokens/$account.token" ] && return 0
	mkdir -p "$STATE/tokens"
	(set -a; . "$STATE/env"; set +a; umask 077
		"$ROOT/bin/authtoken" admin create-service-token --account "$account" --scopes "$scopes" --name dev --days 365 "$@" \
			>"$STATE/tokens/$account.token" 2>>"$STATE/logs/dev-tokens.log") ||
		{ rm -f "$STATE/tokens/$account.token"; echo "dev token $account not made: see $STATE/logs/dev-tokens.log" >&2; }
}

# site_ports BASE prints the listen addresses and service URLs of one site whose gateway is on
# port BASE: the services on BASE+1…+5 (authtoken, transfer, catalog, ingest, site), the
# gateway's metrics on BASE+1000. Services find each other through the URLs, so a site on other
# ports is whole.
site_ports() {
	local b=$1 i=1 name
	kv OPS_GATEWAY_ADDR "127.0.0.1:$b"
	kv OPS_GATEWAY_METRICS_ADDR "127.0.0.1:$((b + 1000))"
	for name in AUTHTOKEN TRANSFER CATALOG INGEST SITE; do
		kv "OPS_${name}_ADDR" "127.0.0.1:$((b + i))"
		kv "OPS_${name}_URL" "http://127.0.0.1:$((b + i))"
		i=$((i + 1))
	done
}

# write_env writes the environment every service of `up` runs with (and admins source), each
# value quoted for the shell.
write_env() {
	mkdir -p "$STATE"
	{
		kv OPS_DATABASE_URL "${OPS_DATABASE_URL:-$(local_database_url)}"
		kv OPS_REDIS_URL "${OPS_REDIS_URL:-$(local_redis_url)}"
		kv OPS_LOG_LEVEL "${OPS_LOG_LEVEL:-info}"
		kv OPS_SHUTDOWN_DRAIN "${OPS_SHUTDOWN_DRAIN:-1s}"
		site_ports "$HTTP_BASE"
		kv OPS_JWT_SIGNING_KEY_FILE "$STATE/keys/jwt-signing.pem"
		# The gateway proves with it that the client address it forwards is genuine (docs/architecture.md:
		# "Failed credentials and client addresses"); generated once, kept with the keys.
		if [ -n "${OPS_INTERNAL_SECRET:-}" ]; then kv OPS_INTERNAL_SECRET "$OPS_INTERNAL_SECRET"
		else kv OPS_INTERNAL_SECRET_FILE "${OPS_INTERNAL_SECRET_FILE:-$(internal_secret)}"; fi
		# Login through the local development identity provider (bin/devidp, deploy/devidp/README.md);
		# it accepts the callbacks of both sites' gateways.
		kv OPS_DEVIDP_ADDR "127.0.0.1:$DEVIDP_PORT"
		kv OPS_DEVIDP_REDIRECT_URIS "http://127.0.0.1:$HTTP_BASE/idp/callback,http://127.0.0.1:$SEC_HTTP_BASE/idp/callback"
		kv OPS_OIDC_ISSUER "http://127.0.0.1:$DEVIDP_PORT"
		kv OPS_OIDC_CLIENT_ID "obsops-dev"
		kv OPS_OIDC_CLIENT_SECRET "obsops-dev-secret"
		kv OPS_OIDC_REDIRECT_URL "http://127.0.0.1:$HTTP_BASE/idp/callback"
		kv OPS_BOOTSTRAP_ADMINS "alice"
		# A login from the web console comes back to it, the JWT in the URL fragment (docs/console.md).
		kv OPS_UI_REDIRECT_URL "http://127.0.0.1:$HTTP_BASE/console/"
		# With an observatory (make up-sites), the main's site page shows its /buffer-stats, polled
		# through the WAN so that `make wan-down` makes it unreachable.
		if [ "${WITH_OBSERVATORY:-}" = 1 ]; then
			kv OPS_OBSERVATORY_STATUS_URL "http://127.0.0.1:$WAN_OBSERVATORY_PORT/buffer-stats"
		fi
		if [ -f "$STATE/extra.env" ]; then cat "$STATE/extra.env"; fi
	} >"$STATE/env"
}

# service_running DIR NAME: the process in DIR/pids/NAME.pid is alive and still runs bin/NAME
# (after a crash the pid may belong to another program by now; a rebuilt binary shows as
# "(deleted)"; a killed one not yet reaped is a zombie). DIR is the site's folder: $STATE for the
# main site, $SEC for the secondary.
service_running() {
	local pidfile="$1/pids/$2.pid" pid exe stat
	[ -f "$pidfile" ] || return 1
	pid=$(cat "$pidfile")
	kill -0 "$pid" 2>/dev/null || return 1
	[ -r "/proc/$pid/stat" ] || return 0 # no /proc: trust the pid
	stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[ "${stat%% *}" != Z ] || return 1
	exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
	[ "${exe% (deleted)}" = "$ROOT/bin/$2" ]
}

# start_service DIR NAME ARGS... starts bin/NAME with DIR/env unless it runs: `make up` restarts
# what died and leaves what runs alone (operators and the fault tests rely on it).
start_service() {
	local dir=$1 name=$2; shift 2
	local pidfile="$dir/pids/$name.pid"
	mkdir -p "$dir/pids" "$dir/logs"
	if service_running "$dir" "$name"; then
		log "$name already running (pid $(cat "$pidfile"))"
		return
	fi
	log "starting $name ($dir/logs/$name.log)"
	(
		set -a; . "$dir/env"; set +a
		service_credentials "$name"
		exec "$ROOT/bin/$name" "$@" >>"$dir/logs/$name.log" 2>&1
	) &
	echo $! >"$pidfile"
}

# build builds ./bin unless OPS_LOCAL_NO_BUILD=1 (the tests build it once before they start stacks).
build() {
	if [ "${OPS_LOCAL_NO_BUILD:-}" = 1 ] && [ -x "$ROOT/bin/wan" ]; then return; fi
	log "building"
	make -C "$ROOT" -s build
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

# wait_ready NAME URL: waits until URL (a /readyz) answers 200.
wait_ready() {
	for _ in $(seq 120); do
		if curl -fsS --max-time 2 -o /dev/null "$2" 2>/dev/null; then return 0; fi
		sleep 0.5
	done
	log "$1 not ready after 60 s ($2); see $SEC/logs/$1.log"
	return 1
}

# up_main starts the main site: PostgreSQL, Redis, migrations, the demo catalogue, the identity
# provider, every service and the gateway, and waits until the site's /health is ok.
up_main() {
	deps
	infra_up
	write_env
	build
	mkdir -p "$STATE/pids" "$STATE/logs" "$STATE/keys"
	if [ ! -f "$STATE/keys/jwt-signing.pem" ]; then
		log "generating a development JWT signing key in $STATE/keys"
		"$ROOT/bin/authtoken" admin generate-signing-key --out "$STATE/keys/jwt-signing.pem"
	fi
	(set -a; . "$STATE/env"; set +a; "$ROOT/bin/migrate" up 2>>"$STATE/logs/migrate.log")
	# a usable catalogue for a new user (idempotent: names already there are left alone)
	(set -a; . "$STATE/env"; set +a; "$ROOT/bin/catalog" admin seed-demo 2>>"$STATE/logs/catalog-seed.log") >&2
	# development service accounts with their kinds and bindings (docs/api.md, "Service accounts"):
	# an instrument bound to the demo instruments, a mover bound to every demo data location;
	# their tokens are made once, into $STATE/tokens/
	dev_token dev-instrument write:observations,write:data,read:data,read:observations --kind instrument --instruments 1,2,3
	dev_token dev-mover write:data --kind mover --locations 1,2,3,4,5
	# a demo PWV series for planning: measurements of the last 72 h and two forecast runs, generated
	# by a documented model (deploy/local/demo/weather.py), loaded with the route's checks
	python3 "$ROOT/deploy/local/demo/weather.py" >"$STATE/weather-demo.json"
	(set -a; . "$STATE/env"; set +a; "$ROOT/bin/site" admin load-weather "$STATE/weather-demo.json" 2>>"$STATE/logs/site-weather.log") >&2
	start_service "$STATE" devidp # the development identity provider (loopback only; dev users: deploy/devidp/README.md)
	for s in "${SERVICES[@]}"; do
		case $s in
		ingest) start_service "$STATE" ingest -role all ;;
		*) start_service "$STATE" "$s" ;;
		esac
	done
	if ! wait_healthy "http://127.0.0.1:$HTTP_BASE/health"; then
		curl -s "http://127.0.0.1:$HTTP_BASE/health" || true
		exit 1
	fi
}

up_message() {
	local g="http://127.0.0.1:$HTTP_BASE"
	cat <<-MSG

	obsops is up.
	  Gateway        $g
	  API docs       $g/docs
	  Health         $g/health
	  Log in         $g/idp/login   (dev users: alice / wonderland = admin, bob / builder)
	  Site info      $g/api/site/info
	  Metrics        http://127.0.0.1:$((HTTP_BASE + 1000))/metrics (gateway); each service's own port /metrics
	  Logs           make logs   ($STATE/logs/)
	  Environment    set -a; . $STATE/env; set +a   (for bin/* admin commands)
	  Dev tokens     $STATE/tokens/dev-instrument.token (instruments 1-3), dev-mover.token (locations 1-5)
	  Stop           make down
	MSG
}

up() {
	up_main
	up_message
}

# --- the two-site stack (make up-sites; docs/two-sites.md) ---

replica_dir() { echo "$(pg_dir)/replica"; }
replica_running() { local d; d=$(replica_dir); [ -f "$d/postmaster.pid" ] && as_pg "$(pg_bin)/pg_ctl" -D "$d" status >/dev/null 2>&1; }
replica_database_url() { echo "postgres://postgres@127.0.0.1:$REPLICA_PORT/obsops?sslmode=disable"; }
# wan_database_url is the main primary as the secondary reaches it: through the WAN.
wan_database_url() { echo "postgres://postgres@127.0.0.1:$WAN_PORT/obsops?sslmode=disable"; }
psql_main() { "$(pg_bin)/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtAc "$1"; }

# replica_up clones the secondary's replica from the main primary through the WAN the first time
# (pg_basebackup -R: it then streams from the primary, through the WAN, on its own) and starts it.
# initdb's defaults already allow it: wal_level=replica, max_wal_senders=10, and pg_hba trusting
# replication connections from 127.0.0.1 (`make up` runs initdb --auth=trust).
#
# The replica streams through a physical replication slot, so the primary keeps every WAL segment
# the replica has not received yet: after a WAN cut of any length it catches up from where it
# stopped instead of needing a new clone. The price is the primary's disk: WAL piles up for as long
# as the WAN is cut (about what was written meanwhile). max_slot_wal_keep_size
# (OPS_LOCAL_SLOT_MAX_WAL, 2GB) bounds it; past that the primary invalidates the slot ("lost"), the
# replica cannot catch up, and the next `make up-sites` clones it again.
replica_up() {
	local bin dir status; bin=$(pg_bin); dir=$(replica_dir)
	psql_main "ALTER SYSTEM SET max_slot_wal_keep_size = '${OPS_LOCAL_SLOT_MAX_WAL:-2GB}'"
	psql_main "SELECT pg_reload_conf()" >/dev/null
	status=$(psql_main "SELECT coalesce(wal_status, 'unknown') FROM pg_replication_slots WHERE slot_name = '$SLOT'")
	if [ "$status" = lost ]; then
		log "the replica fell more than max_slot_wal_keep_size behind: cloning it again"
		if replica_running; then as_pg "$bin/pg_ctl" -D "$dir" -m immediate -w stop >/dev/null; fi
		as_pg rm -rf "$dir"
		for _ in $(seq 50); do psql_main "SELECT pg_drop_replication_slot('$SLOT')" >/dev/null 2>&1 && break; sleep 0.1; done
		status=""
	fi
	if [ -z "$status" ]; then psql_main "SELECT pg_create_physical_replication_slot('$SLOT')" >/dev/null; fi
	if [ ! -f "$dir/PG_VERSION" ]; then
		wan_enabled || die "the replica must be cloned through the WAN, which is cut: make wan-up, then make up-sites"
		log "cloning the secondary's replica through the WAN (pg_basebackup -R, slot $SLOT)"
		as_pg rm -rf "$dir"
		as_pg "$bin/pg_basebackup" -D "$dir" -R -X stream -c fast -S "$SLOT" \
			-d "host=127.0.0.1 port=$WAN_PORT user=postgres application_name=$SLOT"
	fi
	if ! replica_running; then
		log "starting the secondary's replica on 127.0.0.1:$REPLICA_PORT"
		as_pg "$bin/pg_ctl" -D "$dir" -l "$(pg_dir)/replica.log" -w -t 60 \
			-o "-p $REPLICA_PORT -k $(pg_dir)/run -c listen_addresses=127.0.0.1 -c max_connections=300" start >/dev/null
	fi
}

replica_down() {
	if replica_running; then log "stopping the replica"; as_pg "$(pg_bin)/pg_ctl" -D "$(replica_dir)" -m fast -w stop >/dev/null; fi
}

wan_url() { echo "http://127.0.0.1:$WAN_API_PORT"; }

# wan_api METHOD PATH [JSON] calls toxiproxy's HTTP API of the WAN (bin/wan).
wan_api() {
	local args=(-fsS --max-time 5 -X "$1" "$(wan_url)$2")
	if [ -n "${3:-}" ]; then args+=(-H 'Content-Type: application/json' -d "$3"); fi
	curl "${args[@]}"
}
wan_enabled() { wan_api GET /proxies/wan 2>/dev/null | grep -q '"enabled":true'; }
wan_check() { wan_api GET /proxies/wan >/dev/null 2>&1 || die "the WAN is not running ($(wan_url)): make up-sites"; }

# wan_start starts bin/wan (toxiproxy): 127.0.0.1:WAN_PORT → the main primary, API on WAN_API_PORT.
# A WAN that runs is left as it is (cut or slow).
wan_start() {
	start_service "$STATE" wan -api "127.0.0.1:$WAN_API_PORT" -listen "127.0.0.1:$WAN_PORT" -upstream "127.0.0.1:$PG_PORT" \
		-observatory-listen "127.0.0.1:$WAN_OBSERVATORY_PORT" -observatory-upstream "127.0.0.1:$SEC_HTTP_BASE"
	for _ in $(seq 50); do wan_api GET /proxies/wan >/dev/null 2>&1 && return 0; sleep 0.1; done
	die "the WAN did not start: see $STATE/logs/wan.log"
}

wan_clear_toxics() {
	local t
	for t in $(wan_api GET /proxies/wan/toxics | grep -o '"name":"[^"]*"' | cut -d'"' -f4); do
		wan_api DELETE "/proxies/wan/toxics/$t" >/dev/null
	done
}

wan_down() {
	wan_check
	wan_api POST /proxies/wan '{"enabled":false}' >/dev/null
	wan_api POST /proxies/wan-observatory '{"enabled":false}' >/dev/null 2>&1 || true
	log "WAN cut: connections from the secondary to the main database and the main's poll of the observatory dropped, new ones refused (make wan-up restores it)"
}

wan_up() {
	wan_check
	wan_api POST /proxies/wan '{"enabled":true}' >/dev/null
	wan_api POST /proxies/wan-observatory '{"enabled":true}' >/dev/null 2>&1 || true
	wan_clear_toxics
	log "WAN restored (no latency, no loss)"
}

# wan_slow adds two toxics: every answer from the main database waits OPS_WAN_LATENCY_MS (300,
# ± OPS_WAN_JITTER_MS, 0), and a share OPS_WAN_LOSS (0.05) of connections loses everything it
# sends and is closed after 10 s. Toxiproxy proxies TCP streams, so loss that TCP recovers from
# (retransmission) is part of the latency; what it models is the connection that dies of it.
wan_slow() {
	wan_check
	local lat=${OPS_WAN_LATENCY_MS:-300} jit=${OPS_WAN_JITTER_MS:-0} loss=${OPS_WAN_LOSS:-0.05}
	wan_clear_toxics
	wan_api POST /proxies/wan/toxics \
		'{"name":"latency","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":'"$lat"',"jitter":'"$jit"'}}' >/dev/null
	wan_api POST /proxies/wan/toxics \
		'{"name":"loss","type":"timeout","stream":"upstream","toxicity":'"$loss"',"attributes":{"timeout":10000}}' >/dev/null
	log "WAN slow: +${lat} ms (±${jit}) per answer, ${loss} of connections lost (make wan-up clears it)"
}

# secondary_keys gives the secondary its own JWT signing key ($SEC/keys/jwt-signing.pem, generated
# once) and the main's PUBLIC keys ($SEC/keys/main-jwt-public.pem, exported from the main's
# environment at every start, so a rotation at the main reaches it): the secondary never holds the
# main's private key, and the JWTs it signs never verify at the main (docs/two-sites.md, "Signing
# keys at two sites").
secondary_keys() {
	mkdir -p "$SEC/keys"
	if [ ! -f "$SEC/keys/jwt-signing.pem" ]; then
		log "generating the secondary's own JWT signing key in $SEC/keys"
		"$ROOT/bin/authtoken" admin generate-signing-key --out "$SEC/keys/jwt-signing.pem"
	fi
	(set -a; . "$STATE/env"; set +a; "$ROOT/bin/authtoken" admin export-public-keys --out "$SEC/keys/main-jwt-public.pem")
}

# write_secondary_env writes the secondary site's environment ($SEC/env): the main site's without
# its JWT keys, then what differs — site type and name, its own JWT signing key and the main's
# public keys (secondary_keys), the local replica, the main primary through the WAN, its own Redis
# and ports. OPS_TRANSFER_URL points at a port where nothing listens: an observatory runs no
# transfer service, so /api/transfer answers 502 there instead of reaching the main site's.
write_secondary_env() {
	mkdir -p "$SEC"
	{
		# not a line naming the main's private keys (issue 24, point 8)
		# nor the observatory's own status URL (the main's setting: a secondary refuses it)
		grep -Ev '^OPS_JWT_(SIGNING_KEY|PREVIOUS_KEYS)(_FILE)?=|^OPS_OBSERVATORY_STATUS_URL=' "$STATE/env" || true
		echo "# the secondary site (make up-sites): what differs from the main site"
		kv OPS_SITE_TYPE secondary
		kv OPS_JWT_SIGNING_KEY_FILE "$SEC/keys/jwt-signing.pem"
		kv OPS_JWT_MAIN_PUBLIC_KEYS_FILE "$SEC/keys/main-jwt-public.pem"
		kv OPS_SITE_NAME "${OPS_LOCAL_SECONDARY_SITE_NAME:-observatory}"
		kv OPS_MAIN_SITE_NAME "$(. "$STATE/env" && echo "${OPS_SITE_NAME:-FYST}")" # named in its 409 write_at_main_site
		kv OPS_DATABASE_URL "$(replica_database_url)"
		kv OPS_MAIN_DATABASE_URL "$(wan_database_url)"
		kv OPS_REDIS_URL "redis://127.0.0.1:$SEC_REDIS_PORT/0"
		site_ports "$SEC_HTTP_BASE"
		kv OPS_OIDC_REDIRECT_URL "http://127.0.0.1:$SEC_HTTP_BASE/idp/callback"
		if [ -f "$SEC/extra.env" ]; then cat "$SEC/extra.env"; fi
	} >"$SEC/env"
}

# write_sites_env writes .local/sites.env: where both sites and the WAN are, for admin commands
# and tests (`set -a; . .local/sites.env; set +a`). No name in it is a service setting.
write_sites_env() {
	local b=$SEC_HTTP_BASE
	{
		echo "# the local two-site stack (make up-sites): docs/two-sites.md"
		kv OPS_MAIN_ENV_FILE "$STATE/env"
		kv OPS_MAIN_GATEWAY_URL "http://127.0.0.1:$HTTP_BASE"
		kv OPS_MAIN_PRIMARY_DATABASE_URL "$(local_database_url)"
		kv OPS_MAIN_REDIS_URL "$(local_redis_url)"
		kv OPS_SECONDARY_ENV_FILE "$SEC/env"
		kv OPS_SECONDARY_GATEWAY_URL "http://127.0.0.1:$b"
		kv OPS_SECONDARY_AUTHTOKEN_URL "http://127.0.0.1:$((b + 1))"
		kv OPS_SECONDARY_CATALOG_URL "http://127.0.0.1:$((b + 3))"
		kv OPS_SECONDARY_INGEST_URL "http://127.0.0.1:$((b + 4))"
		kv OPS_SECONDARY_SITE_URL "http://127.0.0.1:$((b + 5))"
		kv OPS_SECONDARY_DATABASE_URL "$(replica_database_url)"
		kv OPS_SECONDARY_MAIN_DATABASE_URL "$(wan_database_url)"
		kv OPS_SECONDARY_REDIS_URL "redis://127.0.0.1:$SEC_REDIS_PORT/0"
		kv OPS_SECONDARY_REPLICA_DIR "$(replica_dir)"
		kv OPS_REPLICATION_SLOT "$SLOT"
		kv OPS_WAN_API_URL "$(wan_url)"
		kv OPS_WAN_PROXY wan
		kv OPS_WAN_LISTEN_ADDR "127.0.0.1:$WAN_PORT"
		kv OPS_WAN_UPSTREAM_ADDR "127.0.0.1:$PG_PORT"
		kv OPS_WAN_OBSERVATORY_PROXY wan-observatory
		kv OPS_WAN_OBSERVATORY_LISTEN_ADDR "127.0.0.1:$WAN_OBSERVATORY_PORT"
	} >"$STATE/sites.env"
}

# up_sites starts the main site (as `up`), the WAN, and the secondary site. Rerun, it starts only
# what is not running and leaves the WAN as it is (cut or slow).
up_sites() {
	if [ -n "${OPS_DATABASE_URL:-}${OPS_REDIS_URL:-}" ]; then
		die "make up-sites runs its own PostgreSQL and Redis for both sites: unset OPS_DATABASE_URL and OPS_REDIS_URL"
	fi
	WITH_OBSERVATORY=1 up_main
	# A main site started by `make up` polls no observatory: restart its site service with the URL.
	if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$HTTP_BASE/api/site/observatory")" = 404 ]; then
		stop_one "$STATE" site
		start_service "$STATE" site
	fi
	wan_start
	replica_up
	redis_up "$SEC" "$SEC_REDIS_PORT"
	redis_users "$SEC_REDIS_PORT"
	secondary_keys
	write_secondary_env
	write_sites_env
	for s in "${SECONDARY_SERVICES[@]}"; do
		case $s in
		ingest) start_service "$SEC" ingest -role all ;;
		*) start_service "$SEC" "$s" ;;
		esac
	done
	local ok=1
	wait_ready gateway "http://127.0.0.1:$SEC_HTTP_BASE/readyz" || ok=0
	wait_ready authtoken "http://127.0.0.1:$((SEC_HTTP_BASE + 1))/readyz" || ok=0
	wait_ready catalog "http://127.0.0.1:$((SEC_HTTP_BASE + 3))/readyz" || ok=0
	wait_ready ingest "http://127.0.0.1:$((SEC_HTTP_BASE + 4))/readyz" || ok=0
	wait_ready site "http://127.0.0.1:$((SEC_HTTP_BASE + 5))/readyz" || ok=0
	[ "$ok" = 1 ] || exit 1
	up_message
	local g="http://127.0.0.1:$SEC_HTTP_BASE"
	cat <<-MSG

	The secondary site (observatory) is up.
	  Gateway        $g   (authtoken, catalog, ingest, site: ports $((SEC_HTTP_BASE + 1))-$((SEC_HTTP_BASE + 5)); no transfer)
	  Health         $g/health   Buffer: $g/buffer-stats   Site info: $g/api/site/info
	  Replica        $(replica_database_url)   (slot $SLOT on the main primary)
	  Redis          redis://127.0.0.1:$SEC_REDIS_PORT/0
	  Main database  $(wan_database_url)   (through the WAN)
	  WAN            make wan-down | wan-up | wan-slow   (toxiproxy API $(wan_url)/proxies/wan)
	  Logs           $SEC/logs/
	  Environments   $SEC/env (the secondary's services), $STATE/sites.env (both sites and the WAN)
	MSG
}

# stop_one DIR NAME stops one service of a site (SIGTERM, SIGKILL after 10 s).
stop_one() {
	local f="$1/pids/$2.pid" pid
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	log "restarting $2 (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
	rm -f "$f"
}

# stop_pids DIR stops every process with a pid file in DIR/pids (SIGTERM, SIGKILL after 10 s).
stop_pids() {
	local pids=() f pid
	for f in "$1"/pids/*.pid; do
		[ -f "$f" ] || continue
		pid=$(cat "$f")
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
}

# down stops both sites: the secondary's services, the main's (and the WAN, the identity
# provider), the replica and the secondary's Redis, then the main PostgreSQL and Redis.
down() {
	stop_pids "$SEC"
	stop_pids "$STATE"
	replica_down
	redis_down "$SEC"
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
	build
	export OPS_BIN_DIR="$ROOT/bin"
	cd "$ROOT"
}

# run_tests runs every module's tests through deploy/testreport, which prints go test's usual
# output, then each failed and skipped test (with its reason), then "N passed, N failed, N
# skipped" as the last line. OPS_REQUIRED_TESTS names a file of tests that must run and pass
# (.ci/required-tests). go test's own exit status is kept (pipefail).
run_tests() {
	test_deps
	test_database
	(cd "$ROOT/deploy/testreport" && go build -o "$ROOT/bin/testreport" .)
	local report=("$ROOT/bin/testreport")
	if [ -n "${OPS_REQUIRED_TESTS:-}" ]; then report+=(-require "$OPS_REQUIRED_TESTS"); fi
	# shellcheck disable=SC2046
	go test -json -count=1 -timeout 20m ${GOTESTFLAGS:-} $(go list -m -f '{{.Dir}}/...') 2>&1 | "${report[@]}"
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
# OPS_CHAOS_SECONDS shortens the first three, OPS_SITES_* the two-site phases (see docs/operations.md, "Fault tests").
run_chaos() {
	test_database
	export OPS_CHAOS=1
	(cd services/ingest && go test -run "${OPS_CHAOS_RUN:-^TestChaos}" -v -count=1 -timeout 60m .)
}

# run_screenshots regenerates the console's screenshots in docs/ (docs/console.md): the browser
# test writes every page's into a temporary directory (OPS_CONSOLE_SCREENSHOTS), two are copied.
run_screenshots() {
	test_deps
	test_database
	local dir; dir=$(mktemp -d)
	(cd services/gateway && OPS_CONSOLE_SCREENSHOTS="$dir" go test -run '^TestConsoleInBrowser$' -count=1 -v -timeout 10m .)
	cp "$dir/overview.png" docs/console-overview.png
	cp "$dir/source.png" docs/console-source.png
	log "docs/console-overview.png and docs/console-source.png regenerated (all pages: $dir)"
}

case "${1:-}" in
deps) deps ;;
test-deps) test_deps ;;
infra-up) deps; infra_up ;;
infra-down) infra_down ;;
pg-dir) pg_dir ;;
up) up ;;
up-sites) up_sites ;;
wan-down) wan_down ;;
wan-up) wan_up ;;
wan-slow) wan_slow ;;
down) down ;;
logs) mkdir -p "$STATE/logs" "$SEC/logs"; tail -n 50 -F $(ls "$STATE"/logs/*.log "$SEC"/logs/*.log 2>/dev/null) ;;
test) run_tests ;;
bench) run_bench ;;
screenshots) run_screenshots ;;
chaos) run_chaos ;;
env) write_env; cat "$STATE/env" ;;
secondary-env) write_env; write_secondary_env; cat "$SEC/env" ;;
*) die "usage: $0 deps|test-deps|infra-up|infra-down|pg-dir|up|up-sites|wan-down|wan-up|wan-slow|down|logs|test|bench|chaos|env|secondary-env" ;;
esac
