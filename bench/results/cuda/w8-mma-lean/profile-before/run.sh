#!/bin/bash
# w8_mma variants at 1-64 rows (8B shapes), ncu of the kernel at 32 and 64 rows, and the 8-bit tests.
source .devpack/setup.sh
O=/tmp/r1; mkdir -p $O; cd /tmp; t0=$(date +%s)
el() { echo "$1 rc=$2 $(( $(date +%s)-t0 ))s"; }
nvidia-smi -L
for v in 0 3; do
  FERRY_W8_MMA_VARIANT=$v timeout 100 cuda_test --gtest_filter='GemmTest.W8*:CudaKernels.Quantize*:GemmTest.TunedChoice*' > $O/test-v$v.txt 2>&1; el test-v$v $?
  grep -E "^\[  (PASSED|FAILED)|tests ran|^\[  FAILED" $O/test-v$v.txt | head -8
done
for v in 0 1 2 3 4 0 3; do
  FERRY_W8_MMA_VARIANT=$v timeout 70 cuda_gemm_bench --w8 --model=8b --per-shape --layers=6 --ms=1,16,32,64 > $O/w8-8b-v$v-$SECONDS.txt 2>&1; el "bench v$v" $?
  grep -E "^\| [0-9]|gate_up|qkv|down|\bo \(" $O/w8-8b-v$v-*.txt | tail -20 | sed -E 's/\| (bf16|int8)[^|]*//g' | cut -c1-150 | tail -20
  (( $(date +%s)-t0 > 380 )) && break
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for cfg in 64:0 64:1 32:0; do
  m=${cfg%%:*}; v=${cfg#*:}
  (( $(date +%s)-t0 > 470 )) && break
  FERRY_W8_MMA_VARIANT=$v timeout 60 $NCU --set full -k regex:W8MmaKernel -c 4 cuda_gemm_bench --w8 --model=8b --layers=1 --ms=$m > $O/ncu-m$m-v$v.txt 2>&1; el "ncu m$m v$v" $?
  grep -E "W8MmaKernel|^    Duration|DRAM Throughput|L2 Cache Throughput|Achieved Occupancy|Block Limit Shared|Registers Per|Compute \(SM\) Th" $O/ncu-m$m-v$v.txt | sed 's/  */ /g' | head -40
done
cd /tmp && tar cJf $OUT/r1.tar.xz r1 && ls -la $OUT
