#!/usr/bin/env bash
# The CPU goals against this CPU's own ceilings, in one run: per round, the f32 FMA peak and
# the two AVX-512 dot-product peaks (gemm_bench BM_FmaPeak / BM_DotPeak) and the plain memory
# read, then the prefill of 512 tokens on the 1B F32 and F16 files by llama.cpp and by ferry
# (each as it is in the file), and the 1B W8A8 engine's prefill by two ferry binaries
# (before / after a kernel change), the tools interleaved; each measurement the median of 3.
# usage: run.sh FERRY FERRY_BEFORE LLAMA_BENCH GEMM_BENCH GGUF_DIR OUT
set -euo pipefail
ferry=$1; before=$2; llama=$3; gemm_bench=$4; gg=$5; out=$6
mkdir -p "$out"
tag() { python3 -c "import json,sys; r=json.load(sys.stdin); r=r[0] if isinstance(r,list) else r; r.update(json.loads(sys.argv[1])); print(json.dumps(r))" "$1"; }
prefill() {  # prefill BINARY MODEL TAGS
  timeout 900 "$1" bench model --model "$2" --threads 2 --prompt-len 512 --batch 1 --decode-steps 8 \
      --decode-context 16 --repeats 3 --json | tag "$3" >> "$out/ferry.jsonl"
}
for round in $(seq 1 "${ROUNDS:-3}"); do
  "$gemm_bench" --threads=2 --benchmark_filter='BM_MemoryRead|BM_FmaPeak/avx512|BM_DotPeak' --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true 2>/dev/null | grep median | sed "s/^/round $round /" >> "$out/peaks.txt"
  for type in f32 f16; do
    echo "round $round: llama.cpp $type" >&2
    timeout 900 "$llama" -m "$gg/bench-1b-$type.gguf" -t 2 -p 512 -n 0 -r 3 -o jsonl |
      python3 -c "import json,sys
for l in sys.stdin:
  r=json.loads(l); r.update(round=$round, file='$type'); print(json.dumps(r))" >> "$out/llamacpp.jsonl"
    echo "round $round: ferry $type" >&2
    prefill "$ferry" "$gg/bench-1b-$type.gguf" "{\"round\": $round, \"file\": \"$type\", \"binary\": \"after\"}"
  done
  for bin in before after; do
    echo "round $round: ferry W8A8 engine, $bin" >&2
    b=$ferry; [[ $bin == before ]] && b=$before
    prefill "$b" "$gg/bench-1b-q8_0-int8.ferry" "{\"round\": $round, \"file\": \"q8_0-int8\", \"binary\": \"$bin\"}"
  done
done
