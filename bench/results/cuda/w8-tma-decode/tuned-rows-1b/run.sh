#!/bin/bash
# The decode kernel offered by the tuner up to 64 rows (FERRY_W8_MMA_TUNED_M=64) against 16, on
# 1B fp8 and int8 engines (bf16 baseline) and an 8B fp8 engine with the cp.async kernel; then
# one bert-base forward, kernel by kernel, fp16 against int8 (ncu).
LIMIT=${LIMIT:-330}
source .devpack/setup.sh
O=$OUT/t; mkdir -p $O; cd /tmp
t0=$(date +%s); el() { echo "$(( $(date +%s)-t0 ))s $*"; }
left() { (( $(date +%s)-t0 < LIMIT )); }
F=ferry; S=/tmp/s1; mkdir -p $S
timeout 60 $F make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S/1b > /dev/null; el "ckpt 1b rc=$?"
timeout 30 $F make-checkpoint --preset bert-base --dtype bf16 -o $S/bert > /dev/null; el "ckpt bert rc=$?"
b() { local ck=$1 name=$2 prec=$3; shift 3; left || return; env "$@" timeout 90 $F build --model $S/$ck --device cuda --precision $prec --calibration-tokens 2048 -o $S/$name.ferry > $O/build-$name.log 2>&1; el "build $name rc=$?"; }
b 1b fp8-t16 fp8 X=1; b 1b fp8-t64 fp8 FERRY_W8_MMA_TUNED_M=64; b 1b int8-t16 int8 X=1; b 1b int8-t64 int8 FERRY_W8_MMA_TUNED_M=64; b 1b bf16 bf16 X=1
run() { local r=$1 name=$2; left || return; [[ -f $S/$name.ferry ]] || return; timeout 40 $F bench model --model $S/$name.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1,8,16,32,64 --decode-context 512 --decode-steps 16 --repeats 3 --json > $O/r$r-$name.json 2>&1; el "r$r $name rc=$?"; }
for r in 1 2; do for n in fp8-t16 fp8-t64 int8-t16 int8-t64 bf16; do run $r $n; done; done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/r*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(os.path.basename(f), 'bad', e); continue
    print(os.path.basename(f), 'prefill', round(r['prefill_tokens_per_s']), 'decode', [(d['batch'], round(d['tokens_per_s'])) for d in r['decode']])
PY
for n in fp8-t64 int8-t64; do $F inspect $S/$n.ferry > $O/inspect-$n.json 2>&1; done
b bert bert-fp16 fp16 X=1; b bert bert-int8 int8 X=1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for n in bert-fp16 bert-int8; do left || break; [[ -f $S/$n.ferry ]] || continue
  timeout 90 $NCU --metrics gpu__time_duration.sum --csv -c 400 $F bench model --model $S/$n.ferry --device cuda --threads 1 --encoder-batch 32 --encoder-seq-len 128 --repeats 1 > $O/ncu-$n.csv 2>$O/ncu-$n.err; el "ncu $n rc=$?"
done
# (the summary of the two CSVs printed here is docs/performance.md's table, recomputed from them)
el end
cd $OUT && tar cJf t.tar.xz t && rm -rf t
