#!/usr/bin/env bash
# Long inputs (chunked encoder inference), measured with `ferry bench serve` as the client.
#
#   bench/long_input_bench.sh cpu FERRY OUT_DIR
#     The cost of chunking. The same documents are sent twice to one server, back to back
#     in this run: as whole texts with truncation "chunk" (the server tokenizes, cuts
#     windows, queues them as batcher items and merges the results), and as the very same
#     windows, already cut (`ferry tokenize --chunk-tokens`), sent as plain batched inputs
#     of token ids (one request per document, one input per window). Reported: windows/s
#     of each and their ratio (chunked / plain). Closed loop, 4 clients, the demo
#     classifier, 128-token windows sharing 16 tokens, documents of about 2,000 words.
#
#   bench/long_input_bench.sh gpu FERRY OUT_DIR FIXTURES
#     Throughput and latency on a GPU: a bert-base-shape classifier (random weights made by
#     `ferry make-checkpoint`, the WordPiece vocabulary of FIXTURES/tokenizers/bert),
#     8,192-token documents in 512-token windows sharing 64, open-loop Poisson arrivals at
#     several rates; documents/s and p50/p99 latency at each. Then the plain-windows
#     comparison at the highest rate. Environment: RATES ("50 100 150 200 250"), RUN_S (10:
#     seconds of arrivals per rate), MODEL_PATH (serve this instead of the checkpoint, e.g. an
#     engine built from it with `ferry build --device cuda --precision fp8`), SKIP_PLAIN=1.
#
# Run from the repository root. Results go to OUT_DIR (server logs, one JSON per run) and a
# summary to stdout.
set -euo pipefail
mode=$1
ferry=$(realpath "$2")
out=$(realpath -m "$3")
fixtures=${4:-../shared/fixtures}
mkdir -p "$out"
port=${PORT:-8392}
url="http://127.0.0.1:$port"

start_server() {  # config file
  "$ferry" serve --config "$1" --port "$port" --no-request-log >"$out/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 6000); do
    curl -sf "$url/health/ready" >/dev/null 2>&1 && return 0
    kill -0 $server_pid 2>/dev/null || { cat "$out/server.log"; return 1; }
    sleep 0.1
  done
  return 1
}
stop_server() {
  kill -TERM $server_pid
  wait $server_pid || true
}
trap '[[ -n ${server_pid:-} ]] && kill -TERM $server_pid 2>/dev/null || true' EXIT

# N documents of W words (JSONL {"text"}), and the same documents as their windows' ids
# ({"input": [[ids of window 1], ...]}), cut by ferry itself.
make_documents() {  # model n words chunk_tokens overlap
  local model=$1 n=$2 words=$3 chunk=$4 overlap=$5
  python3 - "$out/docs.jsonl" "$n" "$words" <<'PY'
import json, random, sys
path, n, words = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
vocab = ("the people river water light house night stone field bread city king land voice hand day word "
         "fire tree road sea hill gate time heart eye gold sun wind door song ship and of in to they went "
         "up unto over from with all his their into came said").split()
rng = random.Random(1611)
with open(path, "w") as f:
    for _ in range(n):
        text = " ".join(rng.choice(vocab) for _ in range(words))
        f.write(json.dumps({"text": text}) + "\n")
PY
  : >"$out/windows.jsonl"
  local total=0
  while IFS= read -r line; do
    python3 -c 'import json,sys; print(json.loads(sys.argv[1])["text"])' "$line" >"$out/doc.txt"
    "$ferry" tokenize --model "$model" --text-file "$out/doc.txt" --chunk-tokens "$chunk" --chunk-overlap "$overlap" \
      | python3 -c 'import json,sys; w=json.load(sys.stdin)["windows"]; print(json.dumps({"input": w})); print(len(w), file=sys.stderr)' \
      >>"$out/windows.jsonl" 2>>"$out/window_counts.txt"
  done <"$out/docs.jsonl"
}

