#!/usr/bin/env bash
# `make demo`: serves both bundled demo models on 127.0.0.1 (no API keys: loopback only),
# prints example requests once the server is ready, and runs until Ctrl-C (graceful stop).
set -euo pipefail
ferry=${1:-build/release/ferry}
port=${FERRY_DEMO_PORT:-8000}
"$ferry" serve --config configs/demo.yaml --port "$port" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid' INT TERM
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$port/health/ready" >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || exit 1
  sleep 0.1
done
url="http://127.0.0.1:$port"
cat <<MSG

ferry is serving kjv-decoder and kjv-classifier on $url (Ctrl-C stops it gracefully).
Try, from another terminal:

  curl $url/v1/models
  curl $url/v1/completions -H 'Content-Type: application/json' \\
    -d '{"model": "kjv-decoder", "prompt": "And the LORD said unto", "max_tokens": 48, "temperature": 0}'
  curl -N $url/v1/completions -H 'Content-Type: application/json' \\
    -d '{"model": "kjv-decoder", "prompt": "In the beginning", "max_tokens": 48, "temperature": 0.8, "top_p": 0.95, "seed": 7, "stream": true}'
  curl $url/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "kjv-decoder", "messages": [{"role": "system", "content": "The Psalms of David."}, {"role": "user", "content": "The LORD is my shepherd; I shall not want."}], "max_tokens": 48, "temperature": 0}'
  curl -N $url/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "kjv-decoder", "messages": [{"role": "user", "content": "In the beginning God created the heaven and the earth."}], "max_tokens": 32, "seed": 3, "stream": true}'
  curl $url/v1/classify -H 'Content-Type: application/json' \\
    -d '{"model": "kjv-classifier", "input": ["Comfort ye, comfort ye my people, saith your God.", "Jesus wept."]}'
  curl $url/v1/embeddings -H 'Content-Type: application/json' \\
    -d '{"model": "kjv-classifier", "input": "The LORD is my shepherd; I shall not want."}'
  curl $url/metrics
  $ferry bench serve --url $url --model kjv-decoder --num-prompts 64 --request-rate 16 --input-len 32 --output-len 32

MSG
wait $pid
