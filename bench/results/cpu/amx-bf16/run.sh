#!/usr/bin/env bash
# bf16 and int8 weight-only prefill on AMX tiles against the f32 kernels (FERRY_AMX=0, same
# binary) and llama.cpp on the same GGUF files: the BF16 file as loaded, and the int8-wo engine
# built from the Q8_0 file against llama.cpp's Q8_0. Flags as bench/gguf_llamacpp_bench.sh;
# two rounds, interleaved.
# BERT_ENGINE (optional): a bert-base bf16 engine, encoded at 32 x 128 and 1 x 128.
# usage: run.sh FERRY LLAMA_BENCH SCRATCH OUT
set -euo pipefail
ferry=$1; llama_bench=$2; scratch=$3; out=$4; bert=${BERT_ENGINE:-}
mkdir -p "$out"
tag() { python3 -c "import json,sys; r=json.load(sys.stdin); r=r[0] if isinstance(r,list) else r; r.update(json.loads(sys.argv[1])); print(json.dumps(r))" "$1"; }
fb() { timeout 900 "$ferry" bench model --model "$1" --threads 2 --prompt-len 512 --batch 1 --decode-steps 32 --decode-context 16 --repeats 3 --json; }
for round in 1 2; do
  for type in bf16 q8_0; do
    echo "round $round: llama.cpp $type"
    timeout 600 "$llama_bench" -m "$scratch/bench-1b-$type.gguf" -t 2 -p 512 -n 32 -r 3 -o jsonl |
      python3 -c "import json,sys
for l in sys.stdin:
  r=json.loads(l); r.update(round=$round, file='$type'); print(json.dumps(r))" | tee -a "$out/llamacpp.jsonl"
  done
  for amx in 1 0; do
    echo "round $round: ferry bf16 file, FERRY_AMX=$amx"
    FERRY_AMX=$amx fb "$scratch/bench-1b-bf16.gguf" | tag "{\"round\": $round, \"file\": \"bf16\", \"amx\": $amx}" | tee -a "$out/ferry.jsonl"
    echo "round $round: ferry int8-wo engine, FERRY_AMX=$amx"
    FERRY_AMX=$amx fb "$scratch/bench-1b-q8_0-int8-wo.ferry" | tag "{\"round\": $round, \"file\": \"q8_0\", \"weights\": \"int8-wo engine\", \"amx\": $amx}" | tee -a "$out/ferry.jsonl"
    [[ -n $bert ]] || continue
    for b in 32 1; do
      echo "round $round: ferry bert-base bf16 engine ${b}x128, FERRY_AMX=$amx"
      FERRY_AMX=$amx timeout 600 "$ferry" bench model --model "$bert" --threads 2 --encoder-batch $b --encoder-seq-len 128 \
          --repeats 5 --json | tag "{\"round\": $round, \"model\": \"bert-base bf16\", \"amx\": $amx}" | tee -a "$out/bert.jsonl"
    done
  done
done
