#!/bin/bash
# The persistent 8-bit tile kernels and 513-1024 rows as a
# bucket of its own: tests; 1B and bert engines built with both, against bf16 / fp16; kernel by
# kernel; the tile kernel's variants per shape (cuda_gemm_bench --w8); ncu sections.
LIMIT=${LIMIT:-480}
source .devpack/setup.sh
O=$OUT/c4; mkdir -p $O; cd /tmp
t0=$(date +%s); el() { echo "$(( $(date +%s)-t0 ))s $*"; }
left() { (( $(date +%s)-t0 < LIMIT )); }
F=ferry; S=/tmp/s4; mkdir -p $S
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
timeout 60 cuda_test --gtest_filter='GemmTest.W8TmaTileKernels*:GemmChoiceTest.*:CudaLinearRoutesTest.*' > $O/test.txt 2>&1; el "test rc=$?"
grep -E "^\[  (FAILED|PASSED) |Failure" $O/test.txt | head -20
for v in 1 4; do for mdl in bert 1b; do left || break; ms=1024; [[ $mdl == bert ]] && ms=4096; FERRY_W8_TILE_KERNEL=$v timeout 60 cuda_gemm_bench --w8 --per-shape --layers=4 --model=$mdl --ms=$ms > $O/w8-$mdl-v$v.txt 2>&1; el "w8 $mdl v$v rc=$?"; done; done
timeout 60 $F make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S/1b > /dev/null
timeout 30 $F make-checkpoint --preset bert-base --dtype bf16 -o $S/bert > /dev/null; el ckpts
b() { local ck=$1 name=$2 prec=$3; left || return; timeout 90 $F build --model $S/$ck --device cuda --precision $prec --calibration-tokens 2048 -o $S/$name.ferry > $O/build-$name.log 2>&1; el "build $name rc=$?"; }
b bert bert-int8 int8; b bert bert-fp16 fp16; b 1b 1b-int8 int8; b 1b 1b-fp8 fp8; b 1b 1b-bf16 bf16
for n in 1b-int8 1b-fp8 bert-int8; do $F inspect $S/$n.ferry > $O/inspect-$n.json 2>&1; done
rb() { local r=$1 name=$2; shift 2; left || return; env "$@" timeout 30 $F bench model --model $S/$name.ferry --device cuda --threads 1 --encoder-batch 32 --encoder-seq-len 128 --repeats 5 --json > $O/r$r-$name$X.json 2>&1; el "r$r $name rc=$?"; }
r1b() { local r=$1 name=$2; left || return; timeout 40 $F bench model --model $S/$name.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1,32,64 --decode-context 512 --decode-steps 16 --repeats 3 --json > $O/r$r-$name.json 2>&1; el "r$r $name rc=$?"; }
for r in 1 2; do rb $r bert-int8; rb $r bert-fp16; X=-v1 rb $r bert-int8 FERRY_W8_TILE_KERNEL=1; for n in 1b-int8 1b-fp8 1b-bf16; do r1b $r $n; done; done
left && { timeout 60 $NCU --metrics gpu__time_duration.sum --csv -c 200 $F bench model --model $S/1b-int8.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1 --decode-context 16 --decode-steps 1 --repeats 1 > $O/ncu-1b-int8-prefill.csv 2>&1; el "ncu 1b rc=$?"; }
left && { timeout 60 $NCU --metrics gpu__time_duration.sum --csv -c 250 $F bench model --model $S/bert-int8.ferry --device cuda --threads 1 --encoder-batch 32 --encoder-seq-len 128 --repeats 1 > $O/ncu-bert-int8.csv 2>&1; el "ncu bert rc=$?"; }
for v in 3 5; do for mdl in bert 1b; do left || break; ms=1024; [[ $mdl == bert ]] && ms=4096; FERRY_W8_TILE_KERNEL=$v timeout 60 cuda_gemm_bench --w8 --per-shape --layers=4 --model=$mdl --ms=$ms > $O/w8-$mdl-v$v.txt 2>&1; el "w8 $mdl v$v rc=$?"; done; done
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy"
for v in 4; do left && { FERRY_W8_TILE_KERNEL=$v timeout 60 $NCU $SEC -k regex:W8Tma --launch-skip 2 -c 3 $F bench model --model $S/bert-int8.ferry --device cuda --threads 1 --encoder-batch 32 --encoder-seq-len 128 --repeats 1 > $O/ncu-w8tile-bert-v$v.txt 2>&1; el "ncu w8 v$v rc=$?"; }; done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/r*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(os.path.basename(f), 'bad', e); continue
    if 'decode' in r: print(os.path.basename(f), 'prefill', round(r['prefill_tokens_per_s']), 'decode', [(d['batch'], round(d['tokens_per_s'])) for d in r['decode']])
    else: print(os.path.basename(f), {k: round(v) for k,v in r.items() if k.endswith('per_s')})
PY
el end
cd $OUT && tar cJf c4.tar.xz c4 && rm -rf c4
