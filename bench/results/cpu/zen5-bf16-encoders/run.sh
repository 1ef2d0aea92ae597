#!/usr/bin/env bash
# bf16 engines with bf16 activations on the CPU, the binary before and after, alternating:
#   run.sh BEFORE AFTER OUT [GGUF_1B_BF16]
# 1. bench/ort_encoder_bench.sh with FERRY_BASELINE=BEFORE (every engine built by each binary,
#    ONNX Runtime's fp32 and int8 graphs, the bf16 engine with --cpu-activations bf16), 3 rounds.
# 2. The bert-base bf16 engine at 32 x 128 with bf16 activations, the binaries alternating.
# 3. The 1B BF16 GGUF file's prefill of 512 tokens with bf16 activations, alternating.
set -euo pipefail
before=$(realpath "$1"); after=$(realpath "$2"); out=$(realpath -m "$3"); gguf=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
ROUNDS=3 FERRY_BASELINE="$before" "$here/../../../ort_encoder_bench.sh" "$after" "$out/ort"
for r in 1 2 3; do
  for b in "$before" "$after"; do
    "$b" bench model --model "$out/ort/bert-bf16.ferry" --threads 2 --encoder-batch 32 --encoder-seq-len 128 \
      --repeats 5 --cpu-activations bf16 | tail -1 | sed "s|^|r$r $b: |"
  done
done | tee "$out/engine_ab.txt"
if [[ -n $gguf ]]; then
  for r in 1 2 3; do
    for b in "$before" "$after"; do
      "$b" bench model --model "$gguf" --threads 2 --prompt-len 512 --batch 1 --decode-steps 1 --repeats 3 \
        --cpu-activations bf16 | tail -1 | sed "s|^|r$r $b: |"
    done
  done | tee "$out/prefill_1b_ab.txt"
fi
