#!/bin/bash
# One decode step of the 1B shape at 32 and 64 sequences (512 tokens of context), bf16 against
# fp8 with the fp8 KV cache, kernel by kernel under ncu (each kernel alone, eager launches),
# and the same engines' graphed step times from `ferry bench model` beside it.
source .devpack/setup.sh
O=$OUT/g2; mkdir -p $O; R=$PWD
t0=$(date +%s); el() { echo "$(( $(date +%s)-t0 ))s $*"; }
S=/tmp/s1b; mkdir -p $S
timeout 100 ferry make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S/ckpt > /dev/null; el "ckpt rc=$?"
for e in bf16 fp8; do timeout 100 ferry build --model $S/ckpt --device cuda --precision $e -o $S/$e.ferry > $O/build-$e.log 2>&1; el "build $e rc=$?"; done
kv() { [[ $1 == fp8 ]] && echo fp8 || echo auto; }
for e in bf16 fp8; do
  timeout 60 ferry bench model --model $S/$e.ferry --device cuda --threads 1 --kv-cache-dtype $(kv $e) --prompt-len 512 --batch 32,64 --decode-context 512 --decode-steps 16 --repeats 3 --json > $O/graphed-$e.json 2>&1; el "graphed $e rc=$?"
done
for b in 32 64; do for e in bf16 fp8; do
  timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv ferry bench model --model $S/$e.ferry --device cuda --threads 1 --kv-cache-dtype $(kv $e) --eager --batch $b --prompt-len 8 --decode-context 512 --decode-steps 3 --repeats 1 > $O/ncu-$e-b$b.csv 2> $O/ncu-$e-b$b.err; el "ncu $e b$b rc=$?"
  python3 $R/tools/prof/ncu_table.py $O/ncu-$e-b$b.csv 40 step > $O/table-$e-b$b.txt 2>&1; head -14 $O/table-$e-b$b.txt
done; done
cd $OUT && tar cJf g2.tar.xz g2 && rm -rf g2
