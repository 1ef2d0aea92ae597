#!/usr/bin/env bash
# Engine builds: wall time and peak memory of `ferry build` for every precision of a
# llama-3.2-1b-shape checkpoint (or any checkpoint given) on the CPU or a GPU, and what the
# int8 calibration budget buys in quality.
#
# 1. Builds: each precision built ROUNDS times, interleaved with BASELINE (another ferry
#    binary, optional) when it is given; medians of the wall time (GNU time) and of the peak
#    RSS, the phase times of the last run (read from the progress bar, which `script` shows
#    as on a terminal), and new / baseline.
# 2. Calibration: the demo decoder (models/demo/kjv-decoder) built to int8 with each budget
#    in CAL_TOKENS, then `ferry eval compare` against its checkpoint on the last 10 documents
#    of data/calibration/kjv_calibration.jsonl (held out of the smaller budgets): teacher-forced
#    top-1 agreement and mean |logit error|.
#
# usage: bench/build_bench.sh FERRY OUT_DIR [CHECKPOINT]
#   CHECKPOINT: a llama-3.2-1b-shape checkpoint; default: a random-weight one made in OUT_DIR.
#   DEVICE=cpu (or cuda: GPU engines, laid out and tuned on the GPU)
#   PRECISIONS="fp32 bf16 fp16 int8-wo int8 int4-wo" (cuda: "bf16 fp8 int8 int8-wo int4-wo")
#   ROUNDS=1 BASELINE= THREADS=0 (all cores; the CPU side of a GPU build: calibration)
#   CAL_TOKENS="512 1024 2048 4096 8192 16384" (empty: skip part 2)
# Run from the repository root on an otherwise idle machine.
set -euo pipefail
ferry=$(realpath "$1")
out=$(realpath -m "$2")
ckpt=${3:-}
device=${DEVICE:-cpu}
if [ "$device" = cpu ]; then
  precisions=${PRECISIONS:-fp32 bf16 fp16 int8-wo int8 int4-wo}
else
  precisions=${PRECISIONS:-bf16 fp8 int8 int8-wo int4-wo}
fi
rounds=${ROUNDS:-1}
baseline=${BASELINE:+$(realpath "$BASELINE")}
threads=${THREADS:-0}
cal_tokens=${CAL_TOKENS-512 1024 2048 4096 8192 16384}
mkdir -p "$out"
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
# `script` gives the build a terminal, so it draws its progress bar (the phase times below);
# without it the builds run plainly and the phases column is empty.
run_tty() {  # command log
  if command -v script >/dev/null; then script -qec "$1" "$2" >/dev/null; else sh -c "$1" >"$2" 2>&1; fi
}

if [ -z "$ckpt" ]; then
  ckpt="$out/llama-1b"
  if [ ! -f "$ckpt/config.json" ]; then
    log "making a llama-3.2-1b-shape checkpoint"
    "$ferry" make-checkpoint --preset llama-3.2-1b --dtype bf16 -o "$ckpt" >/dev/null
  fi
fi
ckpt=$(realpath "$ckpt")

