#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests (Debian's package; installed with apt-get when
# missing and run as root): a cluster in a fresh temporary folder that listens only on a unix
# socket in that folder. scripts/test.sh runs it; by hand:
#   eval "$(bash scripts/test_postgres.sh start)"   # exports SOCRATIC_TEST_POSTGRES(_DIR)
#   bash scripts/test_postgres.sh stop "$SOCRATIC_TEST_POSTGRES_DIR"
set -euo pipefail

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1; }

case "${1:-}" in
start)
  bin=$(pg_bin || true)
  if [ -z "$bin" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } >&2
    bin=$(pg_bin || true)
  fi
  if [ -z "$bin" ]; then
    echo "scripts/test_postgres.sh: PostgreSQL's server is not installed (apt-get install postgresql)" >&2
    exit 1
  fi
  dir=$(mktemp -d "${TMPDIR:-/tmp}/socratic-pg.XXXXXX")
  as=()
  if [ "$(id -u)" = 0 ]; then  # the server refuses to run as root
    chown postgres: "$dir"
    as=(runuser -u postgres --)
  fi
  "${as[@]}" "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  # fsync off: a test database never has to survive a power cut.
  "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-k $dir -c listen_addresses= -p 5432 -c fsync=off -c synchronous_commit=off -c max_connections=300" \
    start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
  echo "export SOCRATIC_TEST_POSTGRES='postgresql://postgres@/postgres?host=$dir&port=5432'"
  echo "export SOCRATIC_TEST_POSTGRES_DIR='$dir'"
  ;;
stop)
  dir=${2:?usage: test_postgres.sh stop DIR}
  bin=$(pg_bin)
  as=()
  [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
  "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
  ;;
*)
  echo "usage: $0 start | stop DIR" >&2
  exit 2
  ;;
esac
