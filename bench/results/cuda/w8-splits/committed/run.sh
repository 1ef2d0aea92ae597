#!/bin/bash
# The committed no-split rule (kUnsplitTiles) against the binaries of HEAD: 8-bit tests,
# cuda_gemm_bench --w8 totals (1B, 8B), 1B fp8 and int8 engines each built by its own binary.
source .devpack/setup.sh
O=/tmp/r3; mkdir -p $O; cd /tmp; t0=$(date +%s)
el() { echo "$1 rc=$2 $(( $(date +%s)-t0 ))s"; }
nvidia-smi -L
timeout 150 cuda_test --gtest_filter='GemmTest.W8*:GemmTest.TunedChoice*:GemmTest.Fp8*:CudaKernels.Quantize*' > $O/test.txt 2>&1; el test $?
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED" $O/test.txt | head -8
s() { grep -E "^\| [0-9]" $1 | awk -F'|' '{printf "m=%s bf16=%s lt=%s w8=%s tuned=%s i8w8=%s\n",$2,$3,$4,$5,$6,$9}'; }
for r in 1 2; do
  for b in base new; do
    [[ $r == 2 ]] && b=$([[ $b == base ]] && echo new || echo base)
    bin=cuda_gemm_bench; [[ $b == base ]] && bin=cuda_gemm_bench_base
    timeout 60 $bin --w8 --model=1b --layers=12 --ms=1,8,16,32,64 > $O/1b-r$r-$b.txt 2>&1; el "1b r$r $b" $?; s $O/1b-r$r-$b.txt
    [[ $r == 1 ]] && { timeout 60 $bin --w8 --model=8b --layers=6 --ms=1,16,64 > $O/8b-r$r-$b.txt 2>&1; el "8b r$r $b" $?; s $O/8b-r$r-$b.txt; }
  done
done
S=/tmp/s1b; mkdir -p $S
timeout 60 ferry make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S/ckpt > /dev/null; el ckpt $?
for b in base new; do
  bin=ferry; [[ $b == base ]] && bin=ferry_base
  for p in fp8 int8; do
    timeout 90 $bin build --model $S/ckpt --device cuda --precision $p -o $S/$p-$b.ferry > $O/build-$p-$b.log 2>&1; el "$p $b built" $?
  done
done
for r in 1 2 3; do
  for p in fp8 int8; do for b in base new; do
    [[ $r == 2 ]] && b=$([[ $b == base ]] && echo new || echo base)
    (( $(date +%s)-t0 > 540 )) && break
    bin=ferry; [[ $b == base ]] && bin=ferry_base
    timeout 40 $bin bench model --model $S/$p-$b.ferry --device cuda --prompt-len 512 --batch 1,8,16,32,64 --decode-context 512 --decode-steps 32 --repeats 3 --json > $O/e-r$r-$p-$b.json 2>$O/e-r$r-$p-$b.err; el "e r$r $p $b" $?
  done; done
done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/e-*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(os.path.basename(f),'bad',e); continue
    print(os.path.basename(f), 'decode', [(d['batch'], round(d['tokens_per_s'])) for d in r['decode']])
PY
cd /tmp && tar cJf $OUT/r3.tar.xz r3 && ls -la $OUT
