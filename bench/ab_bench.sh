#!/usr/bin/env bash
# Before/after: the same measurements with two ferry binaries, back to back in one run, in
# the order A B A B so that drift shows up as a difference between the two rounds of one
# binary. Random-weight llama-3.2-1b-shape bf16 checkpoint (ferry make-checkpoint).
#
#   cpu: `ferry bench model` (prefill 512, decode batch 1 and 8, 2 threads)
#   gpu: `ferry bench model --device cuda` (decode batch 1 and 64 at 512 context), then
#        `ferry serve` + `ferry bench serve`: closed loop of 256 clients, 128 prompt tokens
#        and 128 output tokens each
#
# usage: bench/ab_bench.sh cpu|gpu FERRY_A FERRY_B OUT_DIR [SCRATCH_DIR]
#   ROUNDS=2 (rounds of A B), SERVE_PROMPTS=2048, SERVE_CONCURRENCY=256
# Results: OUT_DIR/results.jsonl (one line per measurement, with "binary" and "round").
set -euo pipefail
mode=$1
bins=("$(realpath "$2")" "$(realpath "$3")")
out=$(realpath -m "$4")
scratch=${5:-/tmp/ferry-ab}
rounds=${ROUNDS:-2}
mkdir -p "$out" "$scratch"
ckpt=$scratch/llama-1b-bf16
step() { echo "[$(date +%T)] $*" >&2; }

# Adds the JSON object $1 to every result of `ferry bench model --json` on stdin.
tag() {
  python3 -c "
import json, sys
extra = json.loads(sys.argv[1])
for r in json.load(sys.stdin):
    r.update(extra)
    print(json.dumps(r))" "$1"
}

[[ -f $ckpt/config.json ]] || { step "making the checkpoint"; "${bins[1]}" make-checkpoint --preset llama-3.2-1b --dtype bf16 -o "$ckpt" >/dev/null; }

port=8397
serve_round() {  # binary label round
  local ferry=$1 label=$2 round=$3
  cat >"$scratch/serve.yaml" <<EOF
listener: {host: 127.0.0.1, port: $port}
auth: {mode: none}
models:
  - name: m
    path: $ckpt
    device: cuda
    batching: {max_num_seqs: 256, max_num_batched_tokens: 8192, max_seq_len: 1024, max_queue_requests: 8192, max_queue_tokens: 8388608}
log: {level: warn, request_log: false}
EOF
  "$ferry" serve --config "$scratch/serve.yaml" >"$out/server-$label-$round.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 1800); do
    curl -sf "http://127.0.0.1:$port/health/ready" >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || { cat "$out/server-$label-$round.log"; return 1; }
    sleep 0.1
  done
  "$ferry" bench serve --url "http://127.0.0.1:$port" --model m --num-prompts "${SERVE_PROMPTS:-2048}" \
    --max-concurrency "${SERVE_CONCURRENCY:-256}" --input-len 128 --output-len 128 --warmup 256 --no-progress \
    --label "$label-$round" --json "$out/serve-$label-$round.json" >"$out/serve-$label-$round.txt"
  kill -TERM $pid
  wait $pid || true
  python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
keep = ['completed', 'failed', 'duration_s', 'output_throughput', 'ttft_ms', 'tpot_ms', 'itl_ms', 'e2e_ms']
print(json.dumps({'kind': 'serve', 'binary': sys.argv[2], 'round': int(sys.argv[3]), **{k: r[k] for k in keep}}))" \
    "$out/serve-$label-$round.json" "$label" "$round" >>"$out/results.jsonl"
}

for round in $(seq 1 "$rounds"); do
  for i in 0 1; do
    label=$([[ $i == 0 ]] && echo A || echo B)
    ferry=${bins[$i]}
    if [[ $mode == cpu ]]; then
      step "round $round, $label: bench model (cpu)"
      "$ferry" bench model --model "$ckpt" --threads 2 --prompt-len 512 --batch 1,8 --decode-steps 16 --repeats 2 --json \
        | tag "{\"kind\": \"model\", \"binary\": \"$label\", \"round\": $round}" >>"$out/results.jsonl"
    else
      step "round $round, $label: bench model (cuda)"
      "$ferry" bench model --model "$ckpt" --device cuda --threads 1 --prompt-len 512 --batch 1,64 --decode-context 512 \
        --decode-steps 32 --repeats 5 --json \
        | tag "{\"kind\": \"model\", \"binary\": \"$label\", \"round\": $round}" >>"$out/results.jsonl"
      step "round $round, $label: bench serve (cuda)"
      serve_round "$ferry" "$label" "$round"
    fi
  done
done
step "done"
cat "$out/results.jsonl"
