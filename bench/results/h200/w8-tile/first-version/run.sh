#!/bin/bash
# The tile kernel: its tests, its registers, and the 8-bit GEMMs at prefill sizes, both variants.
source .devpack/setup.sh
O=$OUT; cd /tmp; t0=$(date +%s)
nvidia-smi -L
(cuobjdump --dump-resource-usage $(command -v cuda_gemm_bench) 2>&1 | grep -A1 "W8Tile" | grep -o "REG:[0-9]* STACK:[0-9]* SHARED:[0-9]* LOCAL:[0-9]*" | sort | uniq -c) > $O/regs.txt 2>&1; cat $O/regs.txt
timeout 240 cuda_test --gtest_filter='GemmTest.W8Mma*' > $O/test.txt 2>&1; echo "test rc=$? $(( $(date +%s)-t0 ))s"; grep -E "OK \]|FAILED|PASSED" $O/test.txt | head -20
for v in 0 1; do
  FERRY_W8_TILE=1 FERRY_W8_TILE_PIPELINED=$v timeout 150 cuda_gemm_bench --w8 --per-shape --layers=4 --ms=128,512,2048 > $O/gemm-8b-v$v.txt 2>&1; echo "8b v$v rc=$? $(( $(date +%s)-t0 ))s"
  FERRY_W8_TILE=1 FERRY_W8_TILE_PIPELINED=$v timeout 100 cuda_gemm_bench --w8 --per-shape --layers=4 --model=bert --ms=512,4096 > $O/gemm-bert-v$v.txt 2>&1; echo "bert v$v rc=$? $(( $(date +%s)-t0 ))s"
done
grep -h "^|" $O/gemm-*.txt | head -60
