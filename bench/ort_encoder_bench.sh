#!/usr/bin/env bash
# BERT encoders on the CPU against ONNX Runtime, in one script and one process tree:
#
#   bench/ort_encoder_bench.sh FERRY OUT_DIR [FIXTURES]
#
# 1. A bert-base-shape sequence classifier with random weights (`ferry make-checkpoint`, fp32,
#    the WordPiece vocabulary of FIXTURES/tokenizers/bert), and ferry engines of it: fp32, bf16,
#    int8-wo and int8 (W8A8), each build timed.
# 2. The same weights as ONNX graphs in the form ONNX Runtime's transformer optimizer gives
#    BERT (bench/ort_bert_onnx.py: EmbedLayerNormalization, Attention, SkipLayerNormalization,
#    BiasGelu; int8: QAttention and DynamicQuantizeMatMul with per-column weight scales, as
#    `quantize_dynamic` makes them), run by the official onnxruntime-node npm package on its CPU
#    execution provider (bench/ort_encoder_run.mjs).
# 3. A check that the ONNX fp32 graph is the model ferry runs: the logits of four texts from
#    both, which must agree to 1e-4.
# 4. ROUNDS rounds (default 2), each running every engine and ONNX Runtime one after another
#    (interleaved, so drift hits all alike) at each SHAPES batch x length (default "32x128
#    1x128"), THREADS threads (default 2), REPEATS timed runs each (default 5; medians with the
#    range). Sequences per second. BF16_ACTIVATIONS=1 (the default) also runs the bf16 engine
#    with bf16 activations (`--cpu-activations bf16`: its GEMMs and attention on vdpbf16ps or
#    AMX where the CPU has them), compared with ONNX Runtime's fp32 graph like the other rows.
#
# Needs: python3-onnx (Debian) for step 2, node, and onnxruntime-node installed with npm into
# ORT_DIR (default OUT_DIR/npm; the script runs `npm install onnxruntime-node@ORT_VERSION`
# there when it is missing, ORT_VERSION default 1.30.0). FERRY_BASELINE (optional): a second
# ferry binary whose engines (built by it) run in the same rounds, for before / after.
set -euo pipefail
ferry=$(realpath "$1")
out=$(realpath -m "$2")
fixtures=$(realpath "${3:-$(dirname "$0")/../../shared/fixtures}")
here=$(cd "$(dirname "$0")" && pwd)
rounds=${ROUNDS:-2}
shapes=${SHAPES:-32x128 1x128}
threads=${THREADS:-2}
repeats=${REPEATS:-5}
ort_version=${ORT_VERSION:-1.30.0}
ort_dir=${ORT_DIR:-$out/npm}
baseline=${FERRY_BASELINE:-}
bf16_x=${BF16_ACTIVATIONS:-1}
mkdir -p "$out"
log() { echo "[$(date +%T)] $*" >&2; }

if [[ ! -d $ort_dir/node_modules/onnxruntime-node ]]; then
  log "installing onnxruntime-node@$ort_version into $ort_dir"
  mkdir -p "$ort_dir"
  (cd "$ort_dir" && npm install --silent --no-audit --no-fund --ignore-scripts "onnxruntime-node@$ort_version" >/dev/null)
fi
export ORT_NODE_MODULES=$ort_dir/node_modules

ckpt=$out/bert-base
if [[ ! -f $ckpt/model.safetensors ]]; then
  log "checkpoint"
  "$ferry" make-checkpoint --preset bert-base --dtype fp32 --head sequence --labels 2 \
    --tokenizer "$fixtures/tokenizers/bert" -o "$ckpt" >/dev/null
fi
precisions="fp32 bf16 int8-wo int8"
build_all() {  # build_all BINARY SUFFIX
  local bin=$1 suffix=$2
  for p in $precisions; do
    local engine=$out/bert-$p$suffix.ferry
    [[ -f $engine ]] && continue
    local t0=$(date +%s.%N)
    timeout 600 "$bin" build --model "$ckpt" --precision "$p" --threads "$threads" -o "$engine" >/dev/null 2>&1
    log "built $engine in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s"
  done
}
build_all "$ferry" ""
[[ -n $baseline ]] && build_all "$baseline" "-baseline"
for p in fp32 int8; do
  if [[ ! -f $out/bert-$p.onnx ]]; then
    log "ONNX graph $p"
    flag=""
    [[ $p == int8 ]] && flag=--int8
    /usr/bin/python3 "$here/ort_bert_onnx.py" "$ckpt" "$out/bert-$p.onnx" $flag >/dev/null
  fi
