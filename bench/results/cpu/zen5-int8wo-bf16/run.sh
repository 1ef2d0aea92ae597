#!/usr/bin/env bash
# int8-wo engines with bf16 activations: the 1B engine built from the Q8_0 file (prefill of 512,
# against llama.cpp's Q8_0 prefill in the same rounds) and the bert-base int8-wo engine (32 x 128),
# each with --cpu-activations f32 and bf16, alternating, two rounds.
#   run.sh FERRY LLAMA_BENCH Q8_0_GGUF INT8WO_1B_ENGINE BERT_INT8WO_ENGINE
set -euo pipefail
ferry=$1 llama=$2 gguf=$3 e1b=$4 ebert=$5
for r in 1 2; do
  "$llama" -m "$gguf" -t 2 -p 512 -n 0 -r 3 -o jsonl | sed "s/^/r$r llama.cpp q8_0: /"
  for a in f32 bf16; do
    "$ferry" bench model --model "$e1b" --threads 2 --prompt-len 512 --batch 1 --decode-steps 4 --repeats 3 \
      --cpu-activations $a | tail -1 | sed "s/^/r$r 1b int8-wo $a: /"
  done
  for a in f32 bf16; do
    "$ferry" bench model --model "$ebert" --threads 2 --encoder-batch 32 --encoder-seq-len 128 --repeats 5 \
      --cpu-activations $a | tail -1 | sed "s/^/r$r bert int8-wo $a: /"
  done
done
