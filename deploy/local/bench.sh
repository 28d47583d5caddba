#!/usr/bin/env bash
# Benchmarks of every workspace module, measured in one run on loopback (`make bench`, which
# builds ./bin first). Each module may have tests named TestBench* that skip unless OPS_BENCH=1;
# this script finds and runs them against the real binaries and prints what they measure.
#
# PostgreSQL: OPS_TEST_DATABASE_URL, else the machine's server on 127.0.0.1:5432, else the
# project-local one (deploy/local/stack.sh, started here and stopped again if it was not running).
# Redis: a private redis-server per test (pkg/testenv).
#
# Knobs: OPS_BENCH_SECONDS (per measured cell, default 5), OPS_BENCH_CONNECTIONS (the gateway's
# sweep of connection counts, default 16,32,64,128,256), OPS_BENCH_CONCURRENCY (authtoken's
# callers, default 32), OPS_BENCH_LOG_LEVEL (default info), OPS_BENCH_RUN (test name regexp,
# default ^TestBench).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PG_PORT=${OPS_LOCAL_PG_PORT:-55432}

log() { printf '\033[1m[bench]\033[0m %s\n' "$*" >&2; }

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

"$ROOT/deploy/local/stack.sh" deps

started_pg=0
if [ -z "${OPS_TEST_DATABASE_URL:-}" ]; then
	if port_open 127.0.0.1 5432; then
		export OPS_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	else
		if [ ! -f "$("$ROOT/deploy/local/stack.sh" pg-dir)/data/postmaster.pid" ]; then started_pg=1; fi
		# OPS_REDIS_URL set: only PostgreSQL is started, the tests run their own Redis servers.
		OPS_REDIS_URL=${OPS_REDIS_URL:-unused} "$ROOT/deploy/local/stack.sh" infra-up
		export OPS_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres?sslmode=disable"
	fi
fi
stop_pg() {
	if [ "$started_pg" = 1 ]; then "$ROOT/deploy/local/stack.sh" infra-down || true; fi
}
trap stop_pg EXIT

export OPS_BENCH=1
export OPS_BIN_DIR="$ROOT/bin"
RUN=${OPS_BENCH_RUN:-^TestBench}

cd "$ROOT"
status=0
found=0
for dir in $(go list -m -f '{{.Dir}}'); do
	# packages of this module that declare a benchmark test
	pkgs=$(grep -rl --include='*_test.go' -E '^func TestBench[A-Za-z0-9_]*\(t \*testing\.T\)' "$dir" 2>/dev/null |
		xargs -r -n1 dirname | sort -u | sed "s|^$dir|.|" || true)
	[ -n "$pkgs" ] || continue
	found=1
	log "$(basename "$dir"): $(echo "$pkgs" | tr '\n' ' ')"
	# shellcheck disable=SC2086
	(cd "$dir" && go test -run "$RUN" -v -count=1 -timeout 20m $pkgs) || status=1
done
if [ "$found" = 0 ]; then log "no TestBench* tests found"; fi
exit $status
