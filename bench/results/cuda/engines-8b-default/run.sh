#!/bin/bash
# llama-3-8B shape: the fp8 engine built with the defaults (the decode kernel tuned to 32 rows,
# 513-1024 rows a bucket of its own) against bf16: prefill of 1,024 and decode at 1-64.
LIMIT=${LIMIT:-500}
source .devpack/setup.sh
O=$OUT/c6; mkdir -p $O; cd /tmp
t0=$(date +%s); el() { echo "$(( $(date +%s)-t0 ))s $*"; }
left() { (( $(date +%s)-t0 < LIMIT )); }
F=ferry; S=/tmp/s8b; mkdir -p $S
[[ -d $S/ckpt ]] || { timeout 150 $F make-checkpoint --preset llama-3-8b --dtype bf16 -o $S/ckpt > /dev/null; el "ckpt rc=$?"; }
b() { local name=$1 prec=$2; left || return; [[ -f $S/$name.ferry ]] && return; timeout 150 $F build --model $S/ckpt --device cuda --precision $prec -o $S/$name.ferry > $O/build-$name.log 2>&1; el "build $name rc=$?"; }
b fp8 fp8; b bf16 bf16
[[ -f $S/fp8.ferry ]] && $F inspect $S/fp8.ferry > $O/inspect-fp8.json 2>&1
run() { local r=$1 name=$2; left || return; [[ -f $S/$name.ferry ]] || return; timeout 70 $F bench model --model $S/$name.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1,8,32,64 --decode-context 512 --decode-steps 16 --repeats 3 --json > $O/r$r-$name.json 2>&1; el "r$r $name rc=$?"; }
for r in 1 2; do run $r fp8; run $r bf16; done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/r*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(os.path.basename(f), 'bad', e); continue
    print(os.path.basename(f), 'prefill', round(r['prefill_tokens_per_s']), 'decode', [(d['batch'], round(d['tokens_per_s'])) for d in r['decode']])
PY
el end
cd $OUT && tar cJf c6.tar.xz c6 && rm -rf c6
