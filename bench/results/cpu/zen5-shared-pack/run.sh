#!/bin/bash
# gemm_bench: the binary before (each thread packs its own rows) and after (rows packed once), alternating
cd "$(dirname "$0")"
F='BM_(Ferry|Bert)_(f32|bf16)/M:(512|4096)/'
for r in 1 2 3 4; do
  for b in base new; do
    [[ $r == 2 || $r == 4 ]] && b=$([[ $b == base ]] && echo new || echo base)
    gemm_bench_$b --threads=2 --benchmark_filter="$F" --benchmark_min_time=0.2 --benchmark_format=csv > gemm-r$r-$b.csv 2>/dev/null
    echo "r$r $b done $(date +%T)"
  done
done
