#!/usr/bin/env bash
# One decoder behind `ferry serve`, measured by `ferry bench serve` in a closed loop of N
# clients (every client sends its next request when its last one finishes), the shape of the
# published serving figures (TensorRT-LLM, vLLM): fixed prompt and output lengths, random
# prompt tokens, streamed completions. One server start per concurrency, a warm-up of one
# request per client before the timed requests.
#
# usage: bench/serve_closed_loop.sh FERRY MODEL OUT_DIR [LABEL]
#   DEVICE=cuda|cpu (cuda)  KV=auto|fp8|... (kv_cache_dtype, GPU)  CONCURRENCY="256 512"
#   PROMPTS_PER_CLIENT=6 (or PROMPTS: the total)  INPUT_LEN=128  OUTPUT_LEN=128  MAX_SEQ_LEN=1024
#   MAX_NUM_SEQS (default: the concurrency)  MAX_BATCHED_TOKENS=8192  THREADS (CPU)
#   ASYNC=auto|on|off (batching.async_scheduling; auto: asynchronous steps on a GPU)
# Writes OUT_DIR/LABEL-cN.{json,txt} (the client's report) and -server.log, and prints one
# line per run: completed, failed, output tok/s, TPOT / ITL / TTFT p50 and p99, and from the
# server's /metrics (scraped before and after the client, so warm-up included) the engine's
# steps: how many, the mean step time, sequences and tokens a step, and the share of the
# client's wall time the device spent in steps (OUT_DIR/LABEL-cN-steps.txt).
# The server inherits the environment (FERRY_DECODE_ATTENTION=rows and the like).
#
# The H200 runs in docs/performance.md ("Serving the 8B shape in fp8"):
#   ferry build --model CKPT --device cuda --precision fp8 -o 8b-fp8.ferry
#   KV=fp8 CONCURRENCY=512 bench/serve_closed_loop.sh ferry 8b-fp8.ferry OUT fp8
#   KV=fp8 CONCURRENCY=256 PROMPTS=2048 bench/serve_closed_loop.sh ferry 8b-fp8.ferry OUT fp8
#   CONCURRENCY=512 bench/serve_closed_loop.sh ferry CKPT OUT bf16
set -euo pipefail
ferry=$(realpath "$1")
model=$(realpath "$2")
out=$(realpath -m "$3")
label=${4:-serve}
device=${DEVICE:-cuda}
kv=${KV:-auto}
input_len=${INPUT_LEN:-128}
output_len=${OUTPUT_LEN:-128}
per_client=${PROMPTS_PER_CLIENT:-6}
port=${PORT:-8398}
mkdir -p "$out"

for c in ${CONCURRENCY:-256 512}; do
  name="$label-c$c"
  seqs=${MAX_NUM_SEQS:-$c}
  device_lines="    device: $device"
  [[ $device == cuda ]] && device_lines+=$'\n'"    kv_cache_dtype: $kv"
  [[ -n ${THREADS:-} ]] && device_lines+=$'\n'"    threads: $THREADS"
  cat >"$out/$name.yaml" <<EOF
listener: {host: 127.0.0.1, port: $port}
auth: {mode: none}
models:
  - name: m
    path: $model
$device_lines
    batching: {max_num_seqs: $seqs, max_num_batched_tokens: ${MAX_BATCHED_TOKENS:-8192}, max_seq_len: ${MAX_SEQ_LEN:-1024}, max_queue_requests: 8192, max_queue_tokens: 8388608, async_scheduling: ${ASYNC:-auto}}
log: {level: warn, request_log: false}
EOF
  "$ferry" serve --config "$out/$name.yaml" >"$out/$name-server.log" 2>&1 &
  pid=$!
  ready=
  for _ in $(seq 1 3000); do
    if curl -sf "http://127.0.0.1:$port/health/ready" >/dev/null 2>&1; then ready=1; break; fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z $ready ]]; then
    echo "$name: the server did not become ready"; tail -5 "$out/$name-server.log"
    kill -TERM $pid 2>/dev/null || true
    wait $pid || true
    continue
  fi
  curl -sf "http://127.0.0.1:$port/metrics" >"$out/$name-metrics-before.txt" || true
  client_t0=$(date +%s%N)
  "$ferry" bench serve --url "http://127.0.0.1:$port" --model m --num-prompts "${PROMPTS:-$((per_client * c))}" \
    --max-concurrency "$c" --input-len "$input_len" --output-len "$output_len" --warmup "$c" --no-progress \
    --label "$name" --json "$out/$name.json" >"$out/$name.txt" 2>&1 || true
  client_ns=$(( $(date +%s%N) - client_t0 ))
  curl -sf "http://127.0.0.1:$port/metrics" >"$out/$name-metrics-after.txt" || true
  kill -TERM $pid
  wait $pid || true
  python3 - "$out/$name-metrics-before.txt" "$out/$name-metrics-after.txt" "$client_ns" <<'PY' \
    | tee "$out/$name-steps.txt" || true
import re, sys
def read(path):
    v = {}
    for line in open(path):
        m = re.match(r'ferry:(engine_step_seconds|batch_size|iteration_tokens_total)_(sum|count)\{[^}]*\} (\S+)', line)
        if m: v[m.group(1) + '_' + m.group(2)] = float(m.group(3))
    return v
a, b = read(sys.argv[1]), read(sys.argv[2])
d = {k: b[k] - a.get(k, 0.0) for k in b}
steps = d.get('engine_step_seconds_count', 0)
if steps > 0:
    wall = float(sys.argv[3]) / 1e9
    print(f"steps {steps:.0f}: {1e3 * d['engine_step_seconds_sum'] / steps:.2f} ms a step, "
          f"{d['batch_size_sum'] / d['batch_size_count']:.1f} sequences and "
          f"{d['iteration_tokens_total_sum'] / d['iteration_tokens_total_count']:.1f} tokens a step, "
          f"device in steps {100 * d['engine_step_seconds_sum'] / wall:.1f} % of the client's {wall:.1f} s")
PY
  python3 - "$out/$name.json" "$name" <<'PY' || echo "$2: no report (see $out/$name.txt)"
import json, sys
r = json.load(open(sys.argv[1]))
def pct(k):
    d = r.get(k) or {}
    return f"{d.get('p50', 0):.1f} / {d.get('p99', 0):.1f}"
print(f"{sys.argv[2]}: completed {r.get('completed')} failed {r.get('failed')} out tok/s {r.get('output_throughput', 0):.0f}"
      f"  TPOT p50/p99 {pct('tpot_ms')}  ITL {pct('itl_ms')}  TTFT {pct('ttft_ms')} ms")
PY
done
