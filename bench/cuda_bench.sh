#!/usr/bin/env bash
# GPU benchmarks in one call on the device: random-weight bf16 checkpoints of the
# llama-3.2-1b and llama-3-8b shapes and bert-base, then ferry (`ferry bench model
# --device cuda`) and PyTorch (bench/torch_baseline.py: transformers eager with SDPA and
# torch.compile reduce-overhead) on the same weights, plus the copy bandwidth and bf16
# matmul rate measured in the same run. Results go to OUT_DIR as JSON lines.
#
# Decoders: the checkpoint with step graphs (CUDA graphs) and, at 512 tokens, without them
# (--eager) for comparison; for the 1b shape also GPU engine files (`ferry build --device
# cuda`, GEMMs tuned on this GPU) of each precision in VARIANTS. bert-base: the checkpoint
# with f16 and bf16 activations and engines of each precision in BERT_VARIANTS.
#
# usage: bench/cuda_bench.sh FERRY OUT_DIR [SCRATCH_DIR]
#   MODELS="1b 8b bert"  VARIANTS="bf16 int8-wo int8 fp8"  BERT_VARIANTS="fp16 int8"
#   ENGINE_MODELS="1b": the decoder shapes that also get engine variants ("1b 8b": both)
#   BATCHES=1,8,64: decode batch sizes
#   ENGINES_ONLY=1: decoders run only their engine variants (to split the work over calls)
#   KEEP_ENGINES=1: engine files stay in SCRATCH_DIR (with their build time), and a later
#     run reuses them; BUILD_ONLY=1 builds them and measures nothing (the 8b engines take
#     minutes: build in one call, measure in the next)
#   BASELINE=FERRY2: every engine variant is measured with this binary too, right after
#     FERRY, on the same engine file (tagged "binary": "baseline"); for before/after runs
#   KV_DTYPES="fp8": every engine variant is measured again with each of these KV cache
#     dtypes (--kv-cache-dtype), as variant "engine-P+kv-D"
set -euo pipefail
ferry=$1
out=$2
scratch=${3:-/tmp/ferry-cuda-bench}
models=${MODELS:-1b 8b bert}
variants=${VARIANTS:-bf16 int8-wo int8 fp8}
bert_variants=${BERT_VARIANTS:-fp16 int8}
engine_models=${ENGINE_MODELS:-1b}
batches=${BATCHES:-1,8,64}
baseline=${BASELINE:-}
mkdir -p "$out" "$scratch"
here=$(cd "$(dirname "$0")" && pwd)

# Adds the JSON object $1 to the first result of `ferry bench model --json` on stdin.
tag() {
  python3 -c "import json,sys; r=json.load(sys.stdin)[0]; r.update(json.loads(sys.argv[1])); print(json.dumps(r))" "$1"
}

# Builds a GPU engine of precision $2 from checkpoint $1 into $3 and prints the build time
# (kept beside the engine in $3.build_s; with KEEP_ENGINES an existing engine is reused).
build_engine() {
  local t0 t1
  if [[ -n ${KEEP_ENGINES:-} && -f $3 && -f $3.build_s ]]; then
    cat "$3.build_s"
    return
  fi
  t0=$(date +%s.%N)
  timeout 900 "$ferry" build --model "$1" --device cuda --precision "$2" --calibration-tokens 2048 -o "$3" >/dev/null
  t1=$(date +%s.%N)
  python3 -c "print(round($t1 - $t0, 1))" | tee "$3.build_s"
}

python3 "$here/torch_baseline.py" none --limits-only > "$out/limits.json"
cat "$out/limits.json"

