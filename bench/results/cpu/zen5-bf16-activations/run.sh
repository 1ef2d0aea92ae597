#!/usr/bin/env bash
# Prefill of 512 tokens on the 1B BF16 file: ferry with f32 activations (the default) and with
# --cpu-activations bf16 (vdpbf16ps), against llama.cpp's BF16 path, ROUNDS rounds, the tools
# interleaved; each measurement the median of 3 runs. Also the bf16 weights' GEMMs alone
# (gemm_bench, M = 512) in each round.
# usage: run.sh FERRY LLAMA_BENCH GEMM_BENCH BF16_GGUF OUT
set -euo pipefail
ferry=$1; llama=$2; gemm_bench=$3; model=$4; out=$5
mkdir -p "$out"
tag() { python3 -c "import json,sys; r=json.load(sys.stdin); r=r[0] if isinstance(r,list) else r; r.update(json.loads(sys.argv[1])); print(json.dumps(r))" "$1"; }
for round in $(seq 1 "${ROUNDS:-3}"); do
  "$gemm_bench" --threads=2 --benchmark_filter='BM_FmaPeak/avx512|BM_Ferry_(bf16|bf16act)/M:512/' --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true 2>/dev/null | grep median | sed "s/^/round $round /" >> "$out/gemm_bench.txt"
  echo "round $round: llama.cpp" >&2
  timeout 600 "$llama" -m "$model" -t 2 -p 512 -n 0 -r 3 -o jsonl |
    python3 -c "import json,sys
for l in sys.stdin:
  r=json.loads(l); r.update(round=$round); print(json.dumps(r))" >> "$out/llamacpp.jsonl"
  for act in f32 bf16; do
    echo "round $round: ferry $act" >&2
    timeout 600 "$ferry" bench model --model "$model" --threads 2 --prompt-len 512 --batch 1 --decode-steps 8 \
        --decode-context 16 --repeats 3 --cpu-activations "$act" --json |
      tag "{\"round\": $round, \"cpu_activations\": \"$act\"}" >> "$out/ferry.jsonl"
  done
done
