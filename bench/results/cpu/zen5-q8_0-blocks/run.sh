#!/usr/bin/env bash
# A Q8_0 GGUF file run as it is on the CPU: ferry with the int8 blocks (FERRY) against the
# binary before them (FERRY_BASE, which expands Q8_0 to f32 at load), the int8-wo engine built
# from the same file, and llama.cpp's Q8_0 (llama-bench: prefill of 512, 32 tokens generated);
# the runners alternating, two rounds. ferry: `bench model --prompt-len 512 --batch 1
# --decode-steps 32 --decode-context 16`, medians of 3, as bench/gguf_llamacpp_bench.sh; and the
# resident set after loading (`/usr/bin/time -f %M` of `ferry bench model` on one short run).
#   [ROUNDS="1 2"] [RSS=1] run.sh FERRY FERRY_BASE LLAMA_BENCH Q8_0_GGUF INT8WO_ENGINE
set -euo pipefail
ferry=$1 base=$2 llama=$3 gguf=$4 engine=$5
bench() {
  "$1" bench model --model "$2" --threads 2 --prompt-len 512 --batch 1 --decode-steps 32 --decode-context 16 \
    --repeats 3 | tail -2
}
for r in ${ROUNDS:-1 2}; do
  "$llama" -m "$gguf" -t 2 -p 512 -n 32 -r 3 -o jsonl | sed "s/^/r$r llama.cpp q8_0: /"
  bench "$ferry" "$gguf" | sed "s/^/r$r ferry q8_0 file, int8 blocks: /"
  bench "$base" "$gguf" | sed "s/^/r$r ferry-base q8_0 file, expanded to f32: /"
  bench "$ferry" "$engine" | sed "s/^/r$r ferry int8-wo engine from the file: /"
done
[[ ${RSS:-1} == 1 ]] && for runner in "$ferry" "$base"; do
  /usr/bin/time -f "max RSS %M KB" "$runner" bench model --model "$gguf" --threads 2 --prompt-len 16 --batch 1 \
    --decode-steps 4 --repeats 1 2>&1 | tail -1 | sed "s|^|$(basename "$runner") q8_0 file: |"
done
