#!/bin/bash
# The whole cuda_test (llama / qwen fixtures), then the 1B engines, three rounds.
source .devpack/setup.sh
O=$OUT/r14; mkdir -p $O
cd /tmp
t0=$(date +%s)
timeout 330 cuda_test > $O/cuda_test.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-t0 ))s"
grep -E "^\[  (PASSED|FAILED) |tests? ran|^\[  FAILED" $O/cuda_test.txt | head -20
F=ferry
S1=/tmp/s1b; mkdir -p $S1
timeout 30 $F make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S1/ckpt > /dev/null; echo "ckpt $(( $(date +%s)-t0 ))s"
for p in bf16 fp8 int8; do timeout 60 $F build --model $S1/ckpt --device cuda --precision $p --calibration-tokens 2048 -o $S1/$p.ferry > $O/build-1b-$p.log 2>&1; echo "1b $p built rc=$? $(( $(date +%s)-t0 ))s"; done
$F inspect $S1/int8.ferry > $O/inspect-int8.json 2>&1
for r in 1 2 3; do
  for p in bf16 fp8 int8; do
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
xz -9 $O/cuda_test.txt
cd $OUT && tar cJf r14.tar.xz r14 && rm -rf r14
