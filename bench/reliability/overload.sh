#!/usr/bin/env bash
# Overload: open-loop arrivals at OVERLOAD x the server's measured capacity for DURATION
# seconds, on the demo decoder (CPU). Checks the promises of docs/reliability.md:
#   - the server stays up;
#   - refusals are 429 with Retry-After, answered fast (p99);
#   - admitted requests meet their TTFT SLO (>= 99%);
#   - RSS stays bounded;
#   - afterwards it is idle with every KV block free, and greedy output is unchanged.
#
# usage: bench/reliability/overload.sh FERRY OUT_DIR
#   DURATION=600 OVERLOAD=2 INPUT_LEN=64 OUTPUT_LEN=32 SLO_TTFT_MS=3000 MAX_QUEUE_TIME_MS=2000
#   THREADS=2 MAX_NUM_SEQS=8
# Writes OUT_DIR/{capacity,overload}.json, rss.txt, probes.txt, summary.json, summary.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
ferry=$(realpath "$1")
out=$(realpath -m "$2")
mkdir -p "$out"
: "${DURATION:=600}" "${OVERLOAD:=2}" "${INPUT_LEN:=64}" "${OUTPUT_LEN:=32}" "${SLO_TTFT_MS:=3000}"
: "${MAX_QUEUE_TIME_MS:=2000}" "${THREADS:=2}" "${MAX_NUM_SEQS:=8}"
CAPACITY_PROMPTS=${CAPACITY_PROMPTS:-64}
CAPACITY_CONCURRENCY=$MAX_NUM_SEQS
PORT=$(free_port)
demo=$(cd "$here/../.." && pwd)/models/demo/kjv-decoder
cat >"$out/serve.yaml" <<YAML
listener: {host: 127.0.0.1, port: $PORT}
auth: {mode: none}
models:
  - name: m
    path: $demo
    threads: $THREADS
    batching: {max_num_seqs: $MAX_NUM_SEQS, max_queue_time_ms: $MAX_QUEUE_TIME_MS}
log: {level: warn, request_log: false}
YAML
step "starting ferry serve on port $PORT"
start_server "$ferry" "$out/serve.yaml" "$out/server.log"
trap 'kill -9 $SERVER_PID 2>/dev/null || true' EXIT
before=$(greedy_text)
step "measuring capacity (closed loop, $CAPACITY_CONCURRENCY clients)"
capacity=$(measure_capacity "$ferry" "$out/capacity.json")
rate=$(python3 -c "print(round($capacity * $OVERLOAD, 3))")
prompts=$(python3 -c "print(int($capacity * $OVERLOAD * $DURATION))")
step "capacity $capacity req/s; offering $rate req/s for $DURATION s ($prompts requests)"
: >"$out/rss.txt"
sample_rss 5 "$out/rss.txt" &
rss_pid=$!
# Probes: one request every 2 s with curl; a 429 must carry Retry-After.
(
  end=$(( $(date +%s) + DURATION ))
  while [ "$(date +%s)" -lt "$end" ]; do
    curl -s -o /dev/null -D - "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"model\":\"m\",\"prompt\":\"In the beginning\",\"max_tokens\":$OUTPUT_LEN,\"temperature\":0}" |
      python3 -c '
import sys
lines = sys.stdin.read().splitlines()
status = lines[0].split()[1] if lines else "0"
retry = any(l.lower().startswith("retry-after:") for l in lines)
print(status, int(retry))' >>"$out/probes.txt"
    sleep 2
  done
) &
probe_pid=$!
"$ferry" bench serve --url "http://127.0.0.1:$PORT" --model m --num-prompts "$prompts" --request-rate "$rate" \
  --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --slo-ttft-ms "$SLO_TTFT_MS" --timeout-s 120 \
  --label overload --json "$out/overload.json" --save-requests >"$out/overload.txt" 2>"$out/overload.err" || true
wait $probe_pid || true
alive=1
kill -0 "$SERVER_PID" 2>/dev/null || alive=0
step "load done; server alive: $alive; waiting for idle"
idle=$(wait_idle 60 || true)
after=$(greedy_text || echo "<no answer>")
kill $rss_pid 2>/dev/null || true
python3 "$here/report.py" overload "$out" --alive "$alive" --idle "$idle" --same-output "$([ "$before" == "$after" ] && echo 1 || echo 0)" \
  --capacity "$capacity" --rate "$rate" --slo-ttft-ms "$SLO_TTFT_MS"
kill -TERM "$SERVER_PID"; wait "$SERVER_PID" || true
