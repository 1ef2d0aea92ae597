#!/bin/bash
# W8A8 prefill through oneDNN's s8 matmul on AMX against ferry's VNNI kernel (FERRY_INT8_ONEDNN=0),
# one binary, and llama.cpp's Q8_0 on the same GGUF file; two rounds, interleaved.
# usage: run.sh FERRY LLAMA_BENCH ENGINE GGUF OUT
set -euo pipefail
ferry=$1 llama_bench=$2 engine=$3 gguf=$4 out=$5
mkdir -p "$out"
for round in 1 2; do
  echo "round $round: llama.cpp q8_0"
  "$llama_bench" -m "$gguf" -t 2 -p 512 -n 32 -r 3 -o jsonl | python3 -c "import json,sys
for l in sys.stdin:
  r=json.loads(l); r.update(round=$round); print(json.dumps(r))" | tee -a "$out/llamacpp.jsonl"
  for onednn in 1 0; do
    echo "round $round: ferry int8 engine, FERRY_INT8_ONEDNN=$onednn"
    FERRY_INT8_ONEDNN=$onednn "$ferry" bench model --model "$engine" --threads 2 --prompt-len 512 --batch 1 \
        --decode-steps 32 --decode-context 16 --repeats 3 --json | python3 -c "import json,sys
r=json.load(sys.stdin)[0]; r.update(round=$round, onednn=$onednn); print(json.dumps(r))" | tee -a "$out/ferry.jsonl"
  done
done
