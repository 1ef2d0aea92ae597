#!/usr/bin/env bash
# Starts `ferry serve` with the demo models on a free loopback port, runs client_test.mjs
# with the official openai npm client against it, then stops the server with SIGTERM and
# checks that it exits 0 (graceful shutdown).
# usage: run.sh FERRY_BINARY SOURCE_DIR WORK_DIR
set -euo pipefail
ferry=$1 src=$2 work=$3
here="$src/tests/serve/openai_client"
command -v node >/dev/null && command -v npm >/dev/null || { echo "node and npm are needed (scripts/install_deps.sh)"; exit 1; }
mkdir -p "$work"
cp "$here/package.json" "$here/package-lock.json" "$here/client_test.mjs" "$work/"
cd "$work"
if [[ ! -d node_modules/openai ]]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
log="$work/server.log"
# The Batch API's queue in the work directory: never shared with another server.
rm -rf "$work/batch-queue"
(cd "$src" && FERRY_QUEUE_PATH="$work/batch-queue" exec "$ferry" serve --config configs/demo.yaml --port 0 --no-request-log) >"$log" 2>&1 &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log" | head -1)
  if [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/health/ready" >/dev/null 2>&1; then break; fi
  kill -0 $pid 2>/dev/null || { cat "$log"; echo "server exited early"; exit 1; }
  sleep 0.1
done
[[ -n $port ]] || { cat "$log"; echo "server did not start"; exit 1; }
FERRY_BASE_URL="http://127.0.0.1:$port/v1" node client_test.mjs
kill -TERM $pid
status=0
wait $pid || status=$?
trap - EXIT
if [[ $status -ne 0 ]]; then cat "$log"; echo "server exited with $status after SIGTERM"; exit 1; fi
echo "server shut down cleanly"
