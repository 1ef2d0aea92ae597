#!/usr/bin/env bash
# int4 weight-only on the GPU, against bf16 in the same run:
#   1. the linears of a llama-3-8B layer at every M (bench/cuda_gemm_bench.cc), each format
#      with its tuned GEMM choices;
#   2. llama-3-8B (random bf16 weights, `ferry make-checkpoint`) as GPU engines built in bf16
#      and in int4-wo from that checkpoint: build time, file size, then `ferry bench model`
#      (prefill of 2048 tokens, decode steps at batch 1 to 128 against 512-token contexts).
# Results go to OUT_DIR (gemm.md, gemm.json, e2e.jsonl). Each step runs under `timeout`.
#
# usage: bench/int4_bench.sh BUILD_DIR OUT_DIR [SCRATCH_DIR]
#   STEPS="gemm e2e" (default both)
set -euo pipefail
build=$1
out=$2
scratch=${3:-/tmp/ferry-int4-bench}
steps=${STEPS:-gemm e2e}
mkdir -p "$out" "$scratch"
ferry=$build/ferry

if [[ " $steps " == *" gemm "* ]]; then
  timeout 400 "$build/bench/cuda_gemm_bench" --layers=8 --json="$out/gemm.json" | tee "$out/gemm.md"
fi

if [[ " $steps " == *" e2e "* ]]; then
  ckpt=$scratch/llama-3-8b
  if [[ ! -f $ckpt/config.json ]]; then
    echo "making the llama-3-8b checkpoint"
    timeout 300 "$ferry" make-checkpoint --preset llama-3-8b --dtype bf16 -o "$ckpt" >/dev/null
  fi
  for prec in ${PRECISIONS:-bf16 int4-wo}; do
    engine=$scratch/llama-3-8b-$prec.ferry
    t0=$(date +%s.%N)
    timeout 400 "$ferry" build --model "$ckpt" --device cuda --precision "$prec" -o "$engine" >/dev/null
    t1=$(date +%s.%N)
    secs=$(python3 -c "print(round($t1 - $t0, 1))")
    bytes=$(stat -c %s "$engine")
    echo "built $prec in ${secs}s, $bytes bytes"
    timeout 300 "$ferry" bench model --model "$engine" --device cuda --prompt-len 2048 --batch 1,8,32,64,128 \
        --decode-context 512 --decode-steps 32 --repeats 5 --threads 1 --json |
      python3 -c "import json,sys; r=json.load(sys.stdin)[0]; r.update(precision='$prec', build_s=$secs, file_bytes=$bytes); print(json.dumps(r))" |
      tee -a "$out/e2e.jsonl"
    rm -f "$engine"
  done
fi
