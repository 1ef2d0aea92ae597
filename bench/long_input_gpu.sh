#!/usr/bin/env bash
# Everything long inputs need from a GPU machine, in one call (at most 8.5 minutes: each step
# has a time limit):
#
#   1. tools/fixtures/token_classification.py: transformers' token-classification pipeline
#      outputs (every aggregation strategy, with and without stride) and tokenizer offsets,
#      for tests/fixtures/token_classification/ (CPU, float64).
#   2. bench/long_input_bench.sh gpu: 8,192-token documents, bert-base shape, 512/64 windows,
#      open-loop load at several rates; then chunked vs the same windows as plain inputs.
#   3. bench/long_input_memory.sh cuda: peak RSS and GPU memory, 1k/10k/100k-token documents.
#   4. tools/train_demo/train.py --only tagger: the kjv-tagger demo model, its references and
#      its entity F1 by transformers' pipeline; then ferry's own entity F1 of it
#      (`ferry eval tokens`, truncated and chunked at overlaps 0/16/32/64, center and hf merges).
#
# Every step has its own time limit and a failed step does not stop the later ones.
#
#   bench/long_input_gpu.sh FERRY OUT_DIR [FIXTURES]
#
# FERRY: a CUDA build of ferry. Run from the repository root, with tools/train_demo/data/
# present (made by tools/train_demo/corpus.py, which needs Debian's bible-kjv). Then copy back:
#   OUT_DIR/token_classification/  -> tests/fixtures/token_classification/
#   OUT_DIR/demo/kjv-tagger/       -> models/demo/kjv-tagger/
#   OUT_DIR/demo/reference/reference.* -> tests/fixtures/demo/
set -uo pipefail
ferry=$(realpath "$1")
out=$(realpath -m "$2")
fixtures=$(realpath "${3:-../shared/fixtures}")
mkdir -p "$out"
status=0

step() {  # name seconds command...
  local name=$1 seconds=$2 t0
  shift 2
  t0=$(date +%s)
  echo "== $name (limit ${seconds}s) =="
  if timeout --signal=TERM --kill-after=10 "$seconds" "$@"; then
    echo "== $name done in $(($(date +%s) - t0))s =="
  else
    echo "== $name FAILED (exit $?) after $(($(date +%s) - t0))s =="
    status=1
  fi
}

step "token-classification fixtures" 45 \
  python3 tools/fixtures/token_classification.py --fixtures "$fixtures" --out "$out/token_classification"

step "throughput and latency" 160 bash -o pipefail -c \
  'bench/long_input_bench.sh gpu "$0" "$1/bench" "$2" 2>&1 | tee "$1/bench.txt"' "$ferry" "$out" "$fixtures"

step "peak memory" 60 bash -o pipefail -c \
  'bench/long_input_memory.sh "$0" "$1/memory" cuda "$2" 2>&1 | tee "$1/memory.txt"' "$ferry" "$out" "$fixtures"

mkdir -p "$out/demo"
cp -r models/demo/kjv-decoder models/demo/kjv-classifier "$out/demo/"
step "train the tagger" 180 bash -o pipefail -c \
  'PYTHONUNBUFFERED=1 python3 tools/train_demo/train.py --out "$0/demo" --only tagger --keep-going --tagger-time-s 100 \
     2>&1 | tee "$0/train_tagger.log"' "$out"

if [[ -f $out/demo/kjv-tagger/config.json ]]; then
  step "ferry's entity F1 of the tagger" 60 bash -o pipefail -c '
    m=$1/demo/kjv-tagger; d=tools/train_demo/data/heldout_tagged_chapters.jsonl
    {
      "$0" eval tokens --model $m --data $d --truncation end
      for ov in 0 16 32 64; do for merge in center hf; do
        "$0" eval tokens --model $m --data $d --chunk-overlap $ov --chunk-merge $merge
      done; done
    } 2>&1 | tee "$1/tagger_f1.txt"' "$ferry" "$out"
fi
echo "outputs in $out"
exit $status
