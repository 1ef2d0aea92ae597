#!/bin/bash
# Smoothing applied by the norm / gating in front of the unquantized small-M route; tests; 1B engines.
source .devpack/setup.sh
O=$OUT/r12; mkdir -p $O
cd /tmp
t0=$(date +%s)
timeout 200 cuda_test --gtest_filter='GemmTest.*:*SmallM*:*Linear*:*W8A8*:*Int8*:CudaKernels.*:*Fp8*' > $O/cuda_test.txt 2>&1; echo "tests rc=$? $(( $(date +%s)-t0 ))s"
grep -E "tests? ran|PASSED|FAILED" $O/cuda_test.txt | head -10
F=ferry; FO=ferry_old
S1=/tmp/s1b; mkdir -p $S1
timeout 30 $F make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S1/ckpt > /dev/null; echo "ckpt $(( $(date +%s)-t0 ))s"
for p in bf16 fp8 int8; do timeout 60 $F build --model $S1/ckpt --device cuda --precision $p --calibration-tokens 2048 -o $S1/$p.ferry > $O/build-1b-$p.log 2>&1; echo "1b $p built rc=$? $(( $(date +%s)-t0 ))s"; done
timeout 60 $FO build --model $S1/ckpt --device cuda --precision int8 --calibration-tokens 2048 -o $S1/int8-old.ferry > $O/build-1b-int8-old.log 2>&1; echo "1b int8-old built rc=$? $(( $(date +%s)-t0 ))s"
$F inspect $S1/int8.ferry > $O/inspect-int8.json 2>&1; $F inspect $S1/int8-old.ferry > $O/inspect-int8-old.json 2>&1
for r in 1 2 3; do
  for p in bf16 fp8 int8 int8-old; do
    B=$F; [[ $p == *-old ]] && B=$FO
    timeout 45 $B bench model --model $S1/$p.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1,8,16,32 --decode-context 512 --decode-steps 32 --repeats 3 --json > $O/1b-r$r-$p.json 2>&1; echo "1b r$r $p rc=$? $(( $(date +%s)-t0 ))s"
  done
done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/*-r*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(f, 'bad', e); continue
    print(os.path.basename(f), 'prefill', round(r['prefill_tokens_per_s']), 'decode', [(d['batch'], round(d['tokens_per_s'])) for d in r['decode']])
for n in ('inspect-int8.json','inspect-int8-old.json'):
    try: j=json.load(open(sys.argv[1]+'/'+n))
    except Exception as e: print(n,'bad',e); continue
    for sh in j['tuned']['linear_shapes']:
        print(n, sh['n'], sh['k'], [(b['m'], b['choice'][:7], round(b['us'],1)) for b in sh['buckets'][:5]])
PY
cd $OUT && tar cJf r12.tar.xz r12 && rm -rf r12
