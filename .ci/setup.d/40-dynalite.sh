# Sourced by .ci/run (see the conventions at its top). Installs and starts
# dynalite, an in-memory DynamoDB emulator, on 127.0.0.1 for the
# dynamostore tests, and exports SQSCONSUMER_DYNAMODB_ENDPOINT.
#
# dynamostore/dynalite/package.json and package-lock.json pin dynalite
# 4.0.0, which runs on the machine's Node.js (20 or newer). `npm ci` runs
# only when the lock file changed since the last install (node_modules is
# git-ignored). dynamostore/dynalite/launch.mjs binds 127.0.0.1 on a free
# port and makes tables ACTIVE at once; it needs no network at run time.
#
# By hand: source .ci/setup.d/40-dynalite.sh && go test -race ./dynamostore/
# (the server then keeps running; its PID is printed).
#
# Knobs: SQSCONSUMER_DYNALITE_PORT (default 0: a free port chosen by the kernel).

dynalite_dir=dynamostore/dynalite
dynalite_stamp=$dynalite_dir/node_modules/.sqsconsumer-lock.sha256
dynalite_tmp=${CI_TMP:-$(mktemp -d "${TMPDIR:-/tmp}/dynalite.XXXXXX")}

if ! type ci_log >/dev/null 2>&1; then
  ci_log() { printf '==> %s\n' "$*"; }
fi

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
  ci_log "installing nodejs, npm and curl from Debian"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm curl >/dev/null
fi

dynalite_lock_sum=$(sha256sum "$dynalite_dir/package-lock.json" | cut -d' ' -f1)
if [[ ! -d $dynalite_dir/node_modules/dynalite || ! -f $dynalite_stamp || $(cat "$dynalite_stamp") != "$dynalite_lock_sum" ]]; then
  ci_log "npm ci in $dynalite_dir"
  (cd "$dynalite_dir" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$dynalite_lock_sum" >"$dynalite_stamp"
fi
ci_log "dynalite $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$dynalite_dir/node_modules/dynalite/package.json" | head -n1) on node $(node --version)"

dynalite_ready=$dynalite_tmp/dynalite.ready
dynalite_log=$dynalite_tmp/dynalite.log
rm -f "$dynalite_ready"
(cd "$dynalite_dir" && exec node launch.mjs "${SQSCONSUMER_DYNALITE_PORT:-0}" "$dynalite_ready") >"$dynalite_log" 2>&1 &
dynalite_pid=$!
if type ci_track_pid >/dev/null 2>&1; then
  ci_track_pid "$dynalite_pid"
else
  echo "dynalite runs as PID $dynalite_pid (kill it when done)"
fi

# Wait (at most 30 s) for the launcher to report its endpoint and answer
# (any HTTP answer will do: dynalite refuses unsigned requests).
dynalite_endpoint=""
for ((dynalite_i = 0; dynalite_i < 300; dynalite_i++)); do
  if ! kill -0 "$dynalite_pid" 2>/dev/null; then
    echo "error: dynalite exited during start-up" >&2
    cat "$dynalite_log" >&2
    return 1
  fi
  if [[ -s $dynalite_ready ]]; then
    dynalite_endpoint=$(head -n1 "$dynalite_ready")
    if curl -s -o /dev/null --max-time 1 "$dynalite_endpoint"; then
      break
    fi
  fi
  dynalite_endpoint=""
  sleep 0.1
done
if [[ -z $dynalite_endpoint ]]; then
  echo "error: dynalite did not answer within 30 s" >&2
  cat "$dynalite_log" >&2
  return 1
fi

export SQSCONSUMER_DYNAMODB_ENDPOINT=$dynalite_endpoint
ci_log "dynalite listening: SQSCONSUMER_DYNAMODB_ENDPOINT=$SQSCONSUMER_DYNAMODB_ENDPOINT"
unset dynalite_dir dynalite_stamp dynalite_tmp dynalite_lock_sum dynalite_ready dynalite_log \
  dynalite_pid dynalite_endpoint dynalite_i
