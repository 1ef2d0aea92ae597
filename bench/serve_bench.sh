#!/usr/bin/env bash
# Serving benchmarks, every comparison run back to back in this one script with
# `ferry bench serve` as the client (docs/performance.md has the results):
#  1. decoder: continuous batching vs a batch-size-1 server (each passenger crosses alone),
#     open-loop Poisson arrivals at several rates, on the demo decoder and (optionally) a
#     llama-3.2-1b-shape checkpoint;
#  2. encoder: dynamic batching vs none, closed-loop concurrency sweep (throughput and p95);
#  3. encoder: max_queue_delay_us sweep at a fixed Poisson rate (p50/p99 latency).
# usage: bench/serve_bench.sh FERRY OUT_DIR [LLAMA_1B_CHECKPOINT]
#   SECTIONS="decoder big encoder delay" (the default) picks the parts to run.
# Run from the repository root. Client and server share the machine's cores.
set -euo pipefail
ferry=$(realpath "$1")
out=$(realpath -m "$2")
big=${3:-}
sections=${SECTIONS:-decoder big encoder delay}
want() { [[ " $sections " == *" $1 "* ]]; }
mkdir -p "$out"
port=8391
url="http://127.0.0.1:$port"

start_server() {  # config file
  "$ferry" serve --config "$1" --port "$port" --no-request-log >"$out/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 3000); do
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

decoder_config() {  # name path max_num_seqs budget
  cat >"$out/$1.yaml" <<EOF
listener: {host: 127.0.0.1, port: $port}
auth: {mode: none}
models:
  - name: m
    path: $2
    batching: {max_num_seqs: $3, max_num_batched_tokens: $4, max_queue_requests: 4096, max_queue_tokens: 4194304}
log: {level: warn, request_log: false}
EOF
}

encoder_config() {  # name max_batch_size delay_us
  cat >"$out/$1.yaml" <<EOF
listener: {host: 127.0.0.1, port: $port}
auth: {mode: none}
models:
  - name: m
    path: models/demo/kjv-classifier
    dynamic_batching: {max_batch_size: $2, max_queue_delay_us: $3, default_queue_policy: {max_queue_size: 0}}
log: {level: warn, request_log: false}
EOF
}

bench() {  # json label args...
  local json=$1 label=$2
  shift 2
  "$ferry" bench serve --url "$url" --model m --no-progress --label "$label" --json "$out/$json" "$@" >"$out/${json%.json}.txt"
  grep -E "Request throughput|Output token throughput" "$out/${json%.json}.txt" | sed "s/^/  $label: /"
}

# 1. Decoders.
run_decoder() {  # tag path input output prompts rates...
  local tag=$1 path=$2 input=$3 output=$4 prompts=$5
  shift 5
  for mode in continuous b1; do
    if [[ $mode == continuous ]]; then decoder_config "$tag-$mode" "$path" 16 512; else decoder_config "$tag-$mode" "$path" 1 512; fi
    start_server "$out/$tag-$mode.yaml"
    bench "$tag-$mode-warm.json" warm --num-prompts 4 --request-rate inf --input-len "$input" --output-len "$output" >/dev/null
    for rate in "$@"; do
      bench "$tag-$mode-r$rate.json" "$tag $mode rate $rate" --num-prompts "$prompts" --request-rate "$rate" \
        --input-len "$input" --output-len "$output" --seed 1
    done
    stop_server
  done
}
if want decoder; then
  run_decoder demo models/demo/kjv-decoder 64 64 160 4 8 16 32 64
fi
if want big && [[ -n $big ]]; then
  run_decoder 1b "$big" 64 16 12 0.3 0.8
fi

# 2. Encoder: dynamic batching vs none, closed loop.
want encoder && for mode in dynamic none; do
  if [[ $mode == dynamic ]]; then encoder_config "enc-$mode" 32 2000; else encoder_config "enc-$mode" 1 0; fi
  start_server "$out/enc-$mode.yaml"
  bench "enc-$mode-warm.json" warm --endpoint classify --num-prompts 32 --request-rate inf --input-len 60 >/dev/null
  for c in 1 4 16 64; do
    bench "enc-$mode-c$c.json" "encoder $mode concurrency $c" --endpoint classify --num-prompts $((c * 40 > 400 ? 400 : c * 40 < 100 ? 100 : c * 40)) \
      --request-rate inf --max-concurrency "$c" --input-len 60 --seed 1
  done
  stop_server
done

# 3. Encoder: max_queue_delay_us at a fixed arrival rate.
want delay && for delay in 0 1000 2500 5000 10000 15000 25000; do
  encoder_config "delay-$delay" 32 "$delay"
  start_server "$out/delay-$delay.yaml"
  bench "delay-$delay-warm.json" warm --endpoint classify --num-prompts 32 --request-rate inf --input-len 60 >/dev/null
  bench "delay-$delay.json" "delay $delay us" --endpoint classify --num-prompts 600 --request-rate 150 --input-len 60 --seed 1
  stop_server
done

python3 - "$out" <<'EOF'
import json, os, sys, glob
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
def dist(j, key):
    d = j.get(key) or j.get("metrics", {}).get(key) or {}
    return d
def g(j, *path):
    for k in path:
        j = j.get(k, {}) if isinstance(j, dict) else {}
    return j
def fmt(x, nd=1):
    return "-" if x in ({}, None) else f"{x:.{nd}f}"
lines = []
# Summaries are whatever keys the JSON has; find them generically.
def summary(j):
    flat = {}
    def walk(prefix, v):
        if isinstance(v, dict):
            for k, w in v.items(): walk(prefix + [k], w)
        else:
            flat[".".join(prefix)] = v
    walk([], j)
    return flat
def pick(flat, *cands):
    for c in cands:
        for k, v in flat.items():
            if k.endswith(c): return v
    return None
lines.append("## Decoder: continuous batching vs batch size 1\n")
for tag in ["demo", "1b"]:
    rows = sorted(glob.glob(os.path.join(out, f"{tag}-continuous-r*.json")))
    if not rows: continue
    lines.append(f"### {tag}\n")
    lines.append("| rate (req/s) | server | req/s | output tok/s | TTFT p50 | TTFT p99 | ITL p99 | E2E p99 (ms) | failed |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    rates = sorted({os.path.basename(r).split("-r")[-1][:-5] for r in rows}, key=float)
    for rate in rates:
        base = None
        for mode in ["continuous", "b1"]:
            j = load(f"{tag}-{mode}-r{rate}.json")
            if j is None: continue
            f = summary(j)
            thr = pick(f, "output_throughput", "output_tokens_per_s")
            lines.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                rate, mode, fmt(pick(f, "request_throughput"), 2), fmt(thr, 0),
                fmt(pick(f, "ttft_ms.p50", "ttft.p50")), fmt(pick(f, "ttft_ms.p99", "ttft.p99")),
                fmt(pick(f, "itl_ms.p99", "itl.p99")), fmt(pick(f, "e2e_ms.p99", "e2e.p99")),
                pick(f, "failed", "num_failed")))
    lines.append("")
