#!/usr/bin/env bash
# The KV cache sized from gpu_memory_utilization, on a GPU, in one call (about 3 minutes
# once the checkpoint exists; making the 16 GB llama-3-8b-shape checkpoint adds ~2):
#   1. two models on one GPU at 0.45 each: both ready, each logs its KV blocks (weights,
#      measured activations, reserve, budget);
#   2. the same two at 0.6 each: the second is refused before it loads, naming the sizes;
#   3. one model at 0.9: vLLM's sizing (many more sequences than max_num_seqs).
#
# usage: bench/kv_budget_check.sh FERRY OUT_DIR [SCRATCH_DIR]
#   MODEL=<checkpoint or engine>   (default: SCRATCH/llama-3-8b-bf16, made if missing, the
#                                   same path bench/coldstart_bench.sh uses)
#   PORT=18431
set -euo pipefail
ferry=$1
out=$2
scratch=${3:-/tmp/ferry-coldstart}
port=${PORT:-18431}
mkdir -p "$out" "$scratch"
model=${MODEL:-$scratch/llama-3-8b-bf16}
if [[ ! -e $model/config.json && ! -f $model ]]; then
  echo "== making $model" >&2
  "$ferry" make-checkpoint --preset llama-3-8b --dtype bf16 -o "$model" >/dev/null
fi

ready() {  # waits up to $1 seconds for /health/ready; 0 when ready, 1 when the server died or timed out
  local pid=$2
  for _ in $(seq 1 "$1"); do
    kill -0 "$pid" 2>/dev/null || return 1
    if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/health/ready', timeout=1)" \
         2>/dev/null; then return 0; fi
    sleep 1
  done
  return 1
}

run() {  # name, utilization, model names...
  local name=$1 util=$2
  shift 2
  local args=()
  for m in "$@"; do args+=(--model "$m=$model"); done
  echo "== $name: ${*} at gpu_memory_utilization $util" >&2
  "$ferry" serve "${args[@]}" --device cuda --gpu-memory-utilization "$util" --port "$port" --no-auth \
    --no-request-log >"$out/$name.log" 2>&1 &
  local pid=$!
  if ready 300 $pid; then
    echo "   ready" >&2
    kill -TERM $pid
    wait $pid || true
  else
    echo "   not ready (see below)" >&2
    kill -TERM $pid 2>/dev/null || true
    wait $pid || true
  fi
  grep -E "KV blocks|does not fit|are free|staged in|error" "$out/$name.log" | sed 's/^/   /' >&2 || true
}

run two-at-0.45 0.45 a b
run two-at-0.6 0.6 a b
run one-at-0.9 0.9 a
echo "== logs: $out/*.log" >&2
