#!/usr/bin/env bash
# Batch-1 decode with the decode kernels' panels split in equal shares up front
# (FERRY_DECODE_SPLIT=static) and claimed by the threads as they go (the default), one
# binary, against llama.cpp, on the 1B files of bench/gguf_llamacpp_bench.sh: F32, F16 and
# BF16 as they are, and Q8_0 as ferry's int8-wo and int8 (W8A8) engines. ROUNDS rounds; in
# each, per file, llama.cpp then the two splits (their order alternating by round); each
# measurement is the median of 3 runs. BM_MemoryRead at the start of every round.
# usage: run.sh FERRY LLAMA_BENCH GEMM_BENCH SCRATCH OUT
set -euo pipefail
ferry=$1; llama=$2; gemm_bench=$3; scratch=$4; out=$5
mkdir -p "$out"
tag() { python3 -c "import json,sys; r=json.load(sys.stdin); r=r[0] if isinstance(r,list) else r; r.update(json.loads(sys.argv[1])); print(json.dumps(r))" "$1"; }
ferry_decode() {  # split model round file
  FERRY_DECODE_SPLIT=$1 timeout 600 "$ferry" bench model --model "$2" --threads 2 --prompt-len 16 --batch 1 \
      --decode-steps 64 --decode-context 16 --repeats 3 --json |
    tag "{\"round\": $3, \"file\": \"$4\", \"split\": \"$1\"}" >> "$out/ferry.jsonl"
}
for round in $(seq 1 "${ROUNDS:-3}"); do
  "$gemm_bench" --threads=2 --benchmark_filter='BM_MemoryRead' --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null |
    grep median | sed "s/^/round $round /" >> "$out/memory_read.txt"
  splits="static claimed"
  ((round % 2 == 0)) && splits="claimed static"
  for f in bf16 f16 f32 q8_0; do
    model=$scratch/bench-1b-$f.gguf
    echo "round $round: $f" >&2
    timeout 600 "$llama" -m "$model" -t 2 -p 0 -n 64 -r 3 -o jsonl |
      python3 -c "import json,sys
for l in sys.stdin:
  r=json.loads(l); r.update(round=$round, file='$f'); print(json.dumps(r))" >> "$out/llamacpp.jsonl"
    for split in $splits; do
      if [[ $f == q8_0 ]]; then
        for prec in int8-wo int8; do
          ferry_decode "$split" "$scratch/bench-1b-q8_0-$prec.ferry" "$round" "q8_0 $prec engine"
        done
      else
        ferry_decode "$split" "$model" "$round" "$f"
      fi
    done
  done
done
