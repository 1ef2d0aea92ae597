#!/bin/bash
# 8B engines: bf16, fp8 (and int8 if time allows), the 8-bit ones built with and without the w8 kernel in tuning
source .devpack/setup.sh
O=$OUT/e2e-8b; mkdir -p $O
F=$PWD/.device/bin/ferry
t0=$(date +%s)
S=/tmp/s8b; mkdir -p $S
timeout 60 $F make-checkpoint --preset llama-3-8b --dtype bf16 -o $S/ckpt > /dev/null; echo "ckpt $(( $(date +%s)-t0 ))s"
timeout 90 $F build --model $S/ckpt --device cuda --precision bf16 -o $S/bf16.ferry > $O/build-bf16.log 2>&1; echo "bf16 built rc=$? $(( $(date +%s)-t0 ))s"
timeout 90 $F build --model $S/ckpt --device cuda --precision fp8 -o $S/fp8.ferry > $O/build-fp8.log 2>&1; echo "fp8 built rc=$? $(( $(date +%s)-t0 ))s"
FERRY_W8_MMA=0 timeout 90 $F build --model $S/ckpt --device cuda --precision fp8 -o $S/fp8-lt.ferry > $O/build-fp8-lt.log 2>&1; echo "fp8-lt built rc=$? $(( $(date +%s)-t0 ))s"
$F inspect $S/fp8.ferry > $O/inspect-fp8.txt 2>&1
for r in 1 2; do
for p in bf16 fp8 fp8-lt; do
  timeout 60 $F bench model --model $S/$p.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1,8,32,128 --decode-context 512 --decode-steps 16 --repeats 3 --json > $O/r$r-$p.json 2>&1; echo "r$r $p rc=$? $(( $(date +%s)-t0 ))s"
done; done
if (( $(date +%s)-t0 < 300 )); then
  rm -f $S/bf16.ferry
  timeout 100 $F build --model $S/ckpt --device cuda --precision int8 --calibration-tokens 2048 -o $S/int8.ferry > $O/build-int8.log 2>&1; echo "int8 built rc=$? $(( $(date +%s)-t0 ))s"
  FERRY_W8_MMA=0 timeout 100 $F build --model $S/ckpt --device cuda --precision int8 --calibration-tokens 2048 -o $S/int8-lt.ferry > $O/build-int8-lt.log 2>&1; echo "int8-lt built rc=$? $(( $(date +%s)-t0 ))s"
  for p in int8 int8-lt; do
    timeout 60 $F bench model --model $S/$p.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1,8,32,128 --decode-context 512 --decode-steps 16 --repeats 3 --json > $O/r1-$p.json 2>&1; echo "r1 $p rc=$? $(( $(date +%s)-t0 ))s"
  done
fi
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/r*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(f, 'bad', e); continue
    print(os.path.basename(f), 'prefill', round(r['prefill_tokens_per_s']), 'decode', [(d['batch'], round(d['tokens_per_s'])) for d in r['decode']])
PY
cd $OUT && tar cJf e2e-8b.tar.xz e2e-8b && rm -rf e2e-8b
