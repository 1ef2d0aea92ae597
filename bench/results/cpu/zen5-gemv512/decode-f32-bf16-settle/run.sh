#!/usr/bin/env bash
# Batch-1 decode: ferry (AVX-512 GEMV) vs llama.cpp on the F32 and BF16 files, with the memory
# read rate measured before each round; ROUNDS rounds, interleaved.
set -euo pipefail
ferry=$1; llama=$2; gemm_bench=$3; scratch=$4; out=$5
mkdir -p "$out"
for round in $(seq 1 "${ROUNDS:-3}"); do
  "$gemm_bench" --threads=2 --benchmark_filter='BM_MemoryRead' --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null |
    grep median | sed "s/^/round $round /" >> "$out/memory_read.txt"
  for f in f32 bf16; do
    model=$scratch/bench-1b-$f.gguf
    echo "round $round: ferry $f" >&2
    timeout 600 "$ferry" bench model --model "$model" --threads 2 --prompt-len 16 --batch 1 --decode-steps 64 \
        --decode-context 16 --repeats 3 --json |
      python3 -c "import json,sys; r=json.load(sys.stdin); r=r[0] if isinstance(r,list) else r; r.update(round=$round, file='$f'); print(json.dumps(r))" >> "$out/ferry.jsonl"
    echo "round $round: llama.cpp $f" >&2
    timeout 600 "$llama" -m "$model" -t 2 -p 0 -n 64 -r 3 -o jsonl |
      python3 -c "import json,sys
for l in sys.stdin:
  r=json.loads(l); r.update(round=$round, file='$f'); print(json.dumps(r))" >> "$out/llamacpp.jsonl"
  done
done
