# Sourced by .ci/run (see the conventions at its top). Makes sure a Redis
# server answers on 127.0.0.1:6379 for the redisstore tests, and exports
# SQSCONSUMER_REDIS_URL.
#
# This kind of machine starts Redis before the session, so usually there is
# nothing to do; that server was not started by CI and is left running. On a
# bare machine the script installs Debian's redis-server and starts it the
# way the machine would (nothing kept on disk), and then shuts it down when
# .ci/run exits.
#
# By hand: source .ci/setup.d/20-redis.sh && go test -race ./redisstore/

redis_port=6379
redis_url="redis://127.0.0.1:$redis_port/0"

if ! type ci_log >/dev/null 2>&1; then
  ci_log() { printf '==> %s\n' "$*"; }
fi

redis_ping() { redis-cli -h 127.0.0.1 -p "$redis_port" ping 2>/dev/null | grep -q PONG; }

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  ci_log "installing redis-server from Debian"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi

if redis_ping; then
  ci_log "Redis already answers on 127.0.0.1:$redis_port ($(redis-cli -p "$redis_port" info server | sed -n 's/^redis_version:\(.*\)\r*$/\1/p'))"
else
  ci_log "starting redis-server on 127.0.0.1:$redis_port"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$redis_port" --save "" \
    --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
  if type ci_on_exit >/dev/null 2>&1; then
    ci_on_exit "redis-cli -h 127.0.0.1 -p $redis_port shutdown nosave >/dev/null 2>&1"
  fi
  for ((redis_i = 0; redis_i < 100; redis_i++)); do
    redis_ping && break
    sleep 0.1
  done
  if ! redis_ping; then
    echo "error: redis-server did not answer within 10 s" >&2
    tail -n 40 /var/log/redis/ci.log >&2 || true
    return 1
  fi
fi

export SQSCONSUMER_REDIS_URL=$redis_url
ci_log "SQSCONSUMER_REDIS_URL=$SQSCONSUMER_REDIS_URL"
unset redis_port redis_url redis_i
unset -f redis_ping
