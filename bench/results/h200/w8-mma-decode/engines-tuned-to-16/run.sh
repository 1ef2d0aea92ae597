#!/bin/bash
# Final: the w8 kernel offered up to 16 rows. 8B fp8 and 1B fp8 / int8 engines with and without it.
source .devpack/setup.sh
O=$OUT/final; mkdir -p $O
F=$PWD/.device/bin/ferry
t0=$(date +%s)
S=/tmp/s8b; S1=/tmp/s1b; mkdir -p $S $S1
timeout 60 $F make-checkpoint --preset llama-3-8b --dtype bf16 -o $S/ckpt > /dev/null
timeout 30 $F make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S1/ckpt > /dev/null; echo "ckpts $(( $(date +%s)-t0 ))s"
timeout 90 $F build --model $S/ckpt --device cuda --precision fp8 -o $S/fp8.ferry > $O/build-8b-fp8.log 2>&1; echo "8b fp8 built rc=$? $(( $(date +%s)-t0 ))s"
FERRY_W8_MMA=0 timeout 90 $F build --model $S/ckpt --device cuda --precision fp8 -o $S/fp8-lt.ferry > $O/build-8b-fp8-lt.log 2>&1; echo "8b fp8-lt built rc=$? $(( $(date +%s)-t0 ))s"
for p in bf16 fp8 int8; do timeout 60 $F build --model $S1/ckpt --device cuda --precision $p --calibration-tokens 2048 -o $S1/$p.ferry > $O/build-1b-$p.log 2>&1; echo "1b $p built rc=$? $(( $(date +%s)-t0 ))s"; done
for p in fp8 int8; do FERRY_W8_MMA=0 timeout 60 $F build --model $S1/ckpt --device cuda --precision $p --calibration-tokens 2048 -o $S1/$p-lt.ferry > $O/build-1b-$p-lt.log 2>&1; echo "1b $p-lt built rc=$? $(( $(date +%s)-t0 ))s"; done
$F inspect $S/fp8.ferry > $O/inspect-8b-fp8.json 2>&1
for r in 1 2; do
  for p in fp8 fp8-lt; do
    timeout 60 $F bench model --model $S/$p.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1,8,16,32 --decode-context 512 --decode-steps 16 --repeats 3 --json > $O/8b-r$r-$p.json 2>&1; echo "8b r$r $p rc=$? $(( $(date +%s)-t0 ))s"
  done
  for p in bf16 fp8 fp8-lt int8 int8-lt; do
    timeout 45 $F bench model --model $S1/$p.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1,8,16,32 --decode-context 512 --decode-steps 32 --repeats 3 --json > $O/1b-r$r-$p.json 2>&1; echo "1b r$r $p rc=$? $(( $(date +%s)-t0 ))s"
  done
done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/*-r*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(f, 'bad', e); continue
    print(os.path.basename(f), 'prefill', round(r['prefill_tokens_per_s']), 'decode', [(d['batch'], round(d['tokens_per_s'])) for d in r['decode']])
PY
cd $OUT && tar cJf final.tar.xz final && rm -rf final
