#!/bin/bash
# (1) LayerNorm fused with the next linear's quantization: tests, the bert int8 engine with
# FERRY_FUSE_LAYERNORM=0/1 against fp16 (alternating), embeddings both ways; (2) ncu sections of
# the GELU quantization kernel; (3) 1B int8 and fp8 prefill of 1,024 tokens kernel by kernel.
LIMIT=${LIMIT:-420}
source .devpack/setup.sh
O=$OUT/c1; mkdir -p $O; cd /tmp
t0=$(date +%s); el() { echo "$(( $(date +%s)-t0 ))s $*"; }
left() { (( $(date +%s)-t0 < LIMIT )); }
F=ferry; S=/tmp/s1; mkdir -p $S
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
timeout 90 cuda_test --gtest_filter='CudaKernels.LayerNorm*:CudaKernels.Quantize*:CudaKernels.RmsNormQuantize*:CudaLinearRoutesTest.*' > $O/test.txt 2>&1; el "test rc=$?"
grep -E "^\[  (FAILED|PASSED) |Failure" $O/test.txt | head -20
timeout 30 $F make-checkpoint --preset bert-base --dtype bf16 -o $S/bert > /dev/null
timeout 60 $F make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S/1b > /dev/null; el ckpts
b() { local ck=$1 name=$2 prec=$3; left || return; timeout 90 $F build --model $S/$ck --device cuda --precision $prec --calibration-tokens 2048 -o $S/$name.ferry > $O/build-$name.log 2>&1; el "build $name rc=$?"; }
b bert bert-fp16 fp16; b bert bert-int8 int8
for f in 0 1; do FERRY_FUSE_LAYERNORM=$f timeout 20 $F embed --model $S/bert-int8.ferry --text "The quick brown fox jumps over the lazy dog, twice, and then sleeps." > $O/embed-f$f.txt 2>&1; el "embed f$f rc=$?"; done
cmp $O/embed-f0.txt $O/embed-f1.txt && echo "embeddings: identical" || echo "embeddings: DIFFER"; head -c 300 $O/embed-f1.txt; echo
rb() { local r=$1 name=$2 f=$3; left || return; FERRY_FUSE_LAYERNORM=$f timeout 30 $F bench model --model $S/$name.ferry --device cuda --threads 1 --encoder-batch 32 --encoder-seq-len 128 --repeats 5 --json > $O/r$r-$name-f$f.json 2>&1; el "r$r $name f$f rc=$?"; }
for r in 1 2 3; do rb $r bert-int8 0; rb $r bert-int8 1; rb $r bert-fp16 0; done
left && { FERRY_FUSE_LAYERNORM=1 timeout 60 $NCU --metrics gpu__time_duration.sum --csv -c 400 $F bench model --model $S/bert-int8.ferry --device cuda --threads 1 --encoder-batch 32 --encoder-seq-len 128 --repeats 1 > $O/ncu-bert-int8-f1.csv 2>&1; el "ncu f1 rc=$?"; }
left && { timeout 60 $NCU --section SpeedOfLight --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats -k regex:QuantizeRowsKernel -c 2 $F bench model --model $S/bert-int8.ferry --device cuda --threads 1 --encoder-batch 32 --encoder-seq-len 128 --repeats 1 > $O/ncu-gelu-quant.txt 2>&1; el "ncu gelu-quant rc=$?"; }
left && { timeout 60 $NCU --section SpeedOfLight --section Occupancy --section WarpStateStats -k regex:MapKernel -c 3 $F bench model --model $S/bert-fp16.ferry --device cuda --threads 1 --encoder-batch 32 --encoder-seq-len 128 --repeats 1 > $O/ncu-fp16-map.txt 2>&1; el "ncu fp16 map rc=$?"; }
b 1b 1b-fp8 fp8; b 1b 1b-int8 int8
for n in 1b-fp8 1b-int8; do left || break; timeout 90 $NCU --metrics gpu__time_duration.sum --csv -c 700 $F bench model --model $S/$n.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1 --decode-context 16 --decode-steps 1 --repeats 1 > $O/ncu-$n-prefill.csv 2>&1; el "ncu $n rc=$?"; done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/r*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(os.path.basename(f), 'bad', e); continue
    print(os.path.basename(f), {k: round(v) for k,v in r.items() if k.endswith('per_s')})
PY
el end
cd $OUT && tar cJf c1.tar.xz c1 && rm -rf c1
