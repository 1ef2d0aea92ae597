#!/usr/bin/env bash
# Quality of every CPU precision variant against fp32, on the fixture and demo models.
# Prints a Markdown table (docs/performance.md carries the last one).
#
#   bench/quality_table.sh [build/release/ferry] [work dir]
#
# Needs the held-out data: python3 tools/train_demo/corpus.py --skip-spm
set -euo pipefail
ferry=${1:-build/release/ferry}
work=${2:-/tmp/ferry-quality}
root=$(cd "$(dirname "$0")/.." && pwd)
data=$root/tools/train_demo/data
fixtures=$root/../shared/fixtures/models
mkdir -p "$work"
precisions="fp32 bf16 fp16 int8-wo int8"
[[ -f $data/heldout_chapters.jsonl ]] || { echo "missing $data (run tools/train_demo/corpus.py --skip-spm)" >&2; exit 1; }

field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }
build() { "$ferry" build --model "$1" --precision "$2" -o "$3" >/dev/null; }

echo "| model | precision | max abs logit err (rel) | mean abs logit err | greedy agreement (teacher-forced, 64 tok) | mean common prefix / 64 | perplexity | Δ ppl vs fp32 | accuracy | Δ acc (points) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for model in llama-tiny llama3-tiny qwen2-tiny; do
  build "$fixtures/$model" fp32 "$work/$model-fp32.ferry"
  for p in $precisions; do
    build "$fixtures/$model" "$p" "$work/$model-$p.ferry"
    c=$("$ferry" eval compare --model "$work/$model-$p.ferry" --reference "$work/$model-fp32.ferry" --random-prompts 8 --prompt-tokens 16 --steps 64)
    printf "| %s | %s | %.4f (%.4f) | %.5f | %.3f | %.1f | | | | |\n" "$model" "$p" \
      "$(echo "$c" | field max_abs_error)" "$(echo "$c" | field max_abs_error_rel)" "$(echo "$c" | field mean_abs_error)" \
      "$(echo "$c" | field teacher_forced_agreement)" "$(echo "$c" | field mean_prefix_match)"
  done
done
dec=$root/models/demo/kjv-decoder
base_ppl=""
for p in $precisions; do
  build "$dec" "$p" "$work/kjv-decoder-$p.ferry"
  c=$("$ferry" eval compare --model "$work/kjv-decoder-$p.ferry" --reference "$work/kjv-decoder-fp32.ferry" --data "$data/heldout_chapters.jsonl" --limit 16 --prompt-tokens 32 --steps 64)
  ppl=$("$ferry" eval perplexity --model "$work/kjv-decoder-$p.ferry" --data "$data/heldout_chapters.jsonl" | field perplexity)
  [[ -n $base_ppl ]] || base_ppl=$ppl
  printf "| kjv-decoder | %s | %.4f (%.4f) | %.5f | %.3f | %.1f | %.3f | %+.2f %% | | |\n" "$p" \
    "$(echo "$c" | field max_abs_error)" "$(echo "$c" | field max_abs_error_rel)" "$(echo "$c" | field mean_abs_error)" \
    "$(echo "$c" | field teacher_forced_agreement)" "$(echo "$c" | field mean_prefix_match)" "$ppl" \
    "$(python3 -c "print(($ppl/$base_ppl-1)*100)")"
done
cls=$root/models/demo/kjv-classifier
base_acc=""
for p in $precisions; do
  build "$cls" "$p" "$work/kjv-classifier-$p.ferry"
  acc=$("$ferry" eval classify --model "$work/kjv-classifier-$p.ferry" --data "$data/heldout_passages.jsonl" | field accuracy)
  [[ -n $base_acc ]] || base_acc=$acc
  printf "| kjv-classifier | %s | | | | | | | %.2f %% | %+.2f |\n" "$p" "$(python3 -c "print($acc*100)")" \
    "$(python3 -c "print(($acc-$base_acc)*100)")"
done
