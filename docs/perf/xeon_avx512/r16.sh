#!/bin/bash
# Session 9 (#7): the mix again after the bench's k=auto fix, greedy, last 128 prompt tokens. Run alone, after r15.
while ! grep -q DONE /work/runs/r15/r15.log; do sleep 5; done
set -x
cd /work/main
date
.venv/bin/specdecode bench --target default --draft llamacpp:default@q4_0,hf:default --methods plain,draft,hybrid,hf-assisted \
  --k 4,auto --workload spec-bench --limit 12 --max-new-tokens 48 --temperature 0 --draft-context 128 \
  --out /work/runs/r16/mix_T0 > /work/runs/r16/mix_T0.log 2>&1
date
echo DONE
