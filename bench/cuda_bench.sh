#!/usr/bin/env bash
# GPU benchmarks in one call on the device: random-weight bf16 checkpoints of the
# llama-3.2-1b and llama-3-8b shapes and bert-base, then ferry (`ferry bench model
# --device cuda`) and PyTorch (bench/torch_baseline.py: transformers eager with SDPA and
# torch.compile reduce-overhead) on the same weights, plus the copy bandwidth and bf16
# matmul rate measured in the same run. Results go to OUT_DIR as JSON lines.
# usage: bench/cuda_bench.sh FERRY OUT_DIR [SCRATCH_DIR] ; MODELS="1b 8b bert" picks the models.
set -euo pipefail
ferry=$1
out=$2
scratch=${3:-/tmp/ferry-cuda-bench}
models=${MODELS:-1b 8b bert}
mkdir -p "$out" "$scratch"
here=$(cd "$(dirname "$0")" && pwd)

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
        | python3 -c "import json,sys; r=json.load(sys.stdin)[0]; r.update(model='$preset', activations='$act'); print(json.dumps(r))" \
        | tee -a "$out/ferry.jsonl"
    done
    continue
  fi
  for len in 512 2048; do
    "$ferry" bench model --model "$ckpt" --device cuda --threads 1 --prompt-len "$len" --batch 1,8,64 \
      --decode-context 512 --decode-steps 32 --repeats 5 --json \
      | python3 -c "import json,sys; r=json.load(sys.stdin)[0]; r.update(model='$preset'); print(json.dumps(r))" \
      | tee -a "$out/ferry.jsonl"
  done
  python3 "$here/torch_baseline.py" "$ckpt" --prompt-lens 512,2048 --batches 1,8,64 --context 512 \
    | python3 -c "import json,sys; r=json.load(sys.stdin); r.update(model='$preset'); print(json.dumps(r))" \
    | tee -a "$out/torch.jsonl"
done
