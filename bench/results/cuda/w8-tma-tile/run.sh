#!/bin/bash
# TMA tile kernels: bytes against the cp.async kernel; per-shape times; W8A8 engines before/after
LIMIT=${LIMIT:-400}
source .devpack/setup.sh
O=$OUT/r; mkdir -p $O; cd /tmp
F=ferry; S=/tmp/s; mkdir -p $S
t0=$(date +%s); el() { echo "$(( $(date +%s)-t0 ))s $*"; }
left() { (( $(date +%s)-t0 < LIMIT )); }
timeout 90 gemm_test --gtest_filter='GemmTest.W8TmaTile*' > $O/test.txt 2>&1; rc=$?; el "test rc=$rc"
grep -E "^\[  (FAILED|PASSED|     OK) |Failure|Which is|TMA" $O/test.txt | head -20
vs="0 1 3"; [[ $rc == 124 ]] && vs="0"
g() { local model=$1 ms=$2 v=$3; FERRY_W8_TILE_KERNEL=$v timeout 45 cuda_gemm_bench --w8 --per-shape --layers=4 --model=$model --ms=$ms > $O/gemm-$model-v$v.txt 2>&1; el "gemm $model v$v rc=$?"; grep -E "^\| [0-9]" $O/gemm-$model-v$v.txt; }
for v in $vs; do g bert 512,4096 $v; done
[[ $rc == 124 ]] && exit 0
timeout 30 $F make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S/1b > /dev/null
timeout 30 $F make-checkpoint --preset bert-base --dtype bf16 -o $S/bert > /dev/null; el ckpts
b() { local v=$1 ck=$2 prec=$3 out=$4; left || return; FERRY_W8_TILE_KERNEL=$v timeout 60 $F build --model $S/$ck --device cuda --precision $prec --calibration-tokens 2048 -o $S/$out.ferry > $O/build-$out.log 2>&1; el "build $out rc=$?"; }
runbert() {
  local r=$1
  for e in bert-fp16:0 bert-int8-v0:0 bert-int8-v1:1 bert-int8-v1:3; do
    n=${e%%:*}; v=${e##*:}; left || return; [[ -f $S/$n.ferry ]] || continue
    FERRY_W8_TILE_KERNEL=$v timeout 30 $F bench model --model $S/$n.ferry --device cuda --threads 1 --encoder-batch 32 --encoder-seq-len 128 --repeats 5 --json > $O/r$r-$n-k$v.json 2>&1; el "r$r $n k$v rc=$?"
  done
}
run1b() {
  local r=$1
  for e in 1b-bf16:0 1b-int8-v0:0 1b-int8-v1:1 1b-int8-v1:3; do
    n=${e%%:*}; v=${e##*:}; left || return; [[ -f $S/$n.ferry ]] || continue
    FERRY_W8_TILE_KERNEL=$v timeout 30 $F bench model --model $S/$n.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1 --decode-context 64 --decode-steps 4 --repeats 5 --json > $O/r$r-$n-k$v.json 2>&1; el "r$r $n k$v rc=$?"
  done
}
b 0 bert fp16 bert-fp16; b 0 bert int8 bert-int8-v0; b 1 bert int8 bert-int8-v1
runbert 1
b 0 1b bf16 1b-bf16; b 0 1b int8 1b-int8-v0; b 1 1b int8 1b-int8-v1
run1b 1
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/r*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(os.path.basename(f), 'bad'); continue
    print(os.path.basename(f), {k: round(r[k]) for k in r if k.endswith('per_s')})
PY
left && for v in $vs; do left && g 8b 2048 $v; done
left && runbert 2; left && run1b 2
for n in bert-int8-v1 1b-int8-v1; do [[ -f $S/$n.ferry ]] && $F inspect $S/$n.ferry > $O/inspect-$n.json 2>&1; done
el end
cd $OUT && tar cJf r.tar.xz r && rm -rf r