done

log "checking the ONNX graph against ferry's logits"
texts=("The quick brown fox jumps over the lazy dog." "In the beginning God created the heaven and the earth."
       "Engines are preloaded and warmed before the server reports ready." "a b c d e f g h")
ids="["
ferry_logits="["
for t in "${texts[@]}"; do
  ids+=$("$ferry" tokenize --model "$ckpt" --special --text "$t" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ids"])'),
  ferry_logits+=$("$ferry" classify --model "$ckpt" --threads "$threads" --text "$t" | python3 -c 'import json,sys; print(json.load(sys.stdin)["logits"])'),
done
ids="${ids%,}]"
ferry_logits="${ferry_logits%,}]"
ort_logits=$(echo "$ids" | node "$here/ort_encoder_run.mjs" "$out/bert-fp32.onnx" logits 1)
python3 - "$ferry_logits" "$ort_logits" <<'EOF' | tee "$out/check.txt"
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
diff = max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))
print(f"max |ferry checkpoint - ONNX Runtime fp32| over {len(a)} texts' logits: {diff:.3g}")
sys.exit(0 if diff < 1e-4 else 1)
EOF

results=$out/results.jsonl
: > "$results"
for round in $(seq 1 "$rounds"); do
  for shape in $shapes; do
    b=${shape%x*}
    s=${shape#*x}
    for p in fp32 int8; do
      log "round $round $shape ONNX Runtime $p"
      r=$(node "$here/ort_encoder_run.mjs" "$out/bert-$p.onnx" bench "$b" "$s" "$threads" "$repeats")
      echo "{\"round\": $round, \"shape\": \"$shape\", \"runner\": \"onnxruntime $p\", \"result\": $r}" >> "$results"
    done
    # name:binary:model[:extra flags]
    models=("checkpoint:$ferry:$ckpt")
    for p in $precisions; do models+=("$p:$ferry:$out/bert-$p.ferry"); done
    [[ $bf16_x == 1 ]] && models+=("bf16, bf16 activations:$ferry:$out/bert-bf16.ferry:--cpu-activations bf16")
    if [[ -n $baseline ]]; then
      for p in $precisions; do models+=("$p-baseline:$baseline:$out/bert-$p-baseline.ferry"); done
      [[ $bf16_x == 1 ]] &&
        models+=("bf16-baseline, bf16 activations:$baseline:$out/bert-bf16-baseline.ferry:--cpu-activations bf16")
    fi
    for m in "${models[@]}"; do
      IFS=: read -r name bin model flags <<<"$m"
      log "round $round $shape ferry $name"
      # shellcheck disable=SC2086  # flags: words
      r=$("$bin" bench model --model "$model" --threads "$threads" --encoder-batch "$b" --encoder-seq-len "$s" \
            --repeats "$repeats" $flags --json | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)[0]))')
      echo "{\"round\": $round, \"shape\": \"$shape\", \"runner\": \"ferry $name\", \"result\": $r}" >> "$results"
    done
  done
done

python3 - "$results" <<'EOF' | tee "$out/table.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def rate(r):
    x = r["result"]
    return (x["median_seq_per_s"], x["min"], x["max"]) if "median_seq_per_s" in x else \
        (x["sequences_per_s"], *x["sequences_per_s_range"])
shapes = sorted({r["shape"] for r in rows}, key=lambda s: -int(s.split("x")[0]))
runners = list(dict.fromkeys(r["runner"] for r in rows))
rounds = sorted({r["round"] for r in rows})
for shape in shapes:
    print(f"\n{shape} (sequences/s, median of the runs [range]; one column a round)")
    ort = {(r["runner"], r["round"]): rate(r)[0] for r in rows if r["shape"] == shape and r["runner"].startswith("onnx")}
    for name in runners:
        cells, ratios = [], []
        for rd in rounds:
            m = [r for r in rows if r["shape"] == shape and r["runner"] == name and r["round"] == rd]
            if not m:
                continue
            med, lo, hi = rate(m[0])
            cells.append(f"{med:8.2f} [{lo:.2f}-{hi:.2f}]")
            peer = ort.get(("onnxruntime int8" if "int8" in name and "wo" not in name else "onnxruntime fp32", rd))
            if peer and not name.startswith("onnx"):
                ratios.append(f"{med / peer:.2f}x")
        peer_name = "ORT int8" if "int8" in name and "wo" not in name else "ORT fp32"
        print(f"  {name:28s} " + "  ".join(cells) + (f"   vs {peer_name}: " + " / ".join(ratios) if ratios else ""))
EOF