# Prints "requests/s windows/s p50_ms p99_ms" of a bench serve JSON.
summary() {  # json windows_per_request
  python3 - "$1" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
w = float(sys.argv[2])
print(f"{j['request_throughput']:.2f} {j['request_throughput'] * w:.1f} {j['e2e_ms']['p50']:.1f} {j['e2e_ms']['p99']:.1f} "
      f"{j['completed']} {j['failed'] if 'failed' in j else 0}")
PY
}

# CPU seconds (user + system) the server has used so far.
server_cpu_s() {
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' /proc/$server_pid/stat
}

bench() {  # json label args...
  local json=$1 label=$2
  shift 2
  local cpu0
  cpu0=$(server_cpu_s)
  "$ferry" bench serve --url "$url" --model m --endpoint classify --no-progress --label "$label" \
    --json "$out/$json" "$@" >"$out/${json%.json}.txt"
  # The server's CPU time over the run (warm-up requests included), beside its JSON.
  awk -v a="$cpu0" -v b="$(server_cpu_s)" 'BEGIN {print b - a}' >"$out/${json%.json}.cpu_s"
}

compare_plain() {  # chunk_tokens overlap prompts concurrency rate
  local chunk=$1 overlap=$2 prompts=$3 conc=$4 rate=$5
  local per_doc
  per_doc=$(python3 -c 'import sys; v=[int(x) for x in open(sys.argv[1])]; print(sum(v)/len(v))' "$out/window_counts.txt")
  local extra="{\"truncation\": \"chunk\", \"chunk_tokens\": $chunk, \"chunk_overlap\": $overlap}"
  echo "windows per document: $per_doc"
  # Alternate the two, ROUNDS times (default 3), the first of each round alternating too, so
  # that drift in the machine's speed hits both.
  local rounds=${ROUNDS:-3}
  for round in $(seq 1 "$rounds"); do
    local order="chunked plain"
    ((round % 2 == 0)) && order="plain chunked"
    for kind in $order; do
      if [[ $kind == chunked ]]; then
        bench "chunked-$round.json" "chunked" --dataset "$out/docs.jsonl" --extra-body "$extra" --num-prompts "$prompts" \
          --request-rate "$rate" --max-concurrency "$conc" --warmup 4
      else
        bench "plain-$round.json" "plain" --dataset "$out/windows.jsonl" --extra-body '{"truncation": "error"}' \
          --num-prompts "$prompts" --request-rate "$rate" --max-concurrency "$conc" --warmup 4
      fi
    done
    python3 - "$out/chunked-$round.json" "$out/plain-$round.json" "$round" <<'PY'
import json, sys
c, p = (json.load(open(f)) for f in sys.argv[1:3])
cc, pc = (float(open(f[:-len(".json")] + ".cpu_s").read()) for f in sys.argv[1:3])
print(f"round {sys.argv[3]}: the same windows took chunked {c['duration_s']:.2f} s, plain {p['duration_s']:.2f} s "
      f"(chunked / plain windows/s {p['duration_s'] / c['duration_s']:.3f}); server CPU chunked {cc:.1f} s, "
      f"plain {pc:.1f} s (ratio {cc / pc:.3f})")
PY
  done
  python3 - "$out" "$per_doc" "$rounds" <<'PY'
import json, sys
out, per_doc, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rows, cpu = {}, {}
for kind in ("chunked", "plain"):
    runs = [json.load(open(f"{out}/{kind}-{r}.json")) for r in range(1, rounds + 1)]
    docs = sum(r["completed"] for r in runs) / sum(r["duration_s"] for r in runs)
    rows[kind] = docs
    # CPU ms per window, warm-up requests (4 a run) counted with the measured ones.
    cpu_s = sum(float(open(f"{out}/{kind}-{r}.cpu_s").read()) for r in range(1, rounds + 1))
    cpu[kind] = cpu_s * 1000 / (sum(r["completed"] + 4 for r in runs) * per_doc)
    p99 = max(r["e2e_ms"]["p99"] for r in runs)
    p50 = sum(r["e2e_ms"]["p50"] for r in runs) / len(runs)
    print(f"{kind:8s} documents/s {docs:8.2f}  windows/s {docs * per_doc:9.1f}  e2e p50 {p50:7.1f} ms  p99 {p99:7.1f} ms"
          f"  server CPU {cpu[kind]:.2f} ms a window")
print(f"chunked / plain windows/s: {rows['chunked'] / rows['plain']:.3f}; "
      f"chunked / plain server CPU time a window: {cpu['chunked'] / cpu['plain']:.3f}")
PY
}

