#!/usr/bin/env bash
# The step-time target (`batching.max_step_ms`) against a fixed token budget, at saturation:
# a closed loop of more clients than sequence slots, so prefills of new requests keep landing
# in steps where other sequences decode. Interleaved runs of `max_step_ms: off` (every step
# may take the whole max_num_batched_tokens) and `auto` (docs/serving-config.md), the same
# server config otherwise, `ferry bench serve` as the client; the summary gives ITL p50/p99,
# their ratio, TTFT and output throughput per mode (medians over the rounds) and auto / off.
#
# usage: bench/step_budget_bench.sh FERRY OUT_DIR [MODEL]
#   MODEL: an engine file or checkpoint; default: a random-weight llama-3.2-1b-shape checkpoint
#   made in OUT_DIR/scratch and built to PRECISION (default int8-wo) there.
#   SLOTS=8 CLIENTS=16 BUDGET=512 INPUT=128 OUTPUT=64 PROMPTS=48 ROUNDS=2 THREADS=(nproc)
#   MODES="off auto": max_step_ms values; "auto@F" sets batching.max_step_factor F with auto
# Run from the repository root. Client and server share the machine's cores.
set -euo pipefail
ferry=$(realpath "$1")
out=$(realpath -m "$2")
model=${3:-}
slots=${SLOTS:-8}; clients=${CLIENTS:-16}; budget=${BUDGET:-512}
input=${INPUT:-128}; output=${OUTPUT:-64}; prompts=${PROMPTS:-48}; rounds=${ROUNDS:-2}
threads=${THREADS:-$(nproc)}
modes=${MODES:-off auto}
port=${PORT:-8397}
url="http://127.0.0.1:$port"
mkdir -p "$out"
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

if [ -z "$model" ]; then
  scratch="$out/scratch"; mkdir -p "$scratch"
  precision=${PRECISION:-int8-wo}
  if [ ! -f "$scratch/llama-1b/config.json" ]; then
    log "making a llama-3.2-1b-shape checkpoint"
    "$ferry" make-checkpoint --preset llama-3.2-1b --dtype bf16 -o "$scratch/llama-1b" >/dev/null
  fi
  model="$scratch/llama-1b-$precision.ferry"
  if [ ! -f "$model" ]; then
    log "building the $precision engine"
    t0=$(date +%s)
    "$ferry" build --model "$scratch/llama-1b" --precision "$precision" -o "$model.tmp" >"$out/build.log" 2>&1
    mv "$model.tmp" "$model"
    log "built in $(( $(date +%s) - t0 )) s"
  fi
fi
model=$(realpath "$model")

server_pid=
stop_server() { [ -n "$server_pid" ] && { kill -TERM "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null || true; }; server_pid=; }
trap stop_server EXIT
start_server() {  # mode: off | auto | N | auto@F
  local ms=${1%@*} factor=2.5
  [[ $1 == *@* ]] && factor=${1#*@}
  cat >"$out/$1.yaml" <<YAML
listener: {host: 127.0.0.1, port: $port}
auth: {mode: none}
models:
  - name: m
    path: $model
    threads: $threads
    batching: {max_num_seqs: $slots, max_num_batched_tokens: $budget, max_step_ms: $ms, max_step_factor: $factor, max_queue_requests: 4096, max_queue_tokens: 4194304, max_queue_time_ms: 0}
log: {level: warn, request_log: false}
YAML
  "$ferry" serve --config "$out/$1.yaml" --no-request-log >"$out/server-$1.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 6000); do
    curl -sf "$url/health/ready" >/dev/null 2>&1 && return 0
    kill -0 "$server_pid" 2>/dev/null || { cat "$out/server-$1.log"; return 1; }
    sleep 0.1
  done
  return 1
}

for round in $(seq 1 "$rounds"); do
  for mode in $modes; do
    log "round $round: max_step_ms $mode"
    start_server "$mode"
    "$ferry" bench serve --url "$url" --model m --num-prompts "$prompts" --max-concurrency "$clients" \
      --input-len "$input" --output-len "$output" --seed "$round" --warmup 2 --no-progress \
      --label "$mode-$round" --json "$out/$mode-$round.json" >"$out/$mode-$round.txt"
    curl -s "$url/metrics" | grep -E '^ferry:(step_token_budget|iteration_tokens_total_(sum|count)|engine_step_seconds_(sum|count))' \
      >"$out/$mode-$round.metrics" || true
    stop_server
  done
done

python3 - "$out" "$rounds" $modes <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for mode in sys.argv[3:]:
    runs = [json.load(open(f"{out}/{mode}-{r}.json")) for r in range(1, rounds + 1)]
    med = lambda f: statistics.median(f(j) for j in runs)
    rows[mode] = {
        "itl_p50": med(lambda j: j["itl_ms"]["p50"]), "itl_p99": med(lambda j: j["itl_ms"]["p99"]),
        "ttft_p50": med(lambda j: j["ttft_ms"]["p50"]), "ttft_p99": med(lambda j: j["ttft_ms"]["p99"]),
        "tpot_p50": med(lambda j: j["tpot_ms"]["p50"]), "out_tok_s": med(lambda j: j["output_throughput"]),
        "failed": sum(j["failed"] for j in runs)}
    rows[mode]["itl_ratio"] = rows[mode]["itl_p99"] / max(rows[mode]["itl_p50"], 1e-9)
print(f"{'max_step_ms':<12}{'ITL p50':>10}{'ITL p99':>10}{'p99/p50':>9}{'TTFT p50':>10}{'TTFT p99':>10}{'TPOT p50':>10}{'out tok/s':>11}{'failed':>8}")
for mode, r in rows.items():
    print(f"{mode:<12}{r['itl_p50']:>10.0f}{r['itl_p99']:>10.0f}{r['itl_ratio']:>9.2f}{r['ttft_p50']:>10.0f}"
          f"{r['ttft_p99']:>10.0f}{r['tpot_p50']:>10.0f}{r['out_tok_s']:>11.2f}{r['failed']:>8}")
o = rows.get("off")
for mode, a in rows.items():
    if o is None or mode == "off":
        continue
    print(f"{mode} / off: ITL p99 {a['itl_p99'] / o['itl_p99']:.2f}x, throughput {a['out_tok_s'] / o['out_tok_s']:.3f}x, "
          f"TTFT p50 {a['ttft_p50'] / o['ttft_p50']:.2f}x (medians of {rounds} rounds; ms)")
json.dump(rows, open(f"{out}/summary.json", "w"), indent=1)
PY
