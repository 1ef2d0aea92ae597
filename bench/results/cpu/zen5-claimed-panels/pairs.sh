#!/usr/bin/env bash
# Paired runs: the two splits one right after the other, PAIRS times per file (the order
# alternating), one timed run each, so that both see the same phase of the shared machine.
# FILES (default "bf16 int8-wo"): GGUF types as they are, or int8-wo / int8 for the engines
# built from the Q8_0 file.
# usage: pairs.sh FERRY SCRATCH OUT
set -euo pipefail
ferry=$1; scratch=$2; out=$3
mkdir -p "$out"
run() {  # split model file pair
  FERRY_DECODE_SPLIT=$1 timeout 600 "$ferry" bench model --model "$2" --threads 2 --prompt-len 16 --batch 1 \
      --decode-steps 64 --decode-context 16 --repeats 1 --json |
    python3 -c "import json,sys; r=json.load(sys.stdin); r=r[0] if isinstance(r,list) else r; r.update(split='$1', file='$3', pair=$4); print(json.dumps(r))" >> "$out/pairs.jsonl"
}
for f in ${FILES:-bf16 int8-wo}; do
  model=$scratch/bench-1b-$f.gguf
  [[ $f == int8-wo || $f == int8 ]] && model=$scratch/bench-1b-q8_0-$f.ferry
  for pair in $(seq 1 "${PAIRS:-8}"); do
    if ((pair % 2)); then run static "$model" "$f" "$pair"; run claimed "$model" "$f" "$pair"
    else run claimed "$model" "$f" "$pair"; run static "$model" "$f" "$pair"; fi
  done
done
