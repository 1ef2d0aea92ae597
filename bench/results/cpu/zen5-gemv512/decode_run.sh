#!/usr/bin/env bash
# Decode, ferry's AVX-512 GEMV (default) vs its AVX2 GEMV (FERRY_GEMM_KERNEL=avx2, the
# previous decode path) vs llama.cpp, on the same GGUF files, interleaved, ROUNDS rounds.
# usage: run.sh FERRY LLAMA_BENCH SCRATCH OUT
set -euo pipefail
ferry=$1; llama=$2; scratch=$3; out=$4
mkdir -p "$out"
rounds=${ROUNDS:-2}
for round in $(seq 1 "$rounds"); do
  for f in bf16 f16 f32 q8_0-int8-wo; do
    case $f in
      q8_0-int8-wo) model=$scratch/bench-1b-q8_0-int8-wo.ferry; gguf=$scratch/bench-1b-q8_0.gguf ;;
      *) model=$scratch/bench-1b-$f.gguf; gguf=$model ;;
    esac
    for kernel in avx512 avx2; do
      echo "round $round: ferry $f $kernel" >&2
      FERRY_GEMM_KERNEL=$kernel timeout 600 "$ferry" bench model --model "$model" --threads 2 --prompt-len 16 \
          --batch 1 8 --decode-steps 64 --decode-context 16 --repeats 3 --json |
        python3 -c "import json,sys; r=json.load(sys.stdin); r=r[0] if isinstance(r,list) else r; r.update(round=$round, file='$f', gemv='$kernel'); print(json.dumps(r))" >> "$out/ferry.jsonl"
    done
    echo "round $round: llama.cpp $f" >&2
    timeout 600 "$llama" -m "$gguf" -t 2 -p 0 -n 64 -r 3 -o jsonl |
      python3 -c "import json,sys
for l in sys.stdin:
  r=json.loads(l); r.update(round=$round, file='$f'); print(json.dumps(r))" >> "$out/llamacpp.jsonl"
  done
done
