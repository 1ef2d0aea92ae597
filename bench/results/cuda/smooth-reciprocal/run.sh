#!/bin/bash
# SmoothQuant factors applied as a product by their reciprocals (was a division): tests; the
# bert-base int8 engine and the 1B W8A8 engine run by the binary before the change and after it,
# alternating, on the same engines, with fp16 / bf16 beside them; ncu of one bert int8 pass each.
LIMIT=${LIMIT:-540}
source .devpack/setup.sh  # unpacks the bundle: ferry (this change), ferry-base (450d13f), cuda_test
O=$OUT/c7; mkdir -p $O; cd /tmp
t0=$(date +%s); el() { echo "$(( $(date +%s)-t0 ))s $*"; }
left() { (( $(date +%s)-t0 < LIMIT )); }
S=/tmp/s7; mkdir -p $S
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
timeout 90 cuda_test --gtest_filter='CudaKernels.Quantize*:CudaKernels.RmsNormQuantize*:CudaKernels.LayerNormQuantize*:CudaKernels.ColumnMultiplier*:CudaLinearRoutesTest.*:GemmChoiceTest.*' > $O/test.txt 2>&1; el "test rc=$?"
grep -E "^\[  (FAILED|PASSED) |Failure" $O/test.txt | head -20
timeout 30 ferry make-checkpoint --preset bert-base --dtype bf16 -o $S/bert > /dev/null
timeout 60 ferry make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S/1b > /dev/null; el ckpts
b() { local ck=$1 name=$2 prec=$3; left || return; timeout 90 ferry build --model $S/$ck --device cuda --precision $prec --calibration-tokens 2048 -o $S/$name.ferry > $O/build-$name.log 2>&1; el "build $name rc=$?"; }
b bert bert-int8 int8; b bert bert-fp16 fp16
rb() { local r=$1 bin=$2 name=$3; left || return; timeout 30 $bin bench model --model $S/$name.ferry --device cuda --threads 1 --encoder-batch 32 --encoder-seq-len 128 --repeats 5 --json > $O/r$r-$name-$bin.json 2>&1; el "r$r $name $bin rc=$?"; }
for r in 1 2 3; do rb $r ferry-base bert-int8; rb $r ferry bert-int8; rb $r ferry bert-fp16; done
for bin in ferry-base ferry; do left || break; timeout 60 $NCU --metrics gpu__time_duration.sum --csv -c 250 $bin bench model --model $S/bert-int8.ferry --device cuda --threads 1 --encoder-batch 32 --encoder-seq-len 128 --repeats 1 > $O/ncu-bert-int8-$bin.csv 2>&1; el "ncu $bin rc=$?"; done
b 1b 1b-int8 int8; b 1b 1b-bf16 bf16
rd() { local r=$1 bin=$2 name=$3; left || return; timeout 60 $bin bench model --model $S/$name.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1,8,32 --decode-context 512 --decode-steps 32 --repeats 3 --json > $O/r$r-$name-$bin.json 2>&1; el "r$r $name $bin rc=$?"; }
for r in 1 2; do rd $r ferry-base 1b-int8; rd $r ferry 1b-int8; rd $r ferry 1b-bf16; done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/r*.json')):
    try: rs=json.load(open(f))
    except Exception as e: print(os.path.basename(f), 'bad', e); continue
    for r in rs: print(os.path.basename(f), {k: round(v) for k,v in r.items() if isinstance(v,(int,float)) and k.endswith('per_s')})
PY
el end
cd $OUT && tar cJf c7.tar.xz c7 && rm -rf c7
