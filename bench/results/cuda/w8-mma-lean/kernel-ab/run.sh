#!/bin/bash
# The leaner w8_mma kernel (copy plan fixed outside the K loop, epilogue scales read once) against
# the kernel of HEAD (base_cuda_gemm_bench), 8B and 1B shapes, in alternation; variant 1 adds the
# L2 256-byte prefetch hint to the weight copies. Then the 8-bit tests and ncu at 64 rows.
source .devpack/setup.sh
O=/tmp/r2; mkdir -p $O; cd /tmp; t0=$(date +%s)
el() { echo "$1 rc=$2 $(( $(date +%s)-t0 ))s"; }
nvidia-smi -L
timeout 100 cuda_test --gtest_filter='GemmTest.W8*:CudaKernels.Quantize*:GemmTest.TunedChoice*' > $O/test.txt 2>&1; el test $?
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" $O/test.txt | head -8
FERRY_W8_MMA_VARIANT=1 timeout 100 cuda_test --gtest_filter='GemmTest.W8Mma*' > $O/test-v1.txt 2>&1; el test-v1 $?
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" $O/test-v1.txt | head -4
s() { grep -E "^\| [0-9]" $1 | awk -F'|' '{printf "m=%s lt=%s w8=%s i8w8=%s\n",$2,$4,$5,$9}'; }
for r in 1 2; do
  for b in base new new1; do
    bin=cuda_gemm_bench; v=0; [[ $b == base ]] && bin=base_cuda_gemm_bench; [[ $b == new1 ]] && v=1
    FERRY_W8_MMA_VARIANT=$v timeout 60 $bin --w8 --model=8b --per-shape --layers=6 --ms=1,8,16,32,64 > $O/8b-r$r-$b.txt 2>&1; el "8b r$r $b" $?; s $O/8b-r$r-$b.txt
  done
  for b in base new; do
    bin=cuda_gemm_bench; [[ $b == base ]] && bin=base_cuda_gemm_bench
    timeout 60 $bin --w8 --model=1b --per-shape --layers=12 --ms=1,8,16,32,64 > $O/1b-r$r-$b.txt 2>&1; el "1b r$r $b" $?; s $O/1b-r$r-$b.txt
  done
done
for r in 1 2; do for b in base new; do
  bin=cuda_gemm_bench; [[ $b == base ]] && bin=base_cuda_gemm_bench
  timeout 40 $bin --w8 --model=bert --per-shape --layers=4 --ms=512,4096 > $O/bert-r$r-$b.txt 2>&1; el "bert r$r $b" $?; s $O/bert-r$r-$b.txt
done; done
grep -E "^\| 64|^\| 32" -A4 $O/8b-r2-new.txt | cut -c1-170
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
timeout 60 $NCU --section SpeedOfLight --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats -k regex:W8MmaKernel -c 4 cuda_gemm_bench --w8 --model=8b --layers=1 --ms=64 > $O/ncu-m64.txt 2>&1; el ncu $?
grep -E "W8MmaKernel|^    Duration|DRAM Throughput|Executed Instructions  |Warp Cycles Per Issued|Achieved Active Warps" $O/ncu-m64.txt | sed 's/  */ /g' | cut -c1-110
cd /tmp && tar cJf $OUT/r2.tar.xz r2 && ls -la $OUT
