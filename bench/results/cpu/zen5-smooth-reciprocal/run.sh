#!/bin/bash
# The SmoothQuant division -> product by the reciprocals, on the CPU: the binary before the
# change (BASE, 450d13f with this gemm_bench.cc) and after it (NEW), alternating, three rounds.
#   run.sh BASE_BUILD NEW_BUILD OUT
set -euo pipefail
BASE=$1 NEW=$2 OUT=$3; mkdir -p $OUT; cd $OUT
for r in 1 2 3; do for b in base new; do bin=$BASE; [ $b = new ] && bin=$NEW
  $bin/bench/gemm_bench --threads=2 --benchmark_filter='BM_Bert_w8a8_(smoothed|quantize)' --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_min_time=0.3s > r$r-$b.txt 2>&1
done; done
$NEW/ferry make-checkpoint --preset bert-base --dtype bf16 -o bert > /dev/null
$NEW/ferry build --model bert --precision int8 -o bert-int8.ferry > /dev/null
for r in 1 2 3; do for b in base new; do bin=$BASE; [ $b = new ] && bin=$NEW
  $bin/ferry bench model --model bert-int8.ferry --threads 2 --encoder-batch 32 --encoder-seq-len 128 --repeats 5 \
    --json > engine-e$r-$b.json 2>&1
done; done
# perf of one engine run per binary (perf-bert-int8.txt: base first, then new), and the new
# quantizer's hottest instructions (perf-annotate-quantize-new.txt):
for b in base new; do bin=$BASE; [ $b = new ] && bin=$NEW
  perf record -q -F 2000 -g -o perf-$b.data -- $bin/ferry bench model --model bert-int8.ferry --threads 2 \
    --encoder-batch 32 --encoder-seq-len 128 --repeats 5 > /dev/null 2>&1
  perf report -i perf-$b.data --no-children --sort symbol --stdio | grep -E "^ +[0-9]" | head -12
done > perf-bert-int8.txt
perf annotate -i perf-new.data --stdio -s "ferry::kernels::cpu::(anonymous namespace)::QuantizeRowQuads512" \
  | grep -E "^\s+[0-9]+\.[0-9]+" | sort -rn | head -12 > perf-annotate-quantize-new.txt
