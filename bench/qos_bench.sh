#!/usr/bin/env bash
# Elastic QoS benchmark: the same 1x -> 3x -> 1x burst against three servers of one model,
# back to back in this one run: static-top (the accurate variant alone), static-bottom (the
# fast variant alone) and a QoS variant group of both (gold pinned to the top by its floor,
# the controller moving the rest). Two tiers of traffic: gold (20 %) and silver (80 %), each
# with its own API key and SLO. Per ladder it writes TAG-{static-top,static-bottom,qos}.json
# (`ferry bench serve --save-requests`), TAG-quality.json (`ferry eval compare` of the two
# variants), TAG-timeline.jsonl (GET /admin/qos once a second during the QoS run),
# TAG-qos-server.log (the decision log lines), then bench/qos_report.py's TAG-summary.md and
# TAG-timeline.png (rate, active variant and pressure, p95 TTFT per tier).
#
# The base rate is measured, not guessed: a closed-loop run against static-top gives its
# capacity C, and 1x = RATE_FACTOR x C (default 0.4), so the 3x burst is 1.2 C: more than the
# top variant can serve.
#
# usage: bench/qos_bench.sh cpu FERRY OUT_DIR [LLAMA_1B_CHECKPOINT]
#          the demo decoder (bf16 checkpoint) over its int8 engine (`ferry build`); with a
#          llama-3.2-1b-shape checkpoint, also that shape (bf16 over int8)
#        bench/qos_bench.sh gpu FERRY OUT_DIR [SCRATCH_DIR]
#          on one GPU: a llama-3-8b-shape checkpoint (`ferry make-checkpoint`), its fp8 engine
#          (`ferry build --device cuda`), the 8B ladder bf16 over fp8
# Environment: GOMP_SPINCOUNT (cpu: 1000 for every server, see below), PHASE_S (seconds per phase; cpu 60, gpu 15), RATE_FACTOR (0.4), ROUNDS (cpu 2:
# top, bottom, qos, then qos, bottom, top, for a shared machine; gpu 1), TOP=engine
# (gpu: build and serve a bf16 engine as the top variant; by default the bf16 checkpoint
# is served, which keeps one call under 9 minutes), INACTIVE_STEP_MS (the QoS group's
# qos.inactive_step_ms: auto, off or milliseconds; default auto), STEP_TURNS (its
# qos.step_turns: auto, on or off; default auto), SHARE_CORES (its qos.share_cores: auto, on
# or off; default auto), BOTTOM_SEQS (the bottom
# variant's max_num_seqs wherever it is served, static-bottom and the group; default: the
# ladder's, 256 on the GPU), CAPACITY (req/s: skip the capacity run and use this), CONFIGS (a subset of
# "static-top static-bottom qos" to run; then no quality comparison and no report),
# CPU_LADDERS (cpu: "demo 1b" by default; the 1b ladder needs LLAMA_1B_CHECKPOINT),
# TOP_THREADS / BOTTOM_THREADS (the QoS group's variants' `threads`; default: the model's).
# Run from the repository root.
set -euo pipefail
mode=$1
ferry=$(realpath "$2")
out=$(realpath -m "$3")
extra=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
port=8393
url="http://127.0.0.1:$port"
rate_factor=${RATE_FACTOR:-0.4}
# The report plots with matplotlib where there is one (Debian's python3-matplotlib is for
# /usr/bin/python3); without it, it writes the tables and says how to plot elsewhere.
py=python3
/usr/bin/python3 -c "import matplotlib" 2>/dev/null && py=/usr/bin/python3
t_start=$(date +%s)
say() { echo "[qos_bench +$(($(date +%s) - t_start))s] $*"; }

# GET URL [BEARER_KEY]: the body, failing on an HTTP error (curl, or Python where there is none).
http_get() {
  if command -v curl >/dev/null 2>&1; then
    if [[ -n ${2:-} ]]; then curl -sf -H "Authorization: Bearer $2" "$1"; else curl -sf "$1"; fi
  else
    python3 -c "
import sys, urllib.request
req = urllib.request.Request(sys.argv[1])
if len(sys.argv) > 2: req.add_header('Authorization', 'Bearer ' + sys.argv[2])
sys.stdout.write(urllib.request.urlopen(req, timeout=10).read().decode())" "$@"
  fi
}

server_pid=
poll_pid=
cleanup() {
  [[ -n $poll_pid ]] && kill "$poll_pid" 2>/dev/null || true
  [[ -n $server_pid ]] && kill -TERM "$server_pid" 2>/dev/null || true
}
trap cleanup EXIT

