#!/bin/bash
# 1B engines: bf16, fp8 and int8 (W8A8), the 8-bit ones built with and without the w8 kernel in tuning
source .devpack/setup.sh
O=$OUT/e2e-1b; mkdir -p $O
F=$PWD/.device/bin/ferry
t0=$(date +%s)
S1=/tmp/s1b; mkdir -p $S1
timeout 30 $F make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S1/ckpt > /dev/null; echo "ckpt $(( $(date +%s)-t0 ))s"
for p in bf16 fp8 int8; do timeout 70 $F build --model $S1/ckpt --device cuda --precision $p --calibration-tokens 2048 -o $S1/$p.ferry > $O/build-$p.log 2>&1; echo "1b $p built rc=$? $(( $(date +%s)-t0 ))s"; done
for p in fp8 int8; do FERRY_W8_MMA=0 timeout 70 $F build --model $S1/ckpt --device cuda --precision $p --calibration-tokens 2048 -o $S1/$p-lt.ferry > $O/build-$p-lt.log 2>&1; echo "1b $p-lt built rc=$? $(( $(date +%s)-t0 ))s"; done
for e in fp8 int8; do $F inspect $S1/$e.ferry > $O/inspect-$e.txt 2>&1; grep -c w8_mma $O/inspect-$e.txt; done
for r in 1 2; do
for p in bf16 fp8 fp8-lt int8 int8-lt; do
  timeout 45 $F bench model --model $S1/$p.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1,8,32,128 --decode-context 512 --decode-steps 32 --repeats 3 --json > $O/r$r-$p.json 2>&1; echo "r$r $p rc=$? $(( $(date +%s)-t0 ))s"
done; done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/r*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(f, 'bad', e); continue
    print(os.path.basename(f), 'prefill', round(r['prefill_tokens_per_s']), 'decode', [(d['batch'], round(d['tokens_per_s'])) for d in r['decode']])
PY
