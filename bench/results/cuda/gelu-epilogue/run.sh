#!/bin/bash
# The GELU between bert's FFN GEMMs applied in the first GEMM's epilogue (8-bit W_out): tests;
# bert-base int8 and fp8 engines with FERRY_GELU_EPILOGUE=0 and =1 against fp16, alternating;
# ncu of one int8 pass; then the whole CUDA test binary.
LIMIT=${LIMIT:-480}
source .devpack/setup.sh
O=$OUT/c5; mkdir -p $O; cd /tmp
t0=$(date +%s); el() { echo "$(( $(date +%s)-t0 ))s $*"; }
left() { (( $(date +%s)-t0 < LIMIT )); }
F=ferry; S=/tmp/s5; mkdir -p $S
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
timeout 60 cuda_test --gtest_filter='CudaLinearRoutesTest.*:GemmChoiceTest.*' > $O/test.txt 2>&1; el "test rc=$?"
grep -E "^\[  (FAILED|PASSED) |Failure|rel\(" $O/test.txt | head -20
timeout 30 $F make-checkpoint --preset bert-base --dtype bf16 -o $S/bert > /dev/null; el ckpt
b() { local name=$1 prec=$2; left || return; timeout 90 $F build --model $S/bert --device cuda --precision $prec --calibration-tokens 2048 -o $S/$name.ferry > $O/build-$name.log 2>&1; el "build $name rc=$?"; }
b bert-int8 int8; b bert-fp16 fp16; b bert-fp8 fp8
rb() { local r=$1 name=$2 e=$3; left || return; FERRY_GELU_EPILOGUE=$e timeout 30 $F bench model --model $S/$name.ferry --device cuda --threads 1 --encoder-batch 32 --encoder-seq-len 128 --repeats 5 --json > $O/r$r-$name-e$e.json 2>&1; el "r$r $name e$e rc=$?"; }
for r in 1 2 3; do rb $r bert-int8 0; rb $r bert-int8 1; rb $r bert-fp8 0; rb $r bert-fp8 1; rb $r bert-fp16 1; done
left && { FERRY_GELU_EPILOGUE=1 timeout 60 $NCU --metrics gpu__time_duration.sum --csv -c 250 $F bench model --model $S/bert-int8.ferry --device cuda --threads 1 --encoder-batch 32 --encoder-seq-len 128 --repeats 1 > $O/ncu-bert-int8-e1.csv 2>&1; el "ncu rc=$?"; }
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/r*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(os.path.basename(f), 'bad', e); continue
    print(os.path.basename(f), {k: round(v) for k,v in r.items() if k.endswith('per_s')})
PY
left && { timeout 300 cuda_test > $O/cuda_test_all.txt 2>&1; el "all tests rc=$?"; grep -E "^\[  (FAILED|PASSED) " $O/cuda_test_all.txt | head -20; }
el end
cd $OUT && tar cJf c5.tar.xz c5 && rm -rf c5
