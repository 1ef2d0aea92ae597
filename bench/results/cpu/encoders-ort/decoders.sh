#!/usr/bin/env bash
# The llama-3.2-1B-shaped decoders of bench/gguf_llamacpp_bench.sh (BF16 file as loaded; the
# int8-wo and W8A8 engines built from its Q8_0 file) with this round's binary and the one
# before it, and llama.cpp on the same files: two rounds, interleaved.
# usage: decoders.sh FERRY FERRY_BEFORE LLAMA_BENCH SCRATCH OUT
set -euo pipefail
ferry=$1; before=$2; llama_bench=$3; scratch=$4; out=$5
mkdir -p "$out"
tag() { python3 -c "import json,sys; r=json.load(sys.stdin); r=r[0] if isinstance(r,list) else r; r.update(json.loads(sys.argv[1])); print(json.dumps(r))" "$1"; }
fb() { timeout 900 "$1" bench model --model "$2" --threads 2 --prompt-len 512 --batch 1 --decode-steps 32 --decode-context 16 --repeats 3 --json; }
for round in 1 2; do
  for type in bf16 q8_0; do
    echo "round $round: llama.cpp $type"
    timeout 600 "$llama_bench" -m "$scratch/bench-1b-$type.gguf" -t 2 -p 512 -n 32 -r 3 -o jsonl |
      python3 -c "import json,sys
for l in sys.stdin:
  r=json.loads(l); r.update(round=$round, file='$type'); print(json.dumps(r))" | tee -a "$out/llamacpp.jsonl"
  done
  for model in bench-1b-bf16.gguf bench-1b-q8_0-int8-wo.ferry bench-1b-q8_0-int8.ferry; do
    for which in now before; do
      bin=$ferry; [[ $which == before ]] && bin=$before
      echo "round $round: ferry ($which) $model"
      fb "$bin" "$scratch/$model" | tag "{\"round\": $round, \"model\": \"$model\", \"binary\": \"$which\"}" | tee -a "$out/ferry.jsonl"
    done
  done
done