start_server() {  # config log
  "$ferry" serve --config "$1" --port "$port" >"$2" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 6000); do
    http_get "$url/health/ready" >/dev/null 2>&1 && return 0
    kill -0 "$server_pid" 2>/dev/null || { tail -20 "$2"; return 1; }
    sleep 0.1
  done
  echo "server did not get ready"; tail -20 "$2"; return 1
}
stop_server() {
  kill -TERM "$server_pid"
  wait "$server_pid" || true
  server_pid=
}

# config FILE MODEL_YAML: the server config around one model entry; two tiers, two tenants.
write_config() {  # file gold_ttft gold_tpot silver_ttft silver_tpot top_name model_entry
  cat >"$1" <<EOF
listener: {host: 127.0.0.1, port: $port, shutdown_timeout_ms: 5000}
auth: {mode: keys, admin_keys: [sk-admin]}
tiers:
  gold: {priority: 1, min_variant: $6, slo: {ttft_ms: $2, tpot_ms: $3}}
  silver: {priority: 2, slo: {ttft_ms: $4, tpot_ms: $5}}
tenants:
  - {name: gold-tenant, tier: gold, keys: [sk-gold]}
  - {name: silver-tenant, tier: silver, keys: [sk-silver]}
models:
$7
log: {level: info, request_log: false}
EOF
}

