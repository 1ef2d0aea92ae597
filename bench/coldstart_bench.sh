#!/usr/bin/env bash
# Cold start, every phase, in one call: random-weight bf16 checkpoints of real shapes, an
# engine file built from each, then `ferry bench coldstart` (a fresh process per
# measurement; start -> ready split into load, allocate and each warm-up pass; the first
# request against the median of the next ones) with the full and the minimal warm-up,
# warm page cache, and with --drop-caches when the machine allows it (root).
#
# usage: bench/coldstart_bench.sh FERRY OUT_DIR [SCRATCH_DIR]
#   DEVICE=cpu|cuda (default cpu)   MODELS="1b bert" (cpu default) or "8b" (cuda default);
#   "demo" is the bundled demo decoder (seconds: a check that the script and its report work)
#   REPEAT=3  REQUESTS=50  WARMUPS="full minimal"  DROP=1 (also the dropped page cache)
#
# On the H200 (about 6 minutes: making the 16 GB 8b checkpoint and its engine dominate):
#   DEVICE=cuda MODELS=8b REPEAT=1 bench/coldstart_bench.sh build/cuda/ferry /tmp/out /tmp/scratch
# On the 2-core CPU machine:
#   bench/coldstart_bench.sh build/release/ferry /tmp/out /tmp/scratch
set -euo pipefail
ferry=$1
out=$2
scratch=${3:-/tmp/ferry-coldstart}
device=${DEVICE:-cpu}
if [[ $device == cpu ]]; then models=${MODELS:-1b bert}; else models=${MODELS:-8b}; fi
repeat=${REPEAT:-3}
requests=${REQUESTS:-50}
warmups=${WARMUPS:-full minimal}
mkdir -p "$out" "$scratch"

args=()
repo=$(cd "$(dirname "$0")/.." && pwd)
for m in $models; do
  if [[ $m == demo ]]; then
    ckpt=$repo/models/demo/kjv-decoder
    engine=$scratch/kjv-decoder-$device.ferry
    echo "== demo: engine file ($device)" >&2
    [[ -f $engine ]] || "$ferry" build --model "$ckpt" --device "$device" --precision bf16 -o "$engine" >/dev/null
    args+=(--model "$ckpt" --model "$engine")
    continue
  fi
  case $m in
    1b) preset=llama-3.2-1b ;;
    8b) preset=llama-3-8b ;;
    bert) preset=bert-base ;;
    *) echo "unknown model $m" >&2; exit 2 ;;
  esac
  ckpt=$scratch/$preset-bf16
  engine=$scratch/$preset-bf16-$device.ferry
  echo "== $preset: checkpoint" >&2
  [[ -f $ckpt/config.json ]] || "$ferry" make-checkpoint --preset "$preset" --dtype bf16 -o "$ckpt" >/dev/null
  echo "== $preset: engine file ($device)" >&2
  [[ -f $engine ]] || "$ferry" build --model "$ckpt" --device "$device" --precision bf16 -o "$engine" >/dev/null
  args+=(--model "$ckpt" --model "$engine")
  # A file just written by `ferry build` or make-checkpoint need not be in the page cache
  # (the kernel may have written it back and dropped it): read both once, so that the first
  # cache=warm row is measured warm.
  cat "$engine" "$ckpt"/* >/dev/null
done
for w in $warmups; do args+=(--warmup "$w"); done
[[ ${DROP:-0} == 1 ]] && args+=(--drop-caches)
echo "== ferry bench coldstart ${args[*]}" >&2
"$ferry" bench coldstart --device "$device" --repeat "$repeat" --requests "$requests" --max-num-seqs 16 "${args[@]}" \
  2> >(tee "$out/coldstart-$device.txt" >&2) > "$out/coldstart-$device.json"
echo "== results: $out/coldstart-$device.txt and .json (each row's 'load ... GB/s' line: the load's phases and rates)" >&2
