#!/bin/bash
# llama-3-8b shape: bf16, fp8 and W8A8 engines of the final build, decode at batch 1 / 8 / 32.
source .devpack/setup.sh
O=$OUT/r16; mkdir -p $O
cd /tmp
t0=$(date +%s)
F=ferry
S=/tmp/s8b; mkdir -p $S
timeout 90 $F make-checkpoint --preset llama-3-8b --dtype bf16 -o $S/ckpt > /dev/null; echo "ckpt $(( $(date +%s)-t0 ))s"
for p in bf16 fp8 int8; do timeout 150 $F build --model $S/ckpt --device cuda --precision $p --calibration-tokens 2048 -o $S/$p.ferry > $O/build-8b-$p.log 2>&1; echo "8b $p built rc=$? $(( $(date +%s)-t0 ))s"; done
$F inspect $S/int8.ferry > $O/inspect-8b-int8.json 2>&1
for r in 1 2; do
  for p in bf16 fp8 int8; do
    timeout 60 $F bench model --model $S/$p.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1,8,32 --decode-context 512 --decode-steps 16 --repeats 3 --json > $O/8b-r$r-$p.json 2>&1; echo "8b r$r $p rc=$? $(( $(date +%s)-t0 ))s"
  done
done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/*-r*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(f, 'bad', e); continue
    print(os.path.basename(f), 'prefill', round(r['prefill_tokens_per_s']), 'decode', [(d['batch'], round(d['tokens_per_s'])) for d in r['decode']])
PY
cd $OUT && tar cJf r16.tar.xz r16 && rm -rf r16
