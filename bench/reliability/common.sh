# Shared by overload.sh and soak.sh: start and watch one `ferry serve` on the demo decoder.
# shellcheck shell=bash
step() { echo "[$(date +%T)] $*" >&2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_server FERRY CONFIG LOG -> sets SERVER_PID; waits for /health/ready.
start_server() {
  local ferry=$1 config=$2 log=$3
  "$ferry" serve --config "$config" >"$log.stdout" 2>"$log" &
  SERVER_PID=$!
  for _ in $(seq 1 1200); do
    curl -sf "http://127.0.0.1:$PORT/health/ready" >/dev/null 2>&1 && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log"; return 1; }
    sleep 0.1
  done
  echo "server not ready after 120 s" >&2
  return 1
}

# Samples the server's RSS (kB) every $1 seconds into $2 as "seconds rss_kb" lines until stopped.
sample_rss() {
  local every=$1 file=$2 t0
  t0=$(date +%s.%N)
  while kill -0 "$SERVER_PID" 2>/dev/null; do
    awk -v t="$(echo "$(date +%s.%N) - $t0" | bc)" '/^VmRSS:/ {print t, $2}' "/proc/$SERVER_PID/status" >>"$file" 2>/dev/null
    sleep "$every"
  done
}

# The server's idle state from /metrics: running, waiting, KV usage (all must be 0).
idle_state() {
  curl -s "http://127.0.0.1:$PORT/metrics" | python3 -c '
import sys, json
v = {"running": 0.0, "waiting": 0.0, "kv": 0.0}
for line in sys.stdin:
    if line.startswith("ferry:num_requests_running{"): v["running"] += float(line.split()[-1])
    if line.startswith("ferry:num_requests_waiting{"): v["waiting"] += float(line.split()[-1])
    if line.startswith("ferry:kv_cache_usage_perc{"): v["kv"] += float(line.split()[-1])
print(json.dumps(v))'
}

# Waits up to $1 s for running = waiting = kv = 0; prints the last state.
wait_idle() {
  local state
  for _ in $(seq 1 "$(( $1 * 2 ))"); do
    state=$(idle_state)
    python3 -c 'import json,sys; v=json.loads(sys.argv[1]); sys.exit(0 if v["running"]==0 and v["waiting"]==0 and v["kv"]==0 else 1)' "$state" && { echo "$state"; return 0; }
    sleep 0.5
  done
  echo "$state"
  return 1
}

# One greedy completion's text (the outputs-unchanged check).
greedy_text() {
  curl -s "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d '{"model":"m","prompt":"And God said, Let there be light","max_tokens":32,"temperature":0}' |
    python3 -c 'import sys,json; print(json.load(sys.stdin)["choices"][0]["text"])'
}

# Closed-loop capacity in requests/s at the script's request shape.
measure_capacity() {
  local ferry=$1 out=$2
  "$ferry" bench serve --url "http://127.0.0.1:$PORT" --model m --num-prompts "$CAPACITY_PROMPTS" \
    --max-concurrency "$CAPACITY_CONCURRENCY" --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" \
    --warmup 8 --no-progress --label capacity --json "$out" >/dev/null
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["request_throughput"])' "$out"
}
