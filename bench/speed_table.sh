#!/usr/bin/env bash
# Speed of every CPU precision variant, as a ratio to fp32 measured in the same run:
# llama-3.2-1b shape (prefill 512 tokens, decode batch 1 and 8) and bert-base shape
# (32 sequences x 128 tokens). Random-weight checkpoints are made with ferry make-checkpoint.
#
#   bench/speed_table.sh [build/release/ferry] [work dir] [threads]
set -euo pipefail
ferry=${1:-build/release/ferry}
work=${2:-/tmp/ferry-speed}
threads=${3:-2}
mkdir -p "$work"
precisions="fp32 bf16 fp16 int8-wo int8"
[[ -f $work/llama-1b/config.json ]] || "$ferry" make-checkpoint --preset llama-3.2-1b --dtype bf16 -o "$work/llama-1b" >/dev/null
[[ -f $work/bert-base/config.json ]] || "$ferry" make-checkpoint --preset bert-base --dtype fp32 -o "$work/bert-base" >/dev/null

echo "| model | precision | prefill tok/s (512) | × fp32 | decode tok/s b1 | × fp32 | decode tok/s b8 | × fp32 | encoder seq/s (32×128) | × fp32 |"
echo "|---|---|---|---|---|---|---|---|---|---|"
declare -A base
for p in $precisions; do
  engine=$work/llama-1b-$p.ferry
  "$ferry" build --model "$work/llama-1b" --precision "$p" -o "$engine" >/dev/null
  out=$("$ferry" bench model --model "$engine" --threads "$threads" --decode-steps 16 --repeats 2 --json)
  read -r pre b1 b8 < <(echo "$out" | python3 -c "
import json,sys; r=json.load(sys.stdin)[0]; d={x['batch']:x['tokens_per_s'] for x in r['decode']}
print(r['prefill_tokens_per_s'], d[1], d[8])")
  rm -f "$engine"
  [[ -n ${base[pre]:-} ]] || { base[pre]=$pre; base[b1]=$b1; base[b8]=$b8; }
  printf "| llama-3.2-1b | %s | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | | |\n" "$p" "$pre" \
    "$(python3 -c "print($pre/${base[pre]})")" "$b1" "$(python3 -c "print($b1/${base[b1]})")" \
    "$b8" "$(python3 -c "print($b8/${base[b8]})")"
done
for p in $precisions; do
  engine=$work/bert-base-$p.ferry
  "$ferry" build --model "$work/bert-base" --precision "$p" -o "$engine" >/dev/null
  sps=$("$ferry" bench model --model "$engine" --threads "$threads" --repeats 2 --json | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['sequences_per_s'])")
  rm -f "$engine"
  [[ -n ${base[enc]:-} ]] || base[enc]=$sps
  printf "| bert-base | %s | | | | | | | %.1f | %.2f |\n" "$p" "$sps" "$(python3 -c "print($sps/${base[enc]})")"
done
