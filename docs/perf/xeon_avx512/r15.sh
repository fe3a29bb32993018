#!/bin/bash
# Session 9: after the two k=auto fixes (acceptance from chances; bench auto learns from its own runs).
# #7: the whole code set greedy (and T=1 if time); #5: t2.py, k=auto at T=1 chances vs coins. Run alone.
set -x
cd /work/main
SD=.venv/bin/specdecode
O=/work/runs/r15
date
$SD bench --target default --draft llamacpp:default@q4_0,hf:default --methods plain,draft,hybrid,hf-assisted --k auto \
  --workload spec-bench,code --categories coding,code_completion --max-new-tokens 64 --temperature 0 \
  --draft-context 128 --out $O/code_T0 > $O/code_T0.log 2>&1
date
.venv/bin/python $O/t2.py $O/t2.jsonl 12 > $O/t2.log 2>&1
date
$SD bench --target default --draft llamacpp:default@q4_0,hf:default --methods plain,draft,hybrid,hf-assisted --k auto \
  --workload spec-bench,code --categories coding,code_completion --max-new-tokens 64 --temperature 1 \
  --draft-context 128 --out $O/code_T1 > $O/code_T1.log 2>&1
date
echo DONE
