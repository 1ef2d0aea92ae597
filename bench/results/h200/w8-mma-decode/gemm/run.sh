#!/bin/bash
source .devpack/setup.sh
mkdir -p $OUT
cd /tmp
timeout 150 cuda_test --gtest_filter='GemmTest.W8Mma*:GemmTest.TunedChoice*' > $OUT/test.txt 2>&1
grep -E "^\[|Failure|Expected|Which is|differs|deterministic|padding|mismatch|INVALID|INTERNAL" $OUT/test.txt | cut -c1-250 | head -40
timeout 150 cuda_gemm_bench --w8 --model=8b --per-shape --layers=6 --ms=1,8,16,24,32,48,64 2>&1 | tee $OUT/w8-8b.txt
timeout 100 cuda_gemm_bench --w8 --model=1b --per-shape --layers=12 --ms=1,8,16,32,64 2>&1 | tee $OUT/w8-1b.txt
