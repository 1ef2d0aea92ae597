#!/usr/bin/env bash
# `make demo`: serves both bundled demo models on 127.0.0.1 (no API keys: loopback only),
# prints example requests once the server is ready, and runs until Ctrl-C (graceful stop).
set -euo pipefail
ferry=${1:-build/release/ferry}
port=${FERRY_DEMO_PORT:-8000}
# The tagger joins the demo once its folder is in the repository (tools/train_demo/README.md).
extra=()
tagger=false
if [[ -f models/demo/kjv-tagger/config.json ]]; then
  extra=(--model kjv-tagger=models/demo/kjv-tagger)
  tagger=true
fi
"$ferry" serve --config configs/demo.yaml --port "$port" "${extra[@]}" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid' INT TERM
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$port/health/ready" >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || exit 1
  sleep 0.1
done
url="http://127.0.0.1:$port"
psalm="The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures: he leadeth me beside the still waters. He restoreth my soul: he leadeth me in the paths of righteousness. Yea, though I walk through the valley of the shadow of death, I will fear no evil: for thou art with me; thy rod and thy staff they comfort me. Thou preparest a table before me in the presence of mine enemies: thou anointest my head with oil; my cup runneth over. Surely goodness and mercy shall follow me all the days of my life: and I will dwell in the house of the LORD for ever."
names="And Moses and Aaron went in unto Pharaoh, and said unto him, Thus saith the LORD God of the Hebrews. And they went from Egypt unto the wilderness of Sinai, and Joshua fought with Amalek in Rephidim."
cat <<MSG

ferry is serving kjv-decoder, kjv-classifier$($tagger && echo " and kjv-tagger") on $url (Ctrl-C stops it gracefully).
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
  # A text longer than the classifier's 128 tokens, read whole in overlapping windows:
  curl $url/v1/classify -H 'Content-Type: application/json' \\
    -d '{"model": "kjv-classifier", "truncation": "chunk", "chunk_overlap": 32, "aggregate": "max", "input": "$psalm"}'
MSG
if $tagger; then
  cat <<MSG
  # Proper names with their character offsets, over windows of a long text:
  curl $url/v1/token-classify -H 'Content-Type: application/json' \\
    -d '{"model": "kjv-tagger", "truncation": "chunk", "input": "$names"}'
MSG
fi
cat <<MSG
  curl $url/metrics
  $ferry bench serve --url $url --model kjv-decoder --num-prompts 64 --request-rate 16 --input-len 32 --output-len 32

MSG
wait $pid
