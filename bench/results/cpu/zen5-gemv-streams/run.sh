#!/usr/bin/env bash
# Batch-1 decode with the AVX-512 GEMV reading one panel a tile (BEFORE) and two (AFTER),
# against llama.cpp, on the 1B files of bench/gguf_llamacpp_bench.sh: F32, F16 and BF16 as
# they are, and Q8_0 as ferry's int8-wo and int8 (W8A8) engines. ROUNDS rounds, the three
# tools interleaved within each file; each measurement is the median of 3 runs.
# usage: run.sh FERRY_BEFORE FERRY_AFTER LLAMA_BENCH GEMM_BENCH SCRATCH OUT
set -euo pipefail
before=$1; after=$2; llama=$3; gemm_bench=$4; scratch=$5; out=$6
mkdir -p "$out"
tag() { python3 -c "import json,sys; r=json.load(sys.stdin); r=r[0] if isinstance(r,list) else r; r.update(json.loads(sys.argv[1])); print(json.dumps(r))" "$1"; }
ferry_decode() {  # binary label model round file
  timeout 600 "$1" bench model --model "$3" --threads 2 --prompt-len 16 --batch 1 --decode-steps 64 \
      --decode-context 16 --repeats 3 --json | tag "{\"round\": $4, \"file\": \"$5\", \"binary\": \"$2\"}" >> "$out/ferry.jsonl"
}
for round in $(seq 1 "${ROUNDS:-3}"); do
  "$gemm_bench" --threads=2 --benchmark_filter='BM_MemoryRead' --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null |
    grep median | sed "s/^/round $round /" >> "$out/memory_read.txt"
  for f in bf16 f16 f32 q8_0; do
    model=$scratch/bench-1b-$f.gguf
    echo "round $round: $f" >&2
    timeout 600 "$llama" -m "$model" -t 2 -p 0 -n 64 -r 3 -o jsonl |
      python3 -c "import json,sys
for l in sys.stdin:
  r=json.loads(l); r.update(round=$round, file='$f'); print(json.dumps(r))" >> "$out/llamacpp.jsonl"
    if [[ $f == q8_0 ]]; then
      for prec in int8-wo int8; do
        ferry_decode "$before" before "$scratch/bench-1b-q8_0-$prec.ferry" "$round" "q8_0 $prec engine"
        ferry_decode "$after" after "$scratch/bench-1b-q8_0-$prec.ferry" "$round" "q8_0 $prec engine"
      done
    else
      ferry_decode "$before" before "$model" "$round" "$f"
      ferry_decode "$after" after "$model" "$round" "$f"
    fi
  done
done
