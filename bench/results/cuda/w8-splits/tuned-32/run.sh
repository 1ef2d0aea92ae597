#!/bin/bash
# The no-split rule (FERRY_W8_NOSPLIT=7, as committed) with the tuner offering the decode kernel up to
# 16 rows (default) or 32 (FERRY_W8_TUNED_MAX_M=32): 1B fp8 and int8 engines, routes and decode.
source .devpack/setup.sh
O=/tmp/r4; mkdir -p $O; cd /tmp; t0=$(date +%s)
el() { echo "$1 rc=$2 $(( $(date +%s)-t0 ))s"; }
nvidia-smi -L
export FERRY_W8_NOSPLIT=7
F=ferry_k2; S=/tmp/s1b; mkdir -p $S
timeout 60 $F make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S/ckpt > /dev/null; el ckpt $?
for t in 16 32; do for p in fp8 int8; do
  FERRY_W8_TUNED_MAX_M=$t timeout 90 $F build --model $S/ckpt --device cuda --precision $p -o $S/$p-$t.ferry > $O/build-$p-$t.log 2>&1; el "$p $t built" $?
  $F inspect $S/$p-$t.ferry > $O/inspect-$p-$t.txt 2>&1
done; done
grep -oE '"(w8|lt|lt_acc)[^"]*"' $O/inspect-fp8-32.txt | sort | uniq -c | head
for r in 1 2 3; do
  for p in fp8 int8; do for t in 16 32; do
    [[ $r == 2 ]] && t=$([[ $t == 16 ]] && echo 32 || echo 16)
    timeout 40 $F bench model --model $S/$p-$t.ferry --device cuda --prompt-len 512 --batch 1,8,16,32,64 --decode-context 512 --decode-steps 32 --repeats 3 --json > $O/e-r$r-$p-$t.json 2>$O/e-r$r-$p-$t.err; el "e r$r $p $t" $?
  done; done
done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/e-*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(os.path.basename(f),'bad',e); continue
    print(os.path.basename(f), 'decode', [(d['batch'], round(d['tokens_per_s'])) for d in r['decode']])
PY
cd /tmp && tar cJf $OUT/r4.tar.xz r4 && ls -la $OUT
