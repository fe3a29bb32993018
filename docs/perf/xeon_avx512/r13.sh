#!/bin/bash
# Session 9 (#7): the whole code set (Spec-Bench coding 10 + our completion set 24), greedy and T=1,
# and llama.cpp as the target with the AVX-512 build. Run alone.
set -x
cd /work/main
SD=.venv/bin/specdecode
O=/work/runs/r13
date
$SD bench --target default --draft llamacpp:default@q4_0,hf:default --methods plain,draft,hybrid,hf-assisted --k auto \
  --workload spec-bench,code --categories coding,code_completion --max-new-tokens 64 --temperature 0 \
  --draft-context 128 --out $O/code_T0 > $O/code_T0.log 2>&1
date
$SD bench --target llamacpp:default --draft llamacpp:default@q4_0 --methods plain,draft,ngram,hybrid,llamacpp,llamacpp-pld \
  --k 2,auto --workload spec-bench,code --limit 14 --max-new-tokens 64 --temperature 0 --out $O/lc_target > $O/lc_target.log 2>&1
date
$SD bench --target default --draft llamacpp:default@q4_0,hf:default --methods plain,draft,hybrid,hf-assisted --k auto \
  --workload spec-bench,code --categories coding,code_completion --max-new-tokens 64 --temperature 1 \
  --draft-context 128 --out $O/code_T1 > $O/code_T1.log 2>&1
date
echo DONE
