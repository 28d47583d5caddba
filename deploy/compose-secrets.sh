#!/bin/sh
# Makes the secrets deploy/compose.yaml reads, one file each, in deploy/secrets/ (or the directory
# given): `make compose-secrets` runs it. Never committed (.gitignore) nor sent to an image build
# (.dockerignore). A file that exists is kept: a second run adds only what is missing (a new
# service), so a running stack's passwords stay valid. To rotate one, see docs/deployment.md.
#
#   postgres-password, database-url   the schema owner (PostgreSQL's superuser obsops): postgres
#                                     and the migration job only
#   SERVICE-database-password         PostgreSQL role obsops_SERVICE, one per migrations/grants/SERVICE.sql (not replay: a secondary's)
#   USER-redis-password               Redis ACL user USER, one per user of pkg/redisacl/users.acl
#                                     (not keda: KEDA runs on Kubernetes only)
#   redis-admin-password              Redis' admin user, for operators
#
# Compose bind-mounts file secrets with the host file's owner and mode (it cannot change them),
# and each container runs as its own non-root user: the files are 0444 inside a 0700 directory, so
# no other user of this machine reads them and each container sees only the secrets it mounts.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/deploy/secrets}
umask 077
mkdir -p "$dir"
chmod 700 "$dir"

random() {
	if command -v openssl >/dev/null 2>&1; then
		openssl rand -hex 24
	else
		od -An -N24 -tx1 /dev/urandom | tr -d ' \n'
		echo
	fi
}

# put NAME VALUE writes the secret NAME unless it exists.
put() {
	[ -s "$dir/$1" ] && return 0
	printf '%s\n' "$2" >"$dir/$1.new"
	chmod 444 "$dir/$1.new"
	mv "$dir/$1.new" "$dir/$1"
	echo "made $dir/$1"
}

put postgres-password "$(random)"
put database-url "postgres://obsops:$(tr -d '\r\n' <"$dir/postgres-password")@postgres:5432/obsops?sslmode=disable"
for f in "$root"/migrations/grants/*.sql; do
	role=$(basename "$f" .sql)
	# obsops_replay is a secondary site's role at the main database (docs/decisions.md §45); the
	# Compose stack is one site.
	[ "$role" = replay ] && continue
	put "$role-database-password" "$(random)"
done
for user in $(awk '$1 == "user" && $2 != "keda" { print $2 }' "$root/pkg/redisacl/users.acl"); do
	put "$user-redis-password" "$(random)"
done
put redis-admin-password "$(random)"
