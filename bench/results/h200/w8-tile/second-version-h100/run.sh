#!/bin/bash
# The tile kernel with its scales in shared memory: tests and GEMM rates of three variants.
source .devpack/setup.sh
O=$OUT; cd /tmp; t0=$(date +%s)
for v in 0 1 2; do
  FERRY_W8_TILE_VARIANT=$v timeout 100 cuda_test --gtest_filter='GemmTest.W8MmaTile*:GemmTest.W8MmaInt8*' > $O/test-v$v.txt 2>&1; echo "test v$v rc=$? $(( $(date +%s)-t0 ))s"; grep -E "OK \]|FAILED" $O/test-v$v.txt | head -5
done
for v in 0 1 2; do
  FERRY_W8_TILE=1 FERRY_W8_TILE_VARIANT=$v timeout 100 cuda_gemm_bench --w8 --per-shape --layers=4 --ms=512,2048 > $O/gemm-8b-v$v.txt 2>&1; echo "8b v$v rc=$? $(( $(date +%s)-t0 ))s"
done
for v in 0 1 2; do
  FERRY_W8_TILE=1 FERRY_W8_TILE_VARIANT=$v timeout 60 cuda_gemm_bench --w8 --per-shape --layers=4 --model=bert --ms=4096 > $O/gemm-bert-v$v.txt 2>&1; echo "bert v$v rc=$? $(( $(date +%s)-t0 ))s"
done
for f in $O/gemm-*.txt; do echo "== $(basename $f)"; grep -E "^\| [0-9]|^\|   " $f | sed -E 's/\| bf16 [^|]*//; s/\[[^]]*\]//' ; done
