#!/usr/bin/env bash
# Soak: LOAD x the measured capacity for DURATION seconds on the demo decoder (CPU), as
# consecutive WINDOW-second open-loop runs of streamed requests, beside clients that go away
# mid-request (disconnector.py: closed streams, abandoned requests, unfinished bodies).
# Goals (docs/reliability.md): RSS growth <= 2% after the first window, 0 leaked KV blocks,
# 0 errors, p99 drift <= 10% between the first and the last window.
#
# usage: bench/reliability/soak.sh FERRY OUT_DIR
#   DURATION=3600 WINDOW=300 LOAD=0.8 DISCONNECT_SHARE=0.1 INPUT_LEN=64 OUTPUT_LEN=32 THREADS=2 MAX_NUM_SEQS=8
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
ferry=$(realpath "$1")
out=$(realpath -m "$2")
mkdir -p "$out"
: "${DURATION:=3600}" "${WINDOW:=300}" "${LOAD:=0.8}" "${DISCONNECT_SHARE:=0.1}" "${INPUT_LEN:=64}" "${OUTPUT_LEN:=32}"
: "${THREADS:=2}" "${MAX_NUM_SEQS:=8}"
CAPACITY_PROMPTS=${CAPACITY_PROMPTS:-64}
CAPACITY_CONCURRENCY=$MAX_NUM_SEQS
PORT=$(free_port)
demo=$(cd "$here/../.." && pwd)/models/demo/kjv-decoder
cat >"$out/serve.yaml" <<YAML
listener: {host: 127.0.0.1, port: $PORT, header_timeout_ms: 2000}
auth: {mode: none}
models:
  - name: m
    path: $demo
    threads: $THREADS
    batching: {max_num_seqs: $MAX_NUM_SEQS}
log: {level: warn, request_log: false}
YAML
step "starting ferry serve on port $PORT"
start_server "$ferry" "$out/serve.yaml" "$out/server.log"
trap 'kill -9 $SERVER_PID 2>/dev/null || true' EXIT
before=$(greedy_text)
capacity=$(measure_capacity "$ferry" "$out/capacity.json")
rate=$(python3 -c "print(round($capacity * $LOAD * (1 - $DISCONNECT_SHARE), 3))")
drop_rate=$(python3 -c "print(round($capacity * $LOAD * $DISCONNECT_SHARE, 3))")
windows=$(( DURATION / WINDOW ))
step "capacity $capacity req/s; $windows windows of $WINDOW s at $rate req/s plus $drop_rate req/s going away"
: >"$out/rss.txt"
sample_rss 10 "$out/rss.txt" &
rss_pid=$!
python3 "$here/disconnector.py" "$PORT" "$drop_rate" "$DURATION" >"$out/disconnects.json" &
drop_pid=$!
for w in $(seq 1 "$windows"); do
  n=$(python3 -c "print(max(1, int($rate * $WINDOW)))")
  "$ferry" bench serve --url "http://127.0.0.1:$PORT" --model m --num-prompts "$n" --request-rate "$rate" \
    --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --seed "$w" --timeout-s 120 --no-progress \
    --label "window-$w" --json "$out/window-$w.json" >/dev/null 2>>"$out/bench.err" || true
  step "window $w/$windows done; RSS $(tail -1 "$out/rss.txt" | cut -d' ' -f2) kB; $(idle_state)"
done
wait $drop_pid || true
alive=1
kill -0 "$SERVER_PID" 2>/dev/null || alive=0
idle=$(wait_idle 60 || true)
after=$(greedy_text || echo "<no answer>")
kill $rss_pid 2>/dev/null || true
python3 "$here/report.py" soak "$out" --alive "$alive" --idle "$idle" --same-output "$([ "$before" == "$after" ] && echo 1 || echo 0)" \
  --capacity "$capacity" --rate "$rate" --window "$WINDOW"
kill -TERM "$SERVER_PID"; wait "$SERVER_PID" || true
