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
# The Batch API's queue: the embedded one (configs/demo.yaml), or with FERRY_DEMO_QUEUE=redis
# a redis-server started here on a free port (Debian's redis-server) and stopped at the end.
redis_pid=""
if [[ ${FERRY_DEMO_QUEUE:-local} == redis ]]; then
  command -v redis-server >/dev/null || { echo "FERRY_DEMO_QUEUE=redis needs redis-server (scripts/install_deps.sh)"; exit 1; }
  redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  redis_dir=$(mktemp -d /tmp/ferry-demo-redis.XXXXXX)
  redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$redis_dir" --appendonly yes --save "" >"$redis_dir/log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 1 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.05; done
  export FERRY_QUEUE_BACKEND=redis FERRY_QUEUE_URL="redis://127.0.0.1:$redis_port"
  echo "redis-server on 127.0.0.1:$redis_port (data in $redis_dir)"
fi
"$ferry" serve --config configs/demo.yaml --port "$port" "${extra[@]}" &
pid=$!
stop() {
  kill -TERM $pid 2>/dev/null; wait $pid
[[ -z $redis_pid ]] || kill -TERM "$redis_pid" 2>/dev/null
  [[ -z $redis_pid ]] || kill -TERM "$redis_pid" 2>/dev/null
}
trap stop INT TERM
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$port/health/ready" >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || exit 1
  sleep 0.1
done
url="http://127.0.0.1:$port"
# A batch submitted with curl, as OpenAI's Batch API takes it: a JSONL file of requests,
# then a batch over it; the results come back as a file.
batch_file=$(mktemp /tmp/ferry-demo-batch.XXXXXX.jsonl)
for verse in "In the beginning" "And God said" "The LORD is my shepherd" "Blessed are the meek"; do
  printf '{"custom_id": "%s", "method": "POST", "url": "/v1/completions", "body": {"model": "kjv-decoder", "prompt": "%s", "max_tokens": 16, "temperature": 0}}\n' \
    "${verse// /-}" "$verse" >>"$batch_file"
done
json_field() { python3 -c "import json,sys; print(json.load(sys.stdin)[sys.argv[1]])" "$1"; }
echo
echo "A batch through the Batch API:"
echo "  curl $url/v1/files -F purpose=batch -F file=@$batch_file"
file_id=$(curl -sf "$url/v1/files" -F purpose=batch -F "file=@$batch_file" | json_field id)
echo "  curl $url/v1/batches -H 'Content-Type: application/json' -d '{\"input_file_id\": \"$file_id\", \"endpoint\": \"/v1/completions\", \"completion_window\": \"24h\"}'"
batch_id=$(curl -sf "$url/v1/batches" -H 'Content-Type: application/json' \
  -d "{\"input_file_id\": \"$file_id\", \"endpoint\": \"/v1/completions\", \"completion_window\": \"24h\"}" | json_field id)
status=""
for _ in $(seq 1 300); do
  status=$(curl -sf "$url/v1/batches/$batch_id" | json_field status)
  [[ $status == completed || $status == failed || $status == cancelled ]] && break
  sleep 0.1
done
echo "  curl $url/v1/batches/$batch_id        # status: $status"
output_id=$(curl -sf "$url/v1/batches/$batch_id" | json_field output_file_id)
echo "  curl $url/v1/files/$output_id/content"
curl -sf "$url/v1/files/$output_id/content" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print("    %-26s %s" % (r["custom_id"], json.dumps(r["response"]["body"]["choices"][0]["text"])))'
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
  curl $url/v1/batches                 # this tenant's batches; POST /v1/batches/ID/cancel stops one
  curl $url/admin/batches              # every batch, the queue's counts and this server's worker
  curl $url/metrics
  $ferry bench serve --url $url --model kjv-decoder --num-prompts 64 --request-rate 16 --input-len 32 --output-len 32

MSG
wait $pid
[[ -z $redis_pid ]] || kill -TERM "$redis_pid" 2>/dev/null