# One ladder: TAG TITLE DEVICE TOP_NAME TOP_PATH BOTTOM_NAME BOTTOM_PATH INPUT OUTPUT PHASE_S
#   MAX_NUM_SEQS BUDGET GOLD_TTFT GOLD_TPOT SILVER_TTFT SILVER_TPOT WINDOW_S DWELL_S THREADS
run_ladder() {
  local tag=$1 title=$2 device=$3 top=$4 top_path=$5 bottom=$6 bottom_path=$7 input=$8 output=$9
  local phase=${10} seqs=${11} budget=${12} g_ttft=${13} g_tpot=${14} s_ttft=${15} s_tpot=${16}
  local window=${17} dwell=${18} threads=${19}
  local batching="{max_num_seqs: $seqs, max_num_batched_tokens: $budget, max_seq_len: $((input + output + 16)), max_queue_requests: 100000, max_queue_tokens: 100000000}"
  local common="    device: $device
    threads: $threads
    batching: $batching"
  local bottom_seqs=${BOTTOM_SEQS:-$seqs}
  local bottom_batching="{max_num_seqs: $bottom_seqs, max_num_batched_tokens: $budget, max_seq_len: $((input + output + 16)), max_queue_requests: 100000, max_queue_tokens: 100000000}"
  write_config "$out/$tag-static-top.yaml" "$g_ttft" "$g_tpot" "$s_ttft" "$s_tpot" "$top" \
    "  - name: m
    path: $top_path
$common"
  # The static servers have no variants: the gold floor names a variant only groups have.
  sed -i "s/, min_variant: $top//" "$out/$tag-static-top.yaml"
  write_config "$out/$tag-static-bottom.yaml" "$g_ttft" "$g_tpot" "$s_ttft" "$s_tpot" "$top" \
    "  - name: m
    path: $bottom_path
${common/$batching/$bottom_batching}"
  sed -i "s/, min_variant: $top//" "$out/$tag-static-bottom.yaml"
  write_config "$out/$tag-qos.yaml" "$g_ttft" "$g_tpot" "$s_ttft" "$s_tpot" "$top" \
    "  - name: m
$common
    qos: {window_s: $window, min_dwell_s: $dwell, slo: {ttft_ms: $s_ttft, tpot_ms: $s_tpot}, inactive_step_ms: ${INACTIVE_STEP_MS:-auto}, step_turns: ${STEP_TURNS:-auto}, share_cores: ${SHARE_CORES:-auto}}
    variants:
      - {name: $top, path: $top_path${TOP_THREADS:+, threads: $TOP_THREADS}}
      - {name: $bottom, path: $bottom_path, batching: $bottom_batching${BOTTOM_THREADS:+, threads: $BOTTOM_THREADS}}"

  local lengths=(--input-len "$input" --output-len "$output")
  local capacity rate burst
  if [[ -n ${CAPACITY:-} ]]; then
    capacity=$CAPACITY
    say "$tag: capacity of $top given: $capacity req/s"
  else
    # Capacity of the top variant alone: a closed loop of twice its batch.
    say "$tag: measuring the capacity of $top"
    start_server "$out/$tag-static-top.yaml" "$out/$tag-capacity-server.log"
    "$ferry" bench serve --url "$url" --model m --api-key sk-silver --no-progress "${lengths[@]}" \
      --max-concurrency $((2 * seqs)) --num-prompts $((8 * seqs)) --warmup "$seqs" --seed 7 \
      --json "$out/$tag-capacity.json" >"$out/$tag-capacity.txt"
    stop_server
    capacity=$(python3 -c "import json; print(json.load(open('$out/$tag-capacity.json'))['request_throughput'])")
  fi
  rate=$(python3 -c "print(round($capacity * $rate_factor, 3))")
  burst=$(python3 -c "print(round(3 * $rate, 3))")
  local schedule="$phase:$rate,$phase:$burst,$phase:$rate"
  say "$tag: capacity $capacity req/s; schedule $schedule"

  # Rounds alternate the order (top, bottom, qos, then qos, bottom, top, ...) so that a
  # machine whose load drifts during the run treats every configuration alike.
  local order=() r
  for ((r = 1; r <= rounds; r++)); do
    if ((r % 2 == 1)); then order+=("static-top:$r" "static-bottom:$r" "qos:$r"); else order+=("qos:$r" "static-bottom:$r" "static-top:$r"); fi
  done
  local item config round name
  for item in "${order[@]}"; do
    config=${item%%:*}
    round=${item##*:}
    [[ " ${CONFIGS:-static-top static-bottom qos} " == *" $config "* ]] || continue
    name=$config
    ((round > 1)) && name=$config-r$round
    say "$tag: $config (round $round; load average $(cut -d' ' -f1-3 /proc/loadavg))"
    cut -d' ' -f1-3 /proc/loadavg >"$out/$tag-$name.load"
    start_server "$out/$tag-$config.yaml" "$out/$tag-$name-server.log"
    if [[ $config == qos && $round == 1 ]]; then
      http_get "$url/admin/qos/m" sk-admin >"$out/$tag-qos-start.json"
      (while :; do
         body=$(http_get "$url/admin/qos/m" sk-admin | tr -d '\n') || true
         [[ -n $body ]] && echo "$(date +%s.%N) $body"
         sleep 1
       done) >"$out/$tag-timeline.jsonl" &
      poll_pid=$!
    fi
    "$ferry" bench serve --url "$url" --model m --no-progress "${lengths[@]}" --rate-schedule "$schedule" \
      --tier gold:0.2:sk-gold --tier silver:0.8:sk-silver \
      --tier-slo "gold:ttft=$g_ttft,tpot=$g_tpot" --tier-slo "silver:ttft=$s_ttft,tpot=$s_tpot" \
      --warmup 4 --seed 1 --timeout-s 600 --label "$tag $name" \
      --json "$out/$tag-$name.json" --save-requests >"$out/$tag-$name.txt"
    grep -E "tier |SLO attainment|Goodput|served by|Failed requests" "$out/$tag-$name.txt" | sed "s/^/  /"
    if [[ -n $poll_pid ]]; then
      kill "$poll_pid" 2>/dev/null || true
      wait "$poll_pid" 2>/dev/null || true
      poll_pid=
    fi
    [[ $config == qos ]] && { grep '"event":"qos_decision"' "$out/$tag-$name-server.log" >"$out/$tag-$name-decisions.jsonl" || true; }
    stop_server
  done

  if [[ -n ${CONFIGS:-} ]]; then
    say "$tag: only $CONFIGS run (CONFIGS); no quality comparison or report"
    return 0
  fi
  say "$tag: quality of $bottom against $top"
  local eval_device=()
  [[ $device != cpu ]] && eval_device=(--device "$device")
  "$ferry" eval compare --model "$bottom_path" --reference "$top_path" --random-prompts 8 --prompt-tokens 32 \
    --steps 32 "${eval_device[@]}" >"$out/$tag-quality.json"
  cat "$out/$tag-quality.json"

  local probe
  probe=$(python3 -c "
import json
v = json.load(open('$out/$tag-qos-start.json'))['variants']
print(round(v[1]['relative_cost'], 3) if 'relative_cost' in v[1] else 'n/a')")
  python3 - "$out/$tag-meta.json" <<EOF
import json, sys
schedule = [{"duration_s": $phase, "rate": $rate}, {"duration_s": $phase, "rate": $burst}, {"duration_s": $phase, "rate": $rate}]
json.dump({"title": "$title", "top": "$top", "bottom": "$bottom", "ladder": ["$top", "$bottom"],
           "schedule": schedule, "schedule_text": "$schedule", "rate": $rate, "capacity": $capacity, "burst_phase": 1,
           "tiers": ["gold", "silver"], "shares": [0.2, 0.8], "input_len": $input, "output_len": $output,
           "slo": {"gold": {"ttft_ms": $g_ttft, "tpot_ms": $g_tpot}, "silver": {"ttft_ms": $s_ttft, "tpot_ms": $s_tpot}},
           "downgrade_above": 0.85, "upgrade_below": 0.70, "window_s": $window, "min_dwell_s": $dwell,
           "probe_ratio": "$probe", "rounds": $rounds}, open(sys.argv[1], "w"), indent=1)
EOF
  "$py" "$here/qos_report.py" "$out" "$tag" | tee -a "$out/summary.md"
}

case $mode in
  cpu)
    # libgomp spins up to GOMP_SPINCOUNT (300,000) times at every barrier while it runs no
    # more OpenMP threads than there are CPUs, and only 1,000 times once it runs more. A QoS
    # group has one OpenMP team per variant, so it gets the short spin for free; a single
    # model spins at full count, which on a shared or oversubscribed CPU costs it several
    # times its throughput (measured: 3.7 vs 14.2 req/s for the same bf16 decoder on 2
    # loaded cores). The same spin count for every server keeps the comparison about the
    # controller.
    export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-1000}
    phase=${PHASE_S:-60}
    rounds=${ROUNDS:-2}
    if [[ " ${CPU_LADDERS:-demo 1b} " == *" demo "* ]]; then
      say "building the demo decoder's int8 engine"
      "$ferry" build --model models/demo/kjv-decoder --precision int8 -o "$out/kjv-int8.ferry" >/dev/null
      run_ladder demo "kjv-decoder on 2 CPU cores: bf16 checkpoint over int8 (W8A8) engine" cpu \
        bf16 "$(realpath models/demo/kjv-decoder)" int8 "$out/kjv-int8.ferry" 64 64 "$phase" 16 512 \
        300 50 1500 100 10 30 0
    fi
    if [[ -n $extra && " ${CPU_LADDERS:-demo 1b} " == *" 1b "* ]]; then
      # Silver's TTFT target (15 s) stays well under the queue-time limit (max_queue_time_ms,
      # 30 s by default, admission at 0.8 of it): with a target at the limit, requests are
      # refused before their pressure can move the group.
      say "building the llama-3.2-1b shape's int8 engine"
      "$ferry" build --model "$extra" --precision int8 --calibration-tokens 1024 -o "$out/llama-1b-int8.ferry" >/dev/null
      run_ladder 1b "llama-3.2-1b shape on 2 CPU cores: bf16 checkpoint over int8 (W8A8) engine" cpu \
        bf16 "$(realpath "$extra")" int8 "$out/llama-1b-int8.ferry" 32 16 "${PHASE_S:-90}" 4 128 \
        8000 1500 15000 3000 20 40 0
    fi
    ;;
  gpu)
    phase=${PHASE_S:-15}
    rounds=${ROUNDS:-1}
    scratch=${extra:-/tmp/ferry-qos-bench}
    mkdir -p "$scratch"
    ckpt="$scratch/llama-3-8b"
    if [[ ! -f $ckpt/config.json ]]; then
      say "making the llama-3-8b-shape checkpoint"
      "$ferry" make-checkpoint --preset llama-3-8b --dtype bf16 -o "$ckpt" >/dev/null
    fi
    # Engines already in SCRATCH_DIR (a second call on the same machine) are reused.
    top_path=$ckpt
    if [[ ${TOP:-checkpoint} == engine ]]; then
      top_path="$scratch/llama-3-8b-bf16.ferry"
      if [[ ! -f $top_path ]]; then
        say "building the bf16 engine"
        "$ferry" build --model "$ckpt" --device cuda --precision bf16 -o "$top_path.tmp" >/dev/null
        mv "$top_path.tmp" "$top_path"
      fi
    fi
    if [[ ! -f $scratch/llama-3-8b-fp8.ferry ]]; then
      say "building the fp8 engine"
      "$ferry" build --model "$ckpt" --device cuda --precision fp8 -o "$scratch/llama-3-8b-fp8.ferry.tmp" >/dev/null
      mv "$scratch/llama-3-8b-fp8.ferry.tmp" "$scratch/llama-3-8b-fp8.ferry"
    fi
    nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv || true
    # The fp8 variant takes twice the top's batch: while the two share the GPU (gold's floor on
    # bf16, the rest on fp8) each fp8 step costs more, and 128 sequences leave the burst queued
    # (79 % of static-bottom's goodput in bench/results/qos-h200/run3-*); 256 serve it.
    BOTTOM_SEQS=${BOTTOM_SEQS:-256}
    top_kind=checkpoint
    [[ ${TOP:-checkpoint} == engine ]] && top_kind=engine
    run_ladder 8b "llama-3-8b shape on one H200: bf16 $top_kind over fp8 engine" cuda \
      bf16 "$top_path" fp8 "$scratch/llama-3-8b-fp8.ferry" 128 128 "$phase" 128 4096 \
      300 40 1500 80 5 10 1
    ;;
  *)
    echo "usage: $0 cpu|gpu FERRY OUT_DIR [LLAMA_1B_CHECKPOINT | SCRATCH_DIR]"
    exit 2
    ;;
esac
say "done; summary in $out/summary.md"
