#!/usr/bin/env bash
# For the tests: make sure a PostgreSQL server runs on loopback with an rlguard role and database.
# Prints the SQLAlchemy URL on stdout. Uses RLGUARD_TEST_POSTGRES_URL untouched when it is set.
set -euo pipefail
if [ -n "${RLGUARD_TEST_POSTGRES_URL:-}" ]; then
  echo "$RLGUARD_TEST_POSTGRES_URL"; exit 0
fi
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "rlguard: PostgreSQL is not installed; install it or set RLGUARD_TEST_POSTGRES_URL" >&2
    exit 1
  fi
  echo "rlguard: installing postgresql from Debian's packages ..." >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
version=$(pg_lsclusters -h | awk 'NR==1{print $1}')
cluster=$(pg_lsclusters -h | awk 'NR==1{print $2}')
if [ -z "$version" ]; then
  version=$(ls /usr/lib/postgresql | sort -n | tail -1); cluster=main
  pg_createcluster "$version" "$cluster" >&2
fi
pg_ctlcluster "$version" "$cluster" start >&2 2>/dev/null || true
port=$(pg_lsclusters -h | awk -v v="$version" -v c="$cluster" '$1==v && $2==c {print $3}')
for _ in $(seq 1 60); do
  su postgres -c "psql -p $port -qtAc 'select 1'" >/dev/null 2>&1 && break
  sleep 0.5
done
su postgres -c "psql -p $port -qtAc \"select 1 from pg_roles where rolname='rlguard'\"" | grep -q 1 \
  || su postgres -c "psql -p $port -qc \"create role rlguard login password 'rlguard' createdb\"" >&2
su postgres -c "psql -p $port -qtAc \"select 1 from pg_database where datname='rlguard_test'\"" | grep -q 1 \
  || su postgres -c "psql -p $port -qc 'create database rlguard_test owner rlguard'" >&2
echo "postgresql+psycopg://rlguard:rlguard@127.0.0.1:${port}/rlguard_test"
