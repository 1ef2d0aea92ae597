#!/bin/bash
# One decode step at batch 1, kernel by kernel: 1B W8A8 against fp8.
source .devpack/setup.sh
O=$OUT/r13; mkdir -p $O
cd /tmp
t0=$(date +%s)
F=ferry
S1=/tmp/s1b; mkdir -p $S1
timeout 30 $F make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S1/ckpt > /dev/null; echo "ckpt $(( $(date +%s)-t0 ))s"
for p in fp8 int8; do timeout 60 $F build --model $S1/ckpt --device cuda --precision $p --calibration-tokens 2048 -o $S1/$p.ferry > $O/build-1b-$p.log 2>&1; echo "1b $p built rc=$? $(( $(date +%s)-t0 ))s"; done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for p in int8 fp8; do
  timeout 200 $NCU --clock-control none --metrics gpu__time_duration.sum --csv $F bench model --model $S1/$p.ferry --device cuda --eager --batch 1 --prompt-len 8 --decode-steps 4 --repeats 1 > $O/ncu-$p.csv 2> $O/ncu-$p.err; echo "ncu $p rc=$? $(( $(date +%s)-t0 ))s"
  python3 /work/main/tools/prof/ncu_table.py $O/ncu-$p.csv 40 step > $O/table-$p.txt 2>&1; cat $O/table-$p.txt
done
cd $OUT && tar cJf r13.tar.xz r13 && rm -rf r13
