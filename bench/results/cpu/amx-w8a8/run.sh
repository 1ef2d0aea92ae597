#!/usr/bin/env bash
# W8A8 prefill: ferry's own AMX route (default), oneDNN's s8 matmul (FERRY_AMX=0) and the VNNI
# kernel (FERRY_AMX=0 FERRY_INT8_ONEDNN=0), one binary, on the W8A8 engine built from the Q8_0
# file of bench/gguf_llamacpp_bench.sh, against llama.cpp on that file; the maximum resident
# set of each; bert-base W8A8 at 32 x 128. Two rounds, interleaved.
# usage: run.sh FERRY LLAMA_BENCH SCRATCH BERT_INT8_ENGINE OUT
set -euo pipefail
ferry=$1; llama_bench=$2; scratch=$3; bert=$4; out=$5
mkdir -p "$out"
tag() { python3 -c "import json,sys; r=json.load(sys.stdin); r=r[0] if isinstance(r,list) else r; r.update(json.loads(sys.argv[1])); print(json.dumps(r))" "$1"; }
route_env() { case $1 in amx) echo "FERRY_AMX=1";; onednn) echo "FERRY_AMX=0 FERRY_INT8_ONEDNN=1";; vnni) echo "FERRY_AMX=0 FERRY_INT8_ONEDNN=0";; esac; }
for round in 1 2; do
  echo "round $round: llama.cpp q8_0"
  timeout 600 "$llama_bench" -m "$scratch/bench-1b-q8_0.gguf" -t 2 -p 512 -n 32 -r 3 -o jsonl |
    python3 -c "import json,sys
for l in sys.stdin:
  r=json.loads(l); r.update(round=$round, file='q8_0'); print(json.dumps(r))" | tee -a "$out/llamacpp.jsonl"
  for route in amx onednn vnni; do
    echo "round $round: ferry W8A8 engine, $route"
    env $(route_env $route) /usr/bin/time -f "$route round $round max_rss_kb %M" -a -o "$out/rss.txt" \
      timeout 900 "$ferry" bench model --model "$scratch/bench-1b-q8_0-int8.ferry" --threads 2 --prompt-len 512 \
        --batch 1 --decode-steps 32 --decode-context 16 --repeats 3 --json |
      tag "{\"round\": $round, \"route\": \"$route\"}" | tee -a "$out/ferry.jsonl"
    echo "round $round: bert-base W8A8, $route"
    env $(route_env $route) timeout 600 "$ferry" bench model --model "$bert" --threads 2 --encoder-batch 32 \
        --encoder-seq-len 128 --repeats 5 --json | tag "{\"round\": $round, \"route\": \"$route\"}" | tee -a "$out/bert.jsonl"
  done
done
