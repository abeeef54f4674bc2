# Sourced by .ci/run (see the conventions at its top). Makes sure PostgreSQL
# answers on 127.0.0.1:5432 with trust auth for the pgstore tests, creates
# the scratch database sqsconsumer_test if it is missing, and exports
# SQSCONSUMER_POSTGRES_URL.
#
# This kind of machine runs PostgreSQL (trust auth on loopback) before the
# session; that server was not started by CI and is left running. If it is
# down the script starts the cluster the way the machine does; on a bare
# machine it installs Debian's postgresql first and lets loopback
# connections in without a password (the cluster is a throwaway one).
#
# By hand: source .ci/setup.d/30-postgres.sh && go test -race ./pgstore/

pg_db=sqsconsumer_test
pg_url="postgres://postgres@127.0.0.1:5432/$pg_db?sslmode=disable"

if ! type ci_log >/dev/null 2>&1; then
  ci_log() { printf '==> %s\n' "$*"; }
fi

pg_installed_now=0
if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! command -v psql >/dev/null 2>&1; then
  ci_log "installing postgresql from Debian"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  pg_installed_now=1
fi
pg_version=$(ls /etc/postgresql | sort -V | tail -n1)

if ((pg_installed_now)); then
  # Debian's default asks for a password on TCP; the tests connect as
  # postgres over loopback without one.
  sed -i '1i host all all 127.0.0.1/32 trust' "/etc/postgresql/$pg_version/main/pg_hba.conf"
  if pg_isready -q -h 127.0.0.1 -p 5432; then
    pg_ctlcluster --skip-systemctl-redirect "$pg_version" main reload
  fi
fi

if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  ci_log "starting PostgreSQL $pg_version (cluster main)"
  pg_ctlcluster --skip-systemctl-redirect "$pg_version" main start
  if ((pg_installed_now)) && type ci_on_exit >/dev/null 2>&1; then
    ci_on_exit "pg_ctlcluster --skip-systemctl-redirect $pg_version main stop"
  fi
  for ((pg_i = 0; pg_i < 150; pg_i++)); do
    pg_isready -q -h 127.0.0.1 -p 5432 && break
    sleep 0.2
  done
fi
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "error: PostgreSQL does not answer on 127.0.0.1:5432" >&2
  tail -n 40 "/var/log/postgresql/postgresql-$pg_version-main.log" >&2 || true
  return 1
fi

if [[ $(psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$pg_db'") != 1 ]]; then
  ci_log "creating scratch database $pg_db"
  psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE $pg_db"
fi

export SQSCONSUMER_POSTGRES_URL=$pg_url
ci_log "PostgreSQL $pg_version: SQSCONSUMER_POSTGRES_URL=$SQSCONSUMER_POSTGRES_URL"
unset pg_db pg_url pg_installed_now pg_version pg_i
