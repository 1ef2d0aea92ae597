#!/usr/bin/env bash
# Structured outputs, in one run per model (`ferry bench structured`): grammar compile time
# for a 50-property JSON schema, and the decode step at batch 64 with every row under a
# JSON-schema grammar against the same batch unconstrained (interleaved runs; the first
# constrained run finds every grammar state's mask for the first time, later runs reuse
# them with new prompts). Results go to OUT_DIR/structured.jsonl, one JSON line per model.
#
# Models: "kjv" (the demo decoder, 4096 ids) and "1b" (a random-weight bf16 checkpoint of the
# llama-3.2-1b shape, 128256 ids; made here with `ferry make-checkpoint`). The 1b checkpoint
# gets the tokenizer of TOKENIZER_DIR; ids beyond it are synthesized as pairs of its tokens
# (the JSON says so), so the token trie has the 128k size.
#
# usage: bench/structured_bench.sh FERRY OUT_DIR [SCRATCH_DIR]
#   DEVICE=cpu|cuda (default cpu)  MODELS="kjv 1b"  BATCH=64
#   STEPS_KJV=32 STEPS_1B=32 REPEATS=3 (on a 2-core CPU: STEPS_1B=8 REPEATS=1)
#   TOKENIZER_DIR (default: ../shared/fixtures/tokenizers/gpt2 beside the checkout, else the demo's)
#
# On the H200 (a CUDA build, under 9 minutes):
#   DEVICE=cuda bench/structured_bench.sh build/cuda/ferry OUT_DIR /tmp/ferry-structured-bench
set -euo pipefail
ferry=$1
out=$2
scratch=${3:-/tmp/ferry-structured-bench}
device=${DEVICE:-cpu}
models=${MODELS:-kjv 1b}
batch=${BATCH:-64}
repeats=${REPEATS:-3}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
tokenizer=${TOKENIZER_DIR:-$src/../shared/fixtures/tokenizers/gpt2}
[[ -f $tokenizer/tokenizer.json ]] || tokenizer=$src/models/demo/kjv-decoder
mkdir -p "$out" "$scratch"
for m in $models; do
  case $m in
    kjv) model=$src/models/demo/kjv-decoder; steps=${STEPS_KJV:-32} ;;
    1b)
      model=$scratch/llama-3.2-1b
      steps=${STEPS_1B:-32}
      if [[ ! -f $model/config.json ]]; then
        echo "making a random-weight llama-3.2-1b checkpoint with the tokenizer of $tokenizer"
        "$ferry" make-checkpoint --preset llama-3.2-1b --dtype bf16 --tokenizer "$tokenizer" -o "$model" >/dev/null
      fi
      ;;
    *) echo "unknown model $m"; exit 1 ;;
  esac
  echo "== $m on $device: batch $batch, $steps decode steps, $repeats repeats"
  "$ferry" bench structured --model "$model" --device "$device" --batch "$batch" --decode-steps "$steps" \
    --repeats "$repeats" --json | python3 -c "
import json, sys
r = json.loads(sys.stdin.read()); r['name'] = '$m'
print(json.dumps(r))
print('  compile (50 properties): %.2f ms; matcher + first mask: %.2f ms' % (r['compile_50_properties_ms'], r['matcher_first_mask_ms']), file=sys.stderr)
print('  step: unconstrained %.2f ms, constrained %.2f ms (cold %.2f ms): overhead %+.1f%%, grammar %.3f ms/step = %.1f%% of the step' % (
    r['unconstrained_step_ms'], r['constrained_step_ms'], r['constrained_cold_step_ms'], 100 * r['overhead'],
    r['grammar_ms_per_step'], 100 * r['grammar_share']), file=sys.stderr)
" | tee -a "$out/structured.jsonl"
done
