# Sourced by the .ci/setup.d scripts that run a Node.js server from a pinned
# package folder (fauxqs, dynalite). Defines:
#
#   node_service_install DIR CHECK
#       apt-installs nodejs, npm and curl if missing; runs `npm ci` in DIR
#       unless node_modules matches package-lock.json (a SHA-256 stamp) and
#       the file CHECK exists.
#   node_service_start NAME DIR NODE PORT PROBE_PATH
#       runs `NODE launch.mjs PORT READY_FILE` in DIR (each launcher binds
#       127.0.0.1 and writes its URL to READY_FILE), registers the PID for
#       cleanup, and waits at most 30 s until URL+PROBE_PATH answers over
#       HTTP (any status). Sets NODE_SERVICE_ENDPOINT; returns 1, printing
#       the server's log, if it exits or never answers.

if ! type ci_log >/dev/null 2>&1; then
  ci_log() { printf '==> %s\n' "$*"; }
fi

node_service_install() {
  local dir=$1 check=$2 stamp sum
  if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
    ci_log "installing nodejs, npm and curl from Debian"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm curl >/dev/null
  fi
  stamp=$dir/node_modules/.sqsconsumer-lock.sha256
  sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  if [[ ! -e $check || ! -f $stamp || $(cat "$stamp") != "$sum" ]]; then
    ci_log "npm ci in $dir"
    # --loglevel=error hides EBADENGINE warnings: npm runs on the system
    # node even where the server runs on a pinned one.
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$sum" >"$stamp"
  fi
}

node_service_start() {
  local name=$1 dir=$2 node=$3 port=$4 probe=$5
  local tmp=${CI_TMP:-$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")}
  local ready=$tmp/$name.ready log=$tmp/$name.log pid i endpoint=""
  rm -f "$ready"
  (cd "$dir" && exec "$node" launch.mjs "$port" "$ready") >"$log" 2>&1 &
  pid=$!
  if type ci_track_pid >/dev/null 2>&1; then
    ci_track_pid "$pid"
  else
    echo "$name runs as PID $pid (kill it when done)"
  fi
  for ((i = 0; i < 300; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "error: $name exited during start-up" >&2
      cat "$log" >&2
      return 1
    fi
    if [[ -s $ready ]]; then
      endpoint=$(head -n1 "$ready")
      if curl -s -o /dev/null --max-time 1 "$endpoint$probe"; then
        NODE_SERVICE_ENDPOINT=$endpoint
        return 0
      fi
    fi
    sleep 0.1
  done
  echo "error: $name did not answer within 30 s" >&2
  cat "$log" >&2
  return 1
}