# One build: prints "seconds peak_kb phases" where phases is "name=seconds,..." from the
# progress bar's last line of each phase.
one_build() {  # binary precision tag
  local bin=$1 p=$2 tag=$3 engine="$out/scratch.engine"
  rm -f "$engine"
  # Wall time and the child's peak RSS (KiB), printed on the terminal after the build.
  run_tty "python3 -c 'import resource, subprocess, sys, time
t = time.time(); rc = subprocess.call(sys.argv[1:])
print(\"TIME %.2f %d\" % (time.time() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(rc)' \
    $bin build --model $ckpt --device $device --precision $p --threads $threads -o $engine" \
    "$out/build-$tag-$p.tty"
  local tm phases
  tm=$(tr '\r' '\n' <"$out/build-$tag-$p.tty" | grep -a '^TIME ' | tail -1 | awk '{print $2, $3}')
  phases=$(tr '\r' '\n' <"$out/build-$tag-$p.tty" | sed 's/\x1b\[K//g' | grep -a '^building ' |
    awk '{ph=$3; for (i=4; i<=NF && $i !~ /^[0-9.]+$/ && $i !~ /^\[/; i++) ph=ph"_"$i; t=$(NF-1);
          last[ph]=t; if (!(ph in seen)) {seen[ph]=1; order[++k]=ph}}
         END {for (i=1;i<=k;i++) printf "%s%s=%s", (i>1?",":""), order[i], last[order[i]]}')
  rm -f "$engine"
  echo "$tm ${phases:--}"
}

{
  echo "# ferry build --device $device, $(basename "$ckpt") ($(nproc) cores), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# new: $ferry${baseline:+   baseline: $baseline}   rounds: $rounds"
  printf "%-8s %-5s %8s %10s  %s\n" precision round seconds peak_MB phases
} >"$out/builds.txt"
for r in $(seq 1 "$rounds"); do
  for p in $precisions; do
    bins="new"; [ -n "$baseline" ] && { [ $((r % 2)) -eq 1 ] && bins="new base" || bins="base new"; }
    for b in $bins; do
      bin=$ferry; [ "$b" = base ] && bin=$baseline
      log "round $r: $p ($b)"
      read -r secs kb phases < <(one_build "$bin" "$p" "$b")
      printf "%-8s %-5s %8s %10s  %s\n" "$p" "$b$r" "$secs" "$((kb / 1024))" "$phases" >>"$out/builds.txt"
    done
  done
done
python3 - "$out/builds.txt" <<'PY' >>"$out/builds.txt"
import sys, statistics
rows = [l.split() for l in open(sys.argv[1]) if l.strip() and not l.startswith(('#', 'precision'))]
by = {}
for p, tag, s, mb, *_ in rows:
    kind = ''.join(c for c in tag if not c.isdigit())
    by.setdefault((p, kind), []).append((float(s), int(mb)))
print("\n# medians")
print(f"{'precision':<10}{'new s':>8}{'new MB':>9}{'base s':>9}{'base MB':>9}{'new/base':>10}")
for p in dict.fromkeys(r[0] for r in rows):
    n = by.get((p, 'new'), []); b = by.get((p, 'base'), [])
    ns = statistics.median(x[0] for x in n); nm = statistics.median(x[1] for x in n)
    if b:
        bs = statistics.median(x[0] for x in b); bm = statistics.median(x[1] for x in b)
        print(f"{p:<10}{ns:>8.1f}{nm:>9}{bs:>9.1f}{bm:>9}{ns / bs:>10.2f}")
    else:
        print(f"{p:<10}{ns:>8.1f}{nm:>9}")
PY
cat "$out/builds.txt"

[ -z "$cal_tokens" ] && exit 0
demo=models/demo/kjv-decoder
tail -10 data/calibration/kjv_calibration.jsonl >"$out/heldout.jsonl"
{
  echo "# int8 calibration budget, $demo against its checkpoint, 10 held-out documents, 256-token prompts, 32 steps"
  printf "%-8s %9s %10s %12s %14s\n" tokens documents agreement mean_abs_err build_seconds
} >"$out/calibration.txt"
for t in $cal_tokens; do
  log "calibration: $t tokens"
  "$ferry" build --model "$demo" --precision int8 --calibration-tokens "$t" --threads "$threads" \
    -o "$out/cal-$t.engine" >"$out/cal-$t.json" 2>/dev/null
  "$ferry" eval compare --model "$out/cal-$t.engine" --reference "$demo" --data "$out/heldout.jsonl" --limit 10 \
    --prompt-tokens 256 --steps 32 --threads "$threads" >"$out/cmp-$t.json" 2>/dev/null
  python3 - "$t" "$out/cal-$t.json" "$out/cmp-$t.json" <<'PY' >>"$out/calibration.txt"
import json, sys
b = json.load(open(sys.argv[2])); c = json.load(open(sys.argv[3]))
print(f"{sys.argv[1]:<8} {b['calibration']['documents']:>9} {c['teacher_forced_agreement']:>10.4f} "
      f"{c['mean_abs_error']:>12.4f} {b['seconds']:>14.1f}")
PY
  rm -f "$out/cal-$t.engine"
done
cat "$out/calibration.txt"
