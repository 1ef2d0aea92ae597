#!/bin/bash
# 8B engines: fp8 with the TMA decode kernel (tuned to 16 rows, the default, and to 64 rows),
# fp8 with the cp.async decode kernel (built and run with FERRY_W8_DECODE_KERNEL=0), bf16.
LIMIT=${LIMIT:-530}
source .devpack/setup.sh
O=$OUT/e; mkdir -p $O; cd /tmp
t0=$(date +%s); el() { echo "$(( $(date +%s)-t0 ))s $*"; }
left() { (( $(date +%s)-t0 < LIMIT )); }
F=ferry; S=/tmp/s8b; mkdir -p $S
[[ -d $S/ckpt ]] || { timeout 120 $F make-checkpoint --preset llama-3-8b --dtype bf16 -o $S/ckpt > /dev/null; el "ckpt rc=$?"; }
b() { local name=$1 prec=$2; shift 2; left || return; [[ -f $S/$name.ferry ]] && return; env "$@" timeout 100 $F build --model $S/ckpt --device cuda --precision $prec -o $S/$name.ferry > $O/build-$name.log 2>&1; el "build $name rc=$?"; }
b fp8-tma16 fp8 X=1
b fp8-tma64 fp8 FERRY_W8_MMA_TUNED_M=64
b fp8-cp16 fp8 FERRY_W8_DECODE_KERNEL=0
b bf16 bf16 X=1
for n in fp8-tma64 fp8-tma16; do [[ -f $S/$n.ferry ]] && $F inspect $S/$n.ferry > $O/inspect-$n.json 2>&1; done
run() { local r=$1 name=$2; shift 2; left || return; [[ -f $S/$name.ferry ]] || return; env "$@" timeout 60 $F bench model --model $S/$name.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1,8,16,32,64 --decode-context 512 --decode-steps 16 --repeats 3 --json > $O/r$r-$name.json 2>&1; el "r$r $name rc=$?"; }
for r in 1 2; do
  run $r fp8-tma16 X=1; run $r fp8-cp16 FERRY_W8_DECODE_KERNEL=0; run $r fp8-tma64 X=1; run $r bf16 X=1
done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/r*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(os.path.basename(f), 'bad', e); continue
    print(os.path.basename(f), 'prefill', round(r['prefill_tokens_per_s']), 'decode', [(d['batch'], round(d['tokens_per_s'])) for d in r['decode']])
PY
el end
cd $OUT && tar cJf e.tar.xz e && rm -rf e
