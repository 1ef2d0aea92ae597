#!/bin/bash
# The 12-row pair tile against the 6-row pair tile, alternating (1B-shape prefill and gemm_bench)
B=/tmp/base; O=/tmp/cpuab/out-12; mkdir -p $O
for r in 1 2; do
  for b in new new12; do
    $B/gemm_bench_$b --threads=2 --benchmark_filter='FmaPeak/avx512|_(f32|bf16|int8wo)/M:512|oneDNN_f32/M:512' --benchmark_min_time=1s --benchmark_repetitions=3 --benchmark_report_aggregates_only=true > $O/gemm-$b-r$r.txt 2>&1
  done
  for d in f32 bf16; do for b in new new12; do
    $B/ferry_cpu_$b bench model --model /tmp/cpuck/$d --threads 2 --prompt-len 512 --batch 1 --decode-steps 8 --decode-context 16 --repeats 3 --json > $O/model-$d-$b-r$r.json 2>&1
  done; done
done
echo done
