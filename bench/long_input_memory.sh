#!/usr/bin/env bash
# Peak memory of one long document through `ferry serve` with truncation "chunk": a fresh
# server per measurement, one request, then the server process's peak RSS (VmHWM) and, on
# a GPU, the device memory in use (ferry's device pool keeps what it allocated, so that is
# its peak). Documents of 1,000, 10,000 and 100,000 tokens (synthetic words, one token each), with
# the batcher's max_batch_size at 32 (windows of a long document run 32 at a time) and, for
# contrast, at 1,024 (the whole document's windows in one batch).
#
#   bench/long_input_memory.sh FERRY OUT_DIR cpu              # the demo classifier, 128-token windows
#   bench/long_input_memory.sh FERRY OUT_DIR cuda FIXTURES    # bert-base shape, 512-token windows
#
# Run from the repository root.
set -euo pipefail
ferry=$(realpath "$1")
out=$(realpath -m "$2")
device=${3:-cpu}
fixtures=${4:-../shared/fixtures}
mkdir -p "$out"
port=${PORT:-8393}
url="http://127.0.0.1:$port"
trap '[[ -n ${server_pid:-} ]] && kill -TERM $server_pid 2>/dev/null || true' EXIT

if [[ $device == cpu ]]; then
  model=models/demo/kjv-classifier
  chunk=128
else
  model=$out/bert-base
  chunk=512
  [[ -f $model/config.json ]] || "$ferry" make-checkpoint --preset bert-base --dtype bf16 --head sequence --labels 2 \
    --tokenizer "$fixtures/tokenizers/bert" -o "$model"
fi

for tokens in 1000 10000 100000; do
  python3 - "$out/doc-$tokens.json" "$tokens" "$chunk" <<'PY'
import json, random, sys
path, n, chunk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
words = ("the people river water light house night stone field bread city king land voice hand day word fire tree "
         "road sea hill gate time heart eye gold sun wind door song ship").split()
rng = random.Random(n)
text = " ".join(rng.choice(words) for _ in range(n - 2))
json.dump({"model": "m", "input": text, "truncation": "chunk", "chunk_tokens": chunk, "chunk_overlap": chunk // 8},
          open(path, "w"))
PY
done

measure() {  # tokens max_batch_size
  local tokens=$1 batch=$2
  cat >"$out/mem.yaml" <<EOF
listener: {host: 127.0.0.1, port: $port, max_body_bytes: 8388608}
auth: {mode: none}
models:
  - name: m
    path: $model
    device: $device
    warmup: false   # so that the baseline is the loaded model, before any batch ran
    dynamic_batching: {max_batch_size: $batch, max_queue_delay_us: 1000}
log: {level: warn, request_log: false}
EOF
  "$ferry" serve --config "$out/mem.yaml" --port "$port" --no-request-log >"$out/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 6000); do
    curl -sf "$url/health/ready" >/dev/null 2>&1 && break
    kill -0 $server_pid 2>/dev/null || { cat "$out/server.log"; exit 1; }
    sleep 0.1
  done
  local base_rss base_gpu="" gpu=""
  base_rss=$(awk '/VmHWM/ {print $2}' /proc/$server_pid/status)
  [[ $device != cpu ]] && base_gpu=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  local start end
  start=$(date +%s.%N)
  curl -sf "$url/v1/classify" -H 'Content-Type: application/json' --data-binary @"$out/doc-$tokens.json" >"$out/reply.json"
  end=$(date +%s.%N)
  local windows
  windows=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["data"][0]["windows"])' "$out/reply.json")
  local peak_rss
  peak_rss=$(awk '/VmHWM/ {print $2}' /proc/$server_pid/status)
  [[ $device != cpu ]] && gpu=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  awk -v t="$tokens" -v w="$windows" -v b="$batch" -v p="$peak_rss" -v r="$base_rss" -v s="$start" -v e="$end" \
    'BEGIN { printf "%7d tokens  %5d windows  max_batch_size %5d  peak RSS %7.1f MiB (%+7.1f MiB over the ready server)  %6.2f s", t, w, b, p / 1024, (p - r) / 1024, e - s }' 
  [[ $device != cpu ]] && printf "  GPU %6d MiB (%+6d MiB)" "$gpu" "$((gpu - base_gpu))"
  echo
  kill -TERM $server_pid
  wait $server_pid || true
  server_pid=
}

echo "== peak memory of one document, device $device, ${chunk}-token windows =="
measure 1000 32
measure 10000 32
measure 100000 32
measure 1000 1024
measure 100000 1024
