#!/bin/bash
# Warp-a-row activation quantization: tests, then the bert-base int8 engine with and without it
# (FERRY_QUANT_WARP_ROWS=0, the same engine) against fp16, alternating; ncu of one int8 forward;
# 1B engines built with the default tuning (decode kernel to 32 rows) against bf16.
LIMIT=${LIMIT:-240}
source .devpack/setup.sh
O=$OUT/q; mkdir -p $O; cd /tmp
t0=$(date +%s); el() { echo "$(( $(date +%s)-t0 ))s $*"; }
left() { (( $(date +%s)-t0 < LIMIT )); }
F=ferry; S=/tmp/sq; mkdir -p $S
timeout 90 cuda_test --gtest_filter='CudaKernels.Quantize*:CudaKernels.RmsNormQuantize*:GemmTest.W8*:GemmTest.TunedChoice*' > $O/test.txt 2>&1; el "test rc=$?"
grep -E "^\[  (FAILED|PASSED|     OK) |Failure" $O/test.txt | head -20
timeout 30 $F make-checkpoint --preset bert-base --dtype bf16 -o $S/bert > /dev/null
timeout 30 $F make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S/1b > /dev/null; el ckpts
b() { local ck=$1 name=$2 prec=$3; left || return; timeout 60 $F build --model $S/$ck --device cuda --precision $prec --calibration-tokens 2048 -o $S/$name.ferry > $O/build-$name.log 2>&1; el "build $name rc=$?"; }
b bert bert-fp16 fp16; b bert bert-int8 int8
rb() { local r=$1 name=$2 w=$3; left || return; FERRY_QUANT_WARP_ROWS=$w timeout 30 $F bench model --model $S/$name.ferry --device cuda --threads 1 --encoder-batch 32 --encoder-seq-len 128 --repeats 5 --json > $O/r$r-$name-w$w.json 2>&1; el "r$r $name w$w rc=$?"; }
for r in 1 2 3; do rb $r bert-int8 0; rb $r bert-int8 1; rb $r bert-fp16 1; done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for w in 1 0; do left || break; FERRY_QUANT_WARP_ROWS=$w timeout 60 $NCU --metrics gpu__time_duration.sum --csv -c 400 $F bench model --model $S/bert-int8.ferry --device cuda --threads 1 --encoder-batch 32 --encoder-seq-len 128 --repeats 1 > $O/ncu-bert-int8-w$w.csv 2>/dev/null; el "ncu w$w rc=$?"; done
b 1b fp8 fp8; b 1b int8 int8; b 1b bf16 bf16
r1b() { local r=$1 name=$2; left || return; [[ -f $S/$name.ferry ]] || return; timeout 40 $F bench model --model $S/$name.ferry --device cuda --threads 1 --prompt-len 1024 --batch 1,8,16,32,64 --decode-context 512 --decode-steps 16 --repeats 3 --json > $O/r$r-1b-$name.json 2>&1; el "r$r 1b $name rc=$?"; }
for r in 1 2; do for n in fp8 int8 bf16; do r1b $r $n; done; done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/r*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(os.path.basename(f), 'bad', e); continue
    if 'decode' in r: print(os.path.basename(f), 'prefill', round(r['prefill_tokens_per_s']), 'decode', [(d['batch'], round(d['tokens_per_s'])) for d in r['decode']])
    else: print(os.path.basename(f), {k: round(v) for k,v in r.items() if k.endswith('per_s')})
PY
for n in fp8 int8; do [[ -f $S/$n.ferry ]] && $F inspect $S/$n.ferry > $O/inspect-1b-$n.json 2>&1; done
el end
cd $OUT && tar cJf q.tar.xz q && rm -rf q
