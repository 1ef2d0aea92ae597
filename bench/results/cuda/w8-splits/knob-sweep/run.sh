#!/bin/bash
# w8_mma knob sweep (stages, grid target, split depth) + cuda_test
source .devpack/setup.sh
O=/tmp/r1; mkdir -p $O; cd /tmp; t0=$(date +%s)
el() { echo "$1 rc=$2 $(( $(date +%s)-t0 ))s"; }
nvidia-smi -L
K=cuda_gemm_bench_k
cfgs="def W4 W5 W6 N5 N6 N3 T396 T528 T132 M4 M8"
envof() { case $1 in def) echo "";; W*) echo "FERRY_W8_STAGES_WIDE=${1#W}";; N*) echo "FERRY_W8_STAGES_NARROW=${1#N}";; T*) echo "FERRY_W8_TARGET_BLOCKS=${1#T}";; M*) echo "FERRY_W8_MIN_STAGES=${1#M}";; esac; }
for r in 1 2 3; do
  for c in $cfgs; do
    (( $(date +%s)-t0 > 260 )) && break
    for mdl in 8b 1b; do
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
        m=re.match(r'W8ONLY m=(\d+) total ([\d.]+)',line)
        if m: d[(mdl,c,int(m.group(1)))].append(float(m.group(2)))
for mdl in ('8b','1b'):
  ms=sorted({k[2] for k in d if k[0]==mdl})
  print(mdl, 'cfg', ' '.join('m=%d'%m for m in ms))
  base={m: st.median(d[(mdl,'def',m)]) for m in ms if d[(mdl,'def',m)]}
  for c in "def W4 W5 W6 N5 N6 N3 T396 T528 T132 M4 M8".split():
    row=[]
    for m in ms:
      v=d.get((mdl,c,m))
      row.append('%6.1f(%.3f)'%(st.median(v), base[m]/st.median(v)) if v else '   -   ')
    print(mdl, c.ljust(5), ' '.join(row))
PY
grep -h W8ONLY $O/8b-r1-def.txt
timeout 300 cuda_test > $O/cuda_test.txt 2>&1; el cuda_test $?
grep -E "^\[  (PASSED|FAILED) |^\[==========\]" $O/cuda_test.txt | tail -4
grep -E "^\[  FAILED  \]" $O/cuda_test.txt | sort -u | head -30
cd /tmp && tar cJf $OUT/r1.tar.xz r1 && ls -la $OUT
