#!/bin/bash
# The whole cuda_test suite (the fixtures that travel: bert-tiny, llama-tiny), then the 8B fp8
# engine served at 512 and 1,024 clients (128 in / 128 out, fp8 KV cache, closed loop).
source .devpack/setup.sh
O=$OUT/g1; mkdir -p $O; R=$PWD
t0=$(date +%s); el() { echo "$(( $(date +%s)-t0 ))s $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $O/gpu.txt
timeout 240 cuda_test --gtest_brief=1 > $O/cuda-test.txt 2>&1; el "cuda_test rc=$?"; grep -E "PASSED|FAILED" $O/cuda-test.txt | head -20
S=/tmp/s8b; mkdir -p $S
timeout 150 ferry make-checkpoint --preset llama-3-8b --dtype bf16 -o $S/ckpt > /dev/null; el "ckpt rc=$?"
timeout 150 ferry build --model $S/ckpt --device cuda --precision fp8 -o $S/fp8.ferry > $O/build.log 2>&1; el "build rc=$?"
for c in 512 1024; do
  KV=fp8 CONCURRENCY=$c PROMPTS_PER_CLIENT=6 timeout 100 bench/serve_closed_loop.sh $(which ferry) $S/fp8.ferry $O 8b-fp8; el "serve c=$c rc=$?"
done
cd $OUT && tar cJf g1.tar.xz g1 && rm -rf g1
