#!/bin/bash
# bert-base engines (fp32, int8) on the CPU: the one-panel tiles (ferry_cpu_old) against this build, alternating
set -x
O=/tmp/cpuab/out-bert; mkdir -p $O; S=/tmp/cpuck
NEW=/work/main/build/sm90/ferry; OLD=/tmp/base/ferry_cpu_old
[[ -d $S/bert ]] || $NEW make-checkpoint --preset bert-base --dtype f32 -o $S/bert > /dev/null
for p in fp32 int8; do [[ -f $S/bert-$p.ferry ]] || $NEW build --model $S/bert --precision $p -o $S/bert-$p.ferry > $O/build-$p.log 2>&1; done
for r in 1 2; do for p in fp32 int8; do for b in old new; do
  X=$NEW; [[ $b == old ]] && X=$OLD
  $X bench model --model $S/bert-$p.ferry --threads 2 --encoder-batch 32 --encoder-seq-len 128 --repeats 5 --json > $O/bert-$p-$b-r$r.json 2>&1
done; done; done
echo done
