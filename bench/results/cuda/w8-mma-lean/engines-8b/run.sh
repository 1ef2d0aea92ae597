#!/bin/bash
# 8B engines with the leaner w8_mma kernel: fp8 tuned with it up to 32 rows
# (FERRY_W8_MMA_TUNED_MAX_M=32) against fp8 tuned with it up to 16 (the default) and bf16.
source .devpack/setup.sh
O=/tmp/r3; mkdir -p $O; cd /tmp; t0=$(date +%s)
el() { echo "$1 rc=$2 $(( $(date +%s)-t0 ))s"; }
F=ferry; S=/tmp/s8b; mkdir -p $S
timeout 90 $F make-checkpoint --preset llama-3-8b --dtype bf16 -o $S/ckpt > /dev/null; el ckpt $?
FERRY_W8_MMA_TUNED_MAX_M=32 timeout 100 $F build --model $S/ckpt --device cuda --precision fp8 -o $S/fp8-32.ferry > $O/build-fp8-32.log 2>&1; el "fp8-32 built" $?
timeout 100 $F build --model $S/ckpt --device cuda --precision fp8 -o $S/fp8-16.ferry > $O/build-fp8-16.log 2>&1; el "fp8-16 built" $?
timeout 100 $F build --model $S/ckpt --device cuda --precision bf16 -o $S/bf16.ferry > $O/build-bf16.log 2>&1; el "bf16 built" $?
$F inspect $S/fp8-32.ferry > $O/inspect-fp8-32.txt 2>&1
grep -oE '"(route|choice)"[^,}]*' $O/inspect-fp8-32.txt | sort | uniq -c | head
for r in 1 2; do
  for p in fp8-32 fp8-16 bf16; do
    (( $(date +%s)-t0 > 540 )) && break
    timeout 45 $F bench model --model $S/$p.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1,8,16,32,64 --decode-context 512 --decode-steps 16 --repeats 3 --json > $O/r$r-$p.json 2>&1; el "r$r $p" $?
  done
done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/r*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(os.path.basename(f), 'bad', e); continue
    print(os.path.basename(f), 'prefill', round(r['prefill_tokens_per_s']), 'decode', [(d['batch'], round(d['tokens_per_s'])) for d in r['decode']])
PY
cd /tmp && tar cJf $OUT/r3.tar.xz r3 && ls -la $OUT
