#!/usr/bin/env bash
# ferry and llama.cpp on the very same GGUF files, on the CPU: a llama-3.2-1B-shaped model
# with random weights (bench/make_bench_gguf.py, llama.cpp's own gguf-py writer) as F16 and as
# Q8_0. llama.cpp: `llama-bench -p 512 -n 32` (prefill of 512 tokens; 32 tokens generated from
# an empty cache). ferry: `ferry bench model --prompt-len 512 --batch 1 --decode-steps 32
# --decode-context 16` on the GGUF file itself (a Q8_0 file as its int8 blocks) and, for Q8_0,
# on engines built from it: ENGINES (default "int8-wo int8"), int8-wo the per-channel
# weight-only engine, int8 the W8A8 engine (integer activations, as llama.cpp's Q8_0 dot products
# use). TYPES (default "f16 q8_0") picks the files: f32 and bf16 too, each run by both tools as
# it is (ferry keeps f32 and bf16 weights as they are); with BF16_ACTIVATIONS=1 ferry also runs
# the bf16 file with --cpu-activations bf16 (its prefill GEMMs on vdpbf16ps with x rounded to
# bf16, as llama.cpp's BF16 path multiplies). Two rounds, the tools interleaved;
# each measurement is the median of 3 runs. Results: OUT/llamacpp.jsonl, OUT/ferry.jsonl.
#
# usage: bench/gguf_llamacpp_bench.sh FERRY LLAMA_BENCH GGUF_PY_DIR OUT [SCRATCH] [THREADS]
set -euo pipefail
ferry=$1
llama_bench=$2
gguf_py=$3
out=$4
scratch=${5:-/tmp/ferry-gguf-bench}
threads=${6:-2}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out" "$scratch"
types=${TYPES:-f16 q8_0}
for type in $types; do
  f=$scratch/bench-1b-$type.gguf
  [[ -f $f ]] || /usr/bin/python3 "$here/make_bench_gguf.py" "$f" --type "$type" --gguf-py "$gguf_py"
done
engines=${ENGINES-int8-wo int8}
for prec in $engines; do
  engine=$scratch/bench-1b-q8_0-$prec.ferry
  [[ -f $engine ]] || timeout 900 "$ferry" build --model "$scratch/bench-1b-q8_0.gguf" --precision "$prec" -o "$engine" >/dev/null
done
tag() { python3 -c "import json,sys; r=json.load(sys.stdin); r=r[0] if isinstance(r,list) else r; r.update(json.loads(sys.argv[1])); print(json.dumps(r))" "$1"; }
for round in 1 2; do
  for type in $types; do
    f=$scratch/bench-1b-$type.gguf
    echo "round $round: llama.cpp $type"
    timeout 600 "$llama_bench" -m "$f" -t "$threads" -p 512 -n 32 -r 3 -o jsonl |
      python3 -c "import json,sys
for l in sys.stdin:
  r=json.loads(l); r.update(round=$round, file='$type'); print(json.dumps(r))" | tee -a "$out/llamacpp.jsonl"
    echo "round $round: ferry $type"
    timeout 600 "$ferry" bench model --model "$f" --threads "$threads" --prompt-len 512 --batch 1 --decode-steps 32 \
        --decode-context 16 --repeats 3 --json | tag "{\"round\": $round, \"file\": \"$type\", \"weights\": \"gguf as loaded\"}" |
      tee -a "$out/ferry.jsonl"
    if [[ $type == bf16 && -n ${BF16_ACTIVATIONS:-} ]]; then
      echo "round $round: ferry $type, --cpu-activations bf16"
      timeout 600 "$ferry" bench model --model "$f" --threads "$threads" --prompt-len 512 --batch 1 --decode-steps 32 \
          --decode-context 16 --repeats 3 --cpu-activations bf16 --json |
        tag "{\"round\": $round, \"file\": \"$type\", \"weights\": \"gguf as loaded\", \"cpu_activations\": \"bf16\"}" |
        tee -a "$out/ferry.jsonl"
    fi
  done
  for prec in $engines; do
    echo "round $round: ferry $prec engine from the q8_0 file"
    timeout 600 "$ferry" bench model --model "$scratch/bench-1b-q8_0-$prec.ferry" --threads "$threads" --prompt-len 512 \
        --batch 1 --decode-steps 32 --decode-context 16 --repeats 3 --json |
      tag "{\"round\": $round, \"file\": \"q8_0\", \"weights\": \"$prec engine\"}" | tee -a "$out/ferry.jsonl"
  done
done
