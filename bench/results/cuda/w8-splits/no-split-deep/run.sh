#!/bin/bash
# w8_mma: no split for problems of a tile per multiprocessor (FERRY_W8_NOSPLIT=7: tiles >= 7/8 of 132),
# optionally with a deep pipeline there (FERRY_W8_DEEP=5|6); kernel totals in sequence, then 1B fp8 engines.
source .devpack/setup.sh
O=/tmp/r2; mkdir -p $O; cd /tmp; t0=$(date +%s)
el() { echo "$1 rc=$2 $(( $(date +%s)-t0 ))s"; }
nvidia-smi -L
K=cuda_gemm_bench_k2
cfgs="def NS7 NS7D5 NS7D6"
envof() { case $1 in def) echo "";; NS7) echo "FERRY_W8_NOSPLIT=7";; NS7D5) echo "FERRY_W8_NOSPLIT=7 FERRY_W8_DEEP=5";; NS7D6) echo "FERRY_W8_NOSPLIT=7 FERRY_W8_DEEP=6";; esac; }
for r in 1 2 3; do
  for c in $cfgs; do
    for mdl in 1b 8b; do
      [[ $mdl == 8b && $r == 3 ]] && continue
      L=6; [[ $mdl == 1b ]] && L=12
      env W8_ONLY=1 $(envof $c) timeout 40 $K --w8 --model=$mdl --layers=$L --ms=1,8,16,32,64 > $O/$mdl-r$r-$c.txt 2>&1 || echo "fail $mdl $c $?"
    done
  done
  el "round $r" 0
done
python3 - $O <<'PY'
import sys,glob,re,collections,os,statistics as st
d=collections.defaultdict(list)
for f in glob.glob(sys.argv[1]+'/*-r*-*.txt'):
    mdl,r,c=re.match(r'(\w+)-r(\d)-(\w+)\.txt',os.path.basename(f)).groups()
    for line in open(f):
        m=re.match(r'W8ONLY m=(\d+) total ([\d.]+) \|(.*)',line)
        if m:
            d[(mdl,c,int(m.group(1)),'total')].append(float(m.group(2)))
            p=m.group(3).split()
            for i in range(0,len(p),2): d[(mdl,c,int(m.group(1)),p[i])].append(float(p[i+1]))
for mdl in ('1b','8b'):
  for sh in ('total','gate_up'):
    print(mdl, sh)
    for c in "def NS7 NS7D5 NS7D6".split():
      print('  ',c.ljust(6),' '.join('%6.1f(%.3f)'%(st.median(d[(mdl,c,m,sh)]), st.median(d[(mdl,'def',m,sh)])/st.median(d[(mdl,c,m,sh)])) for m in (1,8,16,32,64)))
PY
F=ferry_k2; S=/tmp/s1b; mkdir -p $S
timeout 60 $F make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S/ckpt > /dev/null; el ckpt $?
timeout 60 $F build --model $S/ckpt --device cuda --precision fp8 -o $S/fp8-def.ferry > $O/build-def.log 2>&1; el "def built" $?
FERRY_W8_NOSPLIT=7 FERRY_W8_DEEP=6 timeout 60 $F build --model $S/ckpt --device cuda --precision fp8 -o $S/fp8-ns.ferry > $O/build-ns.log 2>&1; el "ns built" $?
FERRY_W8_TUNED_MAX_M=64 FERRY_W8_NOSPLIT=7 FERRY_W8_DEEP=6 timeout 60 $F build --model $S/ckpt --device cuda --precision fp8 -o $S/fp8-ns64.ferry > $O/build-ns64.log 2>&1; el "ns64 built" $?
FERRY_W8_TUNED_MAX_M=64 timeout 60 $F build --model $S/ckpt --device cuda --precision fp8 -o $S/fp8-def64.ferry > $O/build-def64.log 2>&1; el "def64 built" $?
for r in 1 2 3; do
  for c in def ns ns64 def64; do
    (( $(date +%s)-t0 > 540 )) && break
    e=""; [[ $c == ns* ]] && e="FERRY_W8_NOSPLIT=7 FERRY_W8_DEEP=6"
    env $e timeout 40 $F bench model --model $S/fp8-$c.ferry --device cuda --prompt-len 512 --batch 1,8,16,32,64 --decode-context 512 --decode-steps 32 --repeats 3 --json > $O/e-r$r-$c.json 2>$O/e-r$r-$c.err; el "e r$r $c" $?
  done
done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/e-*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(os.path.basename(f),'bad',e); continue
    print(os.path.basename(f), 'decode', [(d['batch'], round(d['tokens_per_s'])) for d in r['decode']])
PY
cd /tmp && tar cJf $OUT/r2.tar.xz r2 && ls -la $OUT
