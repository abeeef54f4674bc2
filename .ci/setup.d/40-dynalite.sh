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

dynalite_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/dynamostore/dynalite
source "$(dirname "${BASH_SOURCE[0]}")/../lib/node-service.sh"

node_service_install "$dynalite_dir" "$dynalite_dir/node_modules/dynalite"
ci_log "dynalite $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$dynalite_dir/node_modules/dynalite/package.json" | head -n1) on node $(node --version)"
# Any HTTP answer will do: dynalite refuses unsigned requests.
node_service_start dynalite "$dynalite_dir" node "${SQSCONSUMER_DYNALITE_PORT:-0}" ""

export SQSCONSUMER_DYNAMODB_ENDPOINT=$NODE_SERVICE_ENDPOINT
ci_log "dynalite listening: SQSCONSUMER_DYNAMODB_ENDPOINT=$SQSCONSUMER_DYNAMODB_ENDPOINT"
unset dynalite_dir NODE_SERVICE_ENDPOINT