for m in $models; do
  case $m in
    1b) preset=llama-3.2-1b ;;
    8b) preset=llama-3-8b ;;
    bert) preset=bert-base ;;
    *) echo "unknown model $m"; exit 1 ;;
  esac
  ckpt="$scratch/$preset"
  [[ -f $ckpt/config.json ]] || "$ferry" make-checkpoint --preset "$preset" --dtype bf16 -o "$ckpt" >/dev/null
  if [[ $m == bert ]]; then
    for act in f16 bf16; do
      "$ferry" bench model --model "$ckpt" --device cuda --activations "$act" --threads 1 --repeats 5 --json \
        | tag "{\"model\": \"$preset\", \"variant\": \"checkpoint-$act\"}" | tee -a "$out/ferry.jsonl"
    done
    for prec in $bert_variants; do
      engine="$scratch/$preset-$prec.ferry"
      secs=$(build_engine "$ckpt" "$prec" "$engine")
      "$ferry" bench model --model "$engine" --device cuda --threads 1 --repeats 5 --json \
        | tag "{\"model\": \"$preset\", \"variant\": \"engine-$prec\", \"build_s\": $secs}" | tee -a "$out/ferry.jsonl"
      rm -f "$engine"
    done
    python3 "$here/torch_baseline.py" "$ckpt" --encoder \
      | python3 -c "import json,sys; r=json.load(sys.stdin); r.update(model='$preset'); print(json.dumps(r))" \
      | tee -a "$out/torch.jsonl"
    continue
  fi
  decode=(--batch "$batches" --decode-context 512 --decode-steps 32 --repeats 5 --threads 1 --json)
  engines_only=${ENGINES_ONLY:-}
  [[ -n $engines_only ]] || for len in 512 2048; do
    "$ferry" bench model --model "$ckpt" --device cuda --prompt-len "$len" "${decode[@]}" \
      | tag "{\"model\": \"$preset\", \"variant\": \"checkpoint-bf16\"}" | tee -a "$out/ferry.jsonl"
  done
  [[ -n $engines_only ]] || "$ferry" bench model --model "$ckpt" --device cuda --prompt-len 512 --eager "${decode[@]}" \
    | tag "{\"model\": \"$preset\", \"variant\": \"checkpoint-bf16-eager\"}" | tee -a "$out/ferry.jsonl"
  [[ -n $engines_only ]] || python3 "$here/torch_baseline.py" "$ckpt" --prompt-lens 512,2048 --batches 1,8,64 --context 512 \
    | python3 -c "import json,sys; r=json.load(sys.stdin); r.update(model='$preset'); print(json.dumps(r))" \
    | tee -a "$out/torch.jsonl"
  if [[ " $engine_models " == *" $m "* ]]; then
    for prec in $variants; do
      engine="$scratch/$preset-$prec.ferry"
      secs=$(build_engine "$ckpt" "$prec" "$engine")
      echo "[$(date +%T)] $preset $prec engine: built in $secs s" >&2
      [[ -n ${BUILD_ONLY:-} ]] && continue
      "$ferry" bench model --model "$engine" --device cuda --prompt-len 2048 "${decode[@]}" \
        | tag "{\"model\": \"$preset\", \"variant\": \"engine-$prec\", \"build_s\": $secs}" | tee -a "$out/ferry.jsonl"
      [[ -z $baseline ]] || "$baseline" bench model --model "$engine" --device cuda --prompt-len 2048 "${decode[@]}" \
        | tag "{\"model\": \"$preset\", \"variant\": \"engine-$prec\", \"binary\": \"baseline\"}" \
        | tee -a "$out/ferry.jsonl"
      for kv in ${KV_DTYPES:-}; do
        "$ferry" bench model --model "$engine" --device cuda --prompt-len 2048 --kv-cache-dtype "$kv" "${decode[@]}" \
          | tag "{\"model\": \"$preset\", \"variant\": \"engine-$prec+kv-$kv\", \"build_s\": $secs}" \
          | tee -a "$out/ferry.jsonl"
      done
      [[ -n ${KEEP_ENGINES:-} ]] || rm -f "$engine" "$engine.build_s"
    done
  fi
done
