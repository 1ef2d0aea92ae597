#!/usr/bin/env bash
# Prefix caching: 64 chats that share a 1,000-token system prompt, sent at once, with the
# prefix cache on and then off (batching.enable_prefix_caching), back to back in this one
# script on the same checkpoint. Reports each run's TTFT p50/p90 and wall time, the ratio,
# whether every chat's generated tokens are identical in both runs (greedy), and the
# server's ferry:prefix_cache_{queries,hits}_total.
#
# The model: `--preset demo-long` (the default) is the demo decoder itself with its
# config's max_position_embeddings raised to 4096, since its own context (512) cannot hold
# the system prompt (past 512 its RoPE extrapolates: the text is poor, the compute and the
# comparison are exact). Any other preset is a random-weight checkpoint of that shape
# (`ferry make-checkpoint`, e.g. llama-3.2-1b) with the demo decoder's tokenizer and chat
# template copied in; prompt ids stay below 4096, inside any preset's vocabulary.
#
# usage: bench/prefix_cache_bench.sh FERRY OUT_DIR [options]
#   --preset NAME        demo-long (default) or a make-checkpoint preset (llama-3.2-1b, ...)
#   --checkpoint DIR     use this checkpoint (with tokenizer files) instead of making one
#   --device DEV         cpu (default) or cuda
#   --chats N            concurrent chats (default 64)
#   --system-tokens N    shared system prompt length (default 1000)
#   --max-tokens N       generated tokens per chat (default 16)
#   --budget N           max_num_batched_tokens (default 2048; 8192 suits an H200)
#   --threads N          CPU compute threads (default 0: all cores)
# Run from the repository root. On the H200 (ferry built with CUDA):
#   bench/prefix_cache_bench.sh build/cuda/ferry /tmp/prefix-h200 --device cuda --preset llama-3.2-1b --budget 8192
set -euo pipefail
ferry=$(realpath "$1")
out=$(realpath -m "$2")
shift 2
preset=demo-long checkpoint="" device=cpu chats=64 system_tokens=1000 max_tokens=16 budget=2048 threads=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --preset) preset=$2; shift 2 ;;
    --checkpoint) checkpoint=$(realpath "$2"); shift 2 ;;
    --device) device=$2; shift 2 ;;
    --chats) chats=$2; shift 2 ;;
    --system-tokens) system_tokens=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
port=${PORT:-8397}
url="http://127.0.0.1:$port"

if [[ -z $checkpoint && $preset == demo-long ]]; then
  checkpoint="$out/model-demo-long"
  mkdir -p "$checkpoint"
  cp "$here"/models/demo/kjv-decoder/* "$checkpoint/"
  python3 - "$checkpoint/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["max_position_embeddings"] = 4096
json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
elif [[ -z $checkpoint ]]; then
  checkpoint="$out/model-$preset"
  if [[ ! -f $checkpoint/config.json ]]; then
    echo "making a $preset checkpoint (random bf16 weights) in $checkpoint" >&2
    "$ferry" make-checkpoint --arch llama --preset "$preset" --dtype bf16 -o "$checkpoint" >/dev/null
  fi
  for f in tokenizer.json tokenizer.model tokenizer_config.json chat_template.jinja; do
    cp "$here/models/demo/kjv-decoder/$f" "$checkpoint/"
  done
fi

run() {  # name caching
  local name=$1 caching=$2
  cat >"$out/$name.yaml" <<YAML
listener: {host: 127.0.0.1, port: $port}
auth: {mode: none}
models:
  - name: m
    path: $checkpoint
    device: $device
    threads: $threads
    batching:
      max_num_seqs: $chats
      max_num_batched_tokens: $budget
      max_seq_len: $((system_tokens + max_tokens + 256))
      max_queue_requests: 4096
      max_queue_time_ms: 0  # the burst is the measurement: nothing is shed
      enable_prefix_caching: $caching
log: {level: warn, request_log: false}
YAML
  # Refuse to measure a server left over from another run on the same port.
  if curl -sf "$url/health/live" >/dev/null 2>&1; then
    echo "something already answers on $url: stop it first" >&2
    exit 1
  fi
  "$ferry" serve --config "$out/$name.yaml" >"$out/$name.server.log" 2>&1 &
  local pid=$!
  trap "kill -TERM $pid 2>/dev/null || true" EXIT  # a failed run does not leave its server behind
  for _ in $(seq 1 6000); do
    curl -sf "$url/health/ready" >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || { cat "$out/$name.server.log"; exit 1; }
    sleep 0.1
  done
  # One short chat first, with another system prompt, so that nothing warms up while timed.
  curl -sf "$url/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model": "m", "messages": [{"role": "user", "content": "warm up"}], "max_tokens": 2}' >/dev/null
  echo "== prefix cache $caching: $chats chats, $system_tokens-token system prompt, $device" >&2
  python3 "$here/bench/prefix_cache_client.py" --url "$url" --model m --out "$out/$name.json" \
    --chats "$chats" --system-tokens "$system_tokens" --max-tokens "$max_tokens"
  curl -sf "$url/metrics" | grep -E '^ferry:prefix_cache_(queries|hits)_total' >"$out/$name.metrics" || true
  kill -TERM $pid
  wait $pid || true
}

run on true
run off false

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
on, off = (json.load(open(f"{out}/{n}.json")) for n in ("on", "off"))
same = all(a["token_ids"] == b["token_ids"] for a, b in zip(on["chats_out"], off["chats_out"]))
def metric(name, run):
    for line in open(f"{out}/{run}.metrics"):
        if line.startswith(name):
            return float(line.split()[-1])
    return 0.0
q, h = metric("ferry:prefix_cache_queries_total", "on"), metric("ferry:prefix_cache_hits_total", "on")
rows = [("TTFT p50 (ms)", "ttft_p50_s"), ("TTFT p90 (ms)", "ttft_p90_s"), ("TTFT max (ms)", "ttft_max_s"),
        ("E2E p50 (ms)", "e2e_p50_s"), ("wall (ms)", "wall_s")]
lines = [f"| metric | prefix cache on | off | off / on |", "|---|---|---|---|"]
for label, key in rows:
    lines.append(f"| {label} | {on[key] * 1000:.0f} | {off[key] * 1000:.0f} | {off[key] / on[key]:.2f}x |")
lines.append("")
lines.append(f"system prompt {on['system_prompt_tokens']} tokens, {on['chats']} chats, {on['max_tokens']} tokens each; "
             f"outputs identical: {'yes' if same else 'NO'}; prefix cache hits {h:.0f} of {q:.0f} prompt tokens "
             f"({100 * h / max(q, 1):.1f}%)")
text = "\n".join(lines)
print(text)
open(f"{out}/summary.md", "w").write(text + "\n")
json.dump({"ttft_p50_ratio": off["ttft_p50_s"] / on["ttft_p50_s"], "identical": same, "hits": h, "queries": q},
          open(f"{out}/summary.json", "w"))
sys.exit(0 if same else 3)
PY
