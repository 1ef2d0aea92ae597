#!/bin/bash
# W8A8 (int8) CPU engine of the llama-3.2-1b shape: prefill with the two-panel VNNI tile against the one-panel one
set -x
O=/tmp/cpuab/out-vnni; mkdir -p $O
NEW=/work/main/build/sm90/ferry; OLD=/tmp/base/ferry_cpu_new12
[[ -f /tmp/cpuck/int8.ferry ]] || $NEW build --model /tmp/cpuck/bf16 --precision int8 -o /tmp/cpuck/int8.ferry > $O/build.log 2>&1
for r in 1 2; do for b in old new; do
  X=$NEW; [[ $b == old ]] && X=$OLD
  $X bench model --model /tmp/cpuck/int8.ferry --threads 2 --prompt-len 512 --batch 1 --decode-steps 8 --decode-context 16 --repeats 3 --json > $O/model-int8-$b-r$r.json 2>&1
done; done
echo done
