#!/usr/bin/env bash
# Online latency with and without a large batch running (issue 15, item 3), one script run:
#  1. baseline: a steady open-loop online load (Poisson, `ferry bench serve`) on the demo
#     decoder; the server has a local batch queue but no batch;
#  2. the same online load (same seed, same prompts) while a batch of BATCH_SIZE completions
#     runs through the Batch API in its lowest tier;
#  3. the baseline again, after the batch is cancelled (drift of the machine itself).
# Prints p50/p95 TTFT and TPOT of each run and the ratio of (2) to the mean of (1) and (3);
# writes every run's JSON and a summary.json to OUT_DIR.
# usage: bench/batch_bench.sh FERRY OUT_DIR
#   RATE (online requests/s, default 4), PROMPTS (online requests per run, default 120),
#   BATCH_SIZE (default 2000), BATCH_TOKENS (max_tokens per batch request, default 64),
#   IN_FLIGHT (queue.max_in_flight, default 8), UNDER_LOAD (queue.max_in_flight_under_load,
#   default 2), MODEL (default models/demo/kjv-decoder)
# Run from the repository root. Client and server share the machine's cores.
set -euo pipefail
ferry=$(realpath "$1")
out=$(realpath -m "$2")
rate=${RATE:-4}
prompts=${PROMPTS:-120}
batch_size=${BATCH_SIZE:-2000}
batch_tokens=${BATCH_TOKENS:-64}
in_flight=${IN_FLIGHT:-8}
under_load=${UNDER_LOAD:-2}
model=${MODEL:-models/demo/kjv-decoder}
mkdir -p "$out"
rm -rf "$out/queue"
port=8393
url="http://127.0.0.1:$port"
cat >"$out/server.yaml" <<YAML
listener: {host: 127.0.0.1, port: $port}
auth: {mode: none}
models:
  - name: m
    path: $model
    batching: {max_num_seqs: 32, max_num_batched_tokens: 512, max_queue_requests: 100000, max_queue_tokens: 100000000}
queue: {backend: local, path: $out/queue, max_in_flight: $in_flight, max_in_flight_under_load: $under_load}
log: {level: warn, request_log: false}
YAML
"$ferry" serve --config "$out/server.yaml" >"$out/server.log" 2>&1 &
server_pid=$!
trap 'kill -TERM $server_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 3000); do
  curl -sf "$url/health/ready" >/dev/null 2>&1 && break
  kill -0 $server_pid 2>/dev/null || { cat "$out/server.log"; exit 1; }
  sleep 0.1
done
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval('d' + sys.argv[1]))" "$1"; }

online() {  # label
  echo "online load: $rate req/s, $prompts requests ($1)"
  "$ferry" bench serve --url "$url" --model m --num-prompts "$prompts" --request-rate "$rate" --input-len 32 \
    --output-len 32 --seed 1 --warmup 4 --no-progress --label "$1" --json "$out/$1.json" >"$out/$1.txt"
  grep -E "^(TTFT|TPOT)" "$out/$1.txt"
}

online baseline
python3 - "$out/batch.jsonl" "$batch_size" "$batch_tokens" <<'PY'
import json, sys
path, n, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
starts = ["In the beginning", "And God said", "Blessed are", "The LORD is", "And it came to pass"]
with open(path, "w") as f:
    for i in range(n):
        body = {"model": "m", "prompt": f"{starts[i % 5]} {i}", "max_tokens": tokens, "temperature": 0}
        f.write(json.dumps({"custom_id": f"b-{i}", "method": "POST", "url": "/v1/completions", "body": body}) + "\n")
PY
file_id=$(curl -sf "$url/v1/files" -F purpose=batch -F "file=@$out/batch.jsonl" | field "['id']")
batch_id=$(curl -sf "$url/v1/batches" -H 'Content-Type: application/json' \
  -d "{\"input_file_id\": \"$file_id\", \"endpoint\": \"/v1/completions\", \"completion_window\": \"24h\"}" | field "['id']")
# Wait until the batch runs at full width before the online load starts.
for _ in $(seq 1 300); do
  running=$(curl -sf "$url/admin/batches" | field "['worker']['running']")
  [[ $running -ge $in_flight ]] && break
  sleep 0.1
done
before=$(curl -sf "$url/v1/batches/$batch_id" | field "['request_counts']['completed']")
online with_batch
after=$(curl -sf "$url/v1/batches/$batch_id" | field "['request_counts']['completed']")
status=$(curl -sf "$url/v1/batches/$batch_id" | field "['status']")
echo "batch: $((after - before)) requests completed during the online run; status $status at its end"
curl -sf -X POST "$url/v1/batches/$batch_id/cancel" >/dev/null || true
for _ in $(seq 1 600); do
  [[ $(curl -sf "$url/v1/batches/$batch_id" | field "['status']") == cancelled ]] && break
  sleep 0.1
done
online baseline_after
python3 - "$out" "$((after - before))" "$status" <<'PY'
import json, sys
out, done, status = sys.argv[1], int(sys.argv[2]), sys.argv[3]
runs = {n: json.load(open(f"{out}/{n}.json")) for n in ("baseline", "with_batch", "baseline_after")}
def q(run, metric, p): return runs[run][metric][p]
summary = {"batch_requests_completed_during_online_run": done, "batch_status_at_end_of_online_run": status,
           "online_requests_per_s": runs["baseline"]["config"].get("request_rate") if isinstance(runs["baseline"].get("config"), dict) else None}
for metric in ("ttft_ms", "tpot_ms"):
    for p in ("p50", "p95"):
        base = (q("baseline", metric, p) + q("baseline_after", metric, p)) / 2
        summary[f"{metric}_{p}"] = {n: round(q(n, metric, p), 2) for n in runs}
        summary[f"{metric}_{p}"]["ratio_with_batch_to_baseline"] = round(q("with_batch", metric, p) / base, 3)
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
print(json.dumps(summary, indent=2))
r = summary["ttft_ms_p95"]["ratio_with_batch_to_baseline"]
print(f"online p95 TTFT with the batch running / without: {r:.3f} (goal: < 1.10)")
PY