lines.append("## Encoder: dynamic batching vs none (closed loop)\n")
lines.append("| concurrency | batching | req/s | E2E p50 | E2E p95 | E2E p99 (ms) |")
lines.append("|---|---|---|---|---|---|")
for c in [1, 4, 16, 64]:
    for mode in ["dynamic", "none"]:
        j = load(f"enc-{mode}-c{c}.json")
        if j is None: continue
        f = summary(j)
        lines.append("| {} | {} | {} | {} | {} | {} |".format(c, mode, fmt(pick(f, "request_throughput"), 1),
            fmt(pick(f, "e2e_ms.p50", "e2e.p50")), fmt(pick(f, "e2e_ms.p95", "e2e.p95")), fmt(pick(f, "e2e_ms.p99", "e2e.p99"))))
lines.append("")
lines.append("## Encoder: max_queue_delay_us at 150 req/s (Poisson)\n")
lines.append("| max_queue_delay_us | req/s | E2E p50 | E2E p95 | E2E p99 (ms) |")
lines.append("|---|---|---|---|---|")
for d in [0, 1000, 2500, 5000, 10000, 15000, 25000]:
    j = load(f"delay-{d}.json")
    if j is None: continue
    f = summary(j)
    lines.append("| {} | {} | {} | {} | {} |".format(d, fmt(pick(f, "request_throughput"), 1),
        fmt(pick(f, "e2e_ms.p50", "e2e.p50")), fmt(pick(f, "e2e_ms.p95", "e2e.p95")), fmt(pick(f, "e2e_ms.p99", "e2e.p99"))))
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
