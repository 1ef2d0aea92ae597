#!/bin/bash
# After the epilogue fix (one rounding for every 8-bit finish) and with the tile kernel offered to
# the tuner for int8: the CUDA tests, the 8-bit GEMMs per shape, and W8A8 engines built with and
# without the tile kernel (FERRY_W8_TILE=0) against the bf16 checkpoint.
source .devpack/setup.sh
O=$OUT; cd /tmp; t0=$(date +%s); F=ferry; S=/tmp/s; mkdir -p $S
el() { echo "$1 rc=$2 $(( $(date +%s)-t0 ))s"; }
nvidia-smi -L
timeout 150 cuda_test > $O/cuda-test.txt 2>&1; el cuda_test $?; grep -E "FAILED|tests from .* ran|PASSED" $O/cuda-test.txt | head -12
timeout 60 cuda_gemm_bench --w8 --per-shape --layers=4 --model=bert --ms=512,4096 > $O/gemm-bert.txt 2>&1; el gemm-bert $?
grep -hE "^\| [0-9]" $O/gemm-*.txt
for m in bert:bert-base 1b:llama-3.2-1b; do
  k=${m%%:*}; preset=${m#*:}
  timeout 120 $F make-checkpoint --preset $preset --dtype bf16 -o $S/$k > /dev/null 2>&1; el "ckpt $k" $?
  for v in tile notile; do
    if [[ $v == tile ]]; then t=""; else t=0; fi
    env ${t:+FERRY_W8_TILE=$t} timeout 150 $F build --model $S/$k --device cuda --precision int8 --calibration-tokens 2048 -o $S/$k-int8-$v.ferry > $O/build-$k-int8-$v.log 2>&1; el "build $k int8 $v" $?
  done
  $F inspect $S/$k-int8-tile.ferry > $O/inspect-$k-int8-tile.json 2>&1
done
for r in 1 2; do
  for e in $S/bert $S/bert-int8-tile.ferry $S/bert-int8-notile.ferry; do
    n=$(basename $e .ferry); a=""; [[ $n == bert ]] && a="--activations f16"
    timeout 60 $F bench model --model $e --device cuda --threads 1 $a --encoder-batch 32 --encoder-seq-len 128 --repeats 5 --json > $O/r$r-$n.json 2>&1; el "r$r $n" $?
  done
  for e in $S/1b $S/1b-int8-tile.ferry $S/1b-int8-notile.ferry; do
    n=$(basename $e .ferry)
    timeout 60 $F bench model --model $e --device cuda --threads 1 --prompt-len 1024 --batch 1 --decode-context 64 --decode-steps 4 --repeats 3 --json > $O/r$r-$n.json 2>&1; el "r$r $n" $?
  done
done
python3 - $O <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/r*.json')):
    try: r=json.load(open(f))[0]
    except Exception as e: print(os.path.basename(f), 'bad', open(f).read()[-300:]); continue
    keys={k:v for k,v in r.items() if 'per_s' in k}
    print(os.path.basename(f), {k:round(v) for k,v in keys.items()})
PY