if [[ $mode == cpu ]]; then
  model=models/demo/kjv-classifier
  cat >"$out/cpu.yaml" <<EOF
listener: {host: 127.0.0.1, port: $port, max_body_bytes: 4194304}
auth: {mode: none}
models:
  - name: m
    path: $model
    dynamic_batching: {max_batch_size: 32, max_queue_delay_us: 2000, default_queue_policy: {max_queue_size: 0}}
log: {level: warn, request_log: false}
EOF
  echo "== CPU: chunked requests vs the same windows as plain batched inputs ($(nproc) cores) =="
  make_documents "$model" 16 2000 128 16
  start_server "$out/cpu.yaml"
  compare_plain 128 16 48 4 inf
  stop_server
elif [[ $mode == gpu ]]; then
  # PRESET and DEVICE (defaults bert-base, cuda) only let the script itself be tried on a CPU.
  preset=${PRESET:-bert-base}
  ckpt=$out/$preset
  [[ -f $ckpt/config.json ]] || "$ferry" make-checkpoint --preset "$preset" --dtype bf16 --head sequence --labels 2 \
    --tokenizer "$fixtures/tokenizers/bert" -o "$ckpt"
  cat >"$out/gpu.yaml" <<EOF
listener: {host: 127.0.0.1, port: $port, max_body_bytes: 8388608, io_threads: 4, output_threads: 4}
auth: {mode: none}
models:
  - name: m
    path: ${MODEL_PATH:-$ckpt}
    device: ${DEVICE:-cuda}
    dynamic_batching: {max_batch_size: 64, max_queue_delay_us: 2000, default_queue_policy: {max_queue_size: 0}}
    long_inputs: {truncation: chunk, chunk_tokens: 512, chunk_overlap: 64}
log: {level: warn, request_log: false}
EOF
  start_server "$out/gpu.yaml"
  nvidia-smi --query-gpu=name,memory.used --format=csv,noheader | sed 's/^/GPU after warm-up: /'
  echo "== GPU: 8,192-token documents (8,190 words + [CLS]/[SEP]), 512-token windows sharing 64, Poisson arrivals =="
  # The synthetic words are one WordPiece token each: 8,190 words are 8,192 tokens with [CLS]/[SEP].
  bench warm.json warm --input-len 8190 --num-prompts 64 --request-rate inf --max-concurrency 32 >/dev/null
  echo "rate  documents/s  windows/s  e2e_p50_ms  e2e_p99_ms  completed  failed"
  for rate in ${RATES:-50 100 150 200 250}; do
    bench "gpu-r$rate.json" "rate $rate" --input-len 8190 --num-prompts $((rate * ${RUN_S:-10})) --request-rate "$rate" --seed 1
    echo "$rate $(summary "$out/gpu-r$rate.json" 19)"
  done
  nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed 's/^/GPU memory after the runs: /'
  stop_server
  [[ ${SKIP_PLAIN:-0} == 1 ]] && exit 0
  echo "== GPU: the same comparison as on the CPU (chunked vs plain windows), closed loop of 64 =="
  make_documents "$ckpt" 32 8190 512 64
  start_server "$out/gpu.yaml"
  compare_plain 512 64 256 64 inf
  stop_server
else
  echo "usage: $0 cpu|gpu FERRY OUT_DIR [FIXTURES]" >&2
  exit 2
fi
