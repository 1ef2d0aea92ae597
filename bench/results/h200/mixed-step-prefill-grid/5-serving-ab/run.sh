#!/bin/bash
# Serving before / after the exact prefill grid, alternating: 8B fp8 (fp8 cache) at 512 and 1024 clients, 1B bf16 at 256
source .devpack/setup.sh
O=$OUT/r5; mkdir -p $O
F=$PWD/.device/bin/ferry; B=$PWD/.device/bin/ferry_base
t0=$(date +%s)
S=/tmp/s8b; mkdir -p $S
timeout 200 $F make-checkpoint --preset llama-3-8b --dtype bf16 -o $S/ckpt > /dev/null; echo "ckpt $(( $(date +%s)-t0 ))s"
timeout 200 $F build --model $S/ckpt --device cuda --precision fp8 -o $S/fp8.ferry > $O/build.log 2>&1; echo "built rc=$? $(( $(date +%s)-t0 ))s"
for c in 512 1024; do for b in new base; do
  X=$F; [[ $b == base ]] && X=$B
  KV=fp8 CONCURRENCY=$c PROMPTS_PER_CLIENT=6 timeout 150 bench/serve_closed_loop.sh $X $S/fp8.ferry $O 8b-$b; echo "$(( $(date +%s)-t0 ))s"
done; done
S1=/tmp/s1b; mkdir -p $S1
timeout 100 $F make-checkpoint --preset llama-3.2-1b --dtype bf16 -o $S1/ckpt > /dev/null
timeout 200 $F build --model $S1/ckpt --device cuda --precision bf16 -o $S1/bf16.ferry > $O/build1b.log 2>&1; echo "built 1b rc=$? $(( $(date +%s)-t0 ))s"
for b in new base; do
  X=$F; [[ $b == base ]] && X=$B
  CONCURRENCY=256 PROMPTS_PER_CLIENT=20 timeout 100 bench/serve_closed_loop.sh $X $S1/bf16.ferry $O 1b-$b; echo "$(( $(date +%s)-t0 ))s"
done
cd $OUT && tar cJf r5.tar.xz r5 && rm -rf r5
