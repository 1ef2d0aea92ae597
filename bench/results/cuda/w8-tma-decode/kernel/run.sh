#!/bin/bash
# TMA decode kernel: the 8-bit tests, per-layer times against the cp.async kernel (alternating), ncu at 64 rows
LIMIT=${LIMIT:-420}
source .devpack/setup.sh
O=$OUT/r; mkdir -p $O; cd /tmp
t0=$(date +%s); el() { echo "$(( $(date +%s)-t0 ))s $*"; }
left() { (( $(date +%s)-t0 < LIMIT )); }
timeout 150 cuda_test --gtest_filter='GemmTest.W8*:GemmTest.TunedChoice*:GemmChoiceTest.*' > $O/test.txt 2>&1; rc=$?; el "test rc=$rc"
grep -E "^\[  (FAILED|PASSED|     OK) |Failure|Which is|TMA|default" $O/test.txt | head -30
s() { grep -E "^\| [0-9]" $1 | awk -F'|' '{printf "m=%s bf16=%s lt=%s w8=%s i8lt=%s i8w8=%s\n",$2,$3,$4,$5,$8,$9}'; }
g() { local model=$1 layers=$2 v=$3 r=$4; left || return; FERRY_W8_DECODE_KERNEL=$v timeout 60 cuda_gemm_bench --w8 --per-shape --layers=$layers --model=$model --ms=1,8,16,32,64 > $O/gemm-$model-v$v-r$r.txt 2>&1; el "gemm $model v$v r$r rc=$?"; s $O/gemm-$model-v$v-r$r.txt; }
for r in 1 2; do for v in 0 1; do g 8b 6 $v $r; done; for v in 0 1; do g 1b 12 $v $r; done; done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for m in 32 64; do left || break
FERRY_W8_DECODE_KERNEL=1 timeout 60 $NCU --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats -k regex:W8MmaTmaKernel -c 4 cuda_gemm_bench --w8 --model=8b --layers=1 --ms=$m > $O/ncu-m$m.txt 2>&1; el "ncu m$m rc=$?"
grep -E "W8MmaTmaKernel|^    Duration|DRAM Throughput|Warp Cycles Per Issued|Achieved Active Warps|Grid Size|Cluster Size" $O/ncu-m$m.txt | sed 's/  */ /g' | cut -c1-110
done
left && { timeout 200 cuda_test > $O/cuda_test_all.txt 2>&1; el "all cuda_test rc=$?"; grep -E "^\[  (FAILED|PASSED) |tests ran" $O/cuda_test_all.txt | head -12; }
el end
cd $OUT && tar cJf r.tar.xz r && rm -rf r
