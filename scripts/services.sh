#!/usr/bin/env bash
# Services the tests need, started on 127.0.0.1 and safe to re-run:
#
#   bash scripts/services.sh            # install (apt) and start PostgreSQL, print its DSN
#   bash scripts/services.sh status     # exit 0 when it is running
#   bash scripts/services.sh stop       # stop it
#
# PostgreSQL runs from a throw-away data directory under $PRX_SERVICES_DIR (default
# /tmp/prx-services), never the system cluster; as root it runs as the `postgres` user
# (the server refuses root). The DSN is printed and written to $PRX_SERVICES_DIR/postgres.env as
# PRX_TEST_POSTGRES_URL=..., which prx_data_tests/deploy reads (the tests call this script
# themselves, so `pytest` alone works too). The object store the tests use (moto) is started
# inside the tests; it needs no installation beyond the Python packages.
#
# Exit status: 0 running; 3 PostgreSQL is not installed and cannot be (no apt-get), so the tests
# that need it skip; anything else is a real failure.
set -euo pipefail

STATE=${PRX_SERVICES_DIR:-/tmp/prx-services}
PORT=${PRX_TEST_POSTGRES_PORT:-54329}
DATA=$STATE/pg-data
SOCK=$STATE/pg-run
LOG=$STATE/pg.log
ENV_FILE=$STATE/postgres.env
DB_USER=prx
DB_PASS=prx
DB_NAME=prx

log() { echo "services.sh: $*" >&2; }

find_bindir() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$dir" ] && [ -x "$dir/initdb" ]; then echo "$dir"; return 0; fi
  if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; return 0; fi
  return 1
}

install_postgres() {
  if ! command -v apt-get >/dev/null 2>&1; then
    log "PostgreSQL is not installed and apt-get is not available"
    exit 3
  fi
  if [ "$(id -u)" != 0 ]; then
    log "PostgreSQL is not installed and installing it needs root (apt-get install postgresql)"
    exit 3
  fi
  log "installing PostgreSQL (apt-get install postgresql)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null
}

# Run a command as the server's owner: `postgres` when we are root, else ourselves.
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

psql_admin() {
  "$BIN/psql" -h "$SOCK" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtA "$@"
}

stop() {
  local bin
  bin=$(find_bindir) || exit 0
  if [ -d "$DATA" ] && as_owner "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    as_owner "$bin/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
    log "stopped PostgreSQL on 127.0.0.1:$PORT"
  fi
}

start() {
  BIN=$(find_bindir) || { install_postgres; BIN=$(find_bindir); }
  mkdir -p "$STATE"
  chmod 755 "$STATE"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || { log "no 'postgres' user to run the server as"; exit 1; }
  fi
  if [ ! -s "$DATA/PG_VERSION" ]; then
    rm -rf "$DATA"
    mkdir -p "$DATA" "$SOCK"
    [ "$(id -u)" = 0 ] && chown postgres: "$DATA" "$SOCK"
    chmod 700 "$DATA"
    as_owner "$BIN/initdb" -D "$DATA" -U postgres -E UTF8 --no-locale \
      --auth-local=trust --auth-host=scram-sha-256 >"$STATE/initdb.log" 2>&1 \
      || { cat "$STATE/initdb.log" >&2; exit 1; }
  fi
  mkdir -p "$SOCK"
  [ "$(id -u)" = 0 ] && chown postgres: "$SOCK"
  if ! as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    # A test server: durability settings off, since the data is thrown away.
    [ "$(id -u)" = 0 ] && touch "$LOG" && chown postgres: "$LOG"
    as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -c port=$PORT -c unix_socket_directories=$SOCK -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
      start >/dev/null || { log "PostgreSQL did not start; its log:"; tail -n 30 "$LOG" >&2; exit 1; }
  fi
  if [ "$(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = '$DB_USER'")" != 1 ]; then
    psql_admin -c "CREATE ROLE $DB_USER LOGIN CREATEDB PASSWORD '$DB_PASS'"
  fi
  if [ "$(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" != 1 ]; then
    psql_admin -c "CREATE DATABASE $DB_NAME OWNER $DB_USER"
  fi
  local url="postgresql://$DB_USER:$DB_PASS@127.0.0.1:$PORT/$DB_NAME"
  printf 'PRX_TEST_POSTGRES_URL=%s\n' "$url" >"$ENV_FILE.tmp" && mv "$ENV_FILE.tmp" "$ENV_FILE"
  echo "PRX_TEST_POSTGRES_URL=$url"
}

status() {
  local bin
  bin=$(find_bindir) || exit 1
  [ -d "$DATA" ] && as_owner "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

case "${1:-start}" in
  start | postgres) start ;;
  status) status ;;
  stop) stop ;;
  *) log "usage: $0 [start|status|stop]"; exit 2 ;;
esac
