#!/bin/bash
# Session 10 (#5): tune again after the draft scale and with the hybrid among its proposers, on the
# same prompts as r1's sweeps (bench_T1: 18 prompts; bench_T0: 12), checked against those sweeps. Run alone.
set -x
cd /work/main
SD=.venv/bin/specdecode
O=/work/runs/s10
date
$SD tune --workload spec-bench --limit 18 --max-new-tokens 48 --proposer draft,ngram,hybrid --k 1,2,4,6 \
  --temperature 1 --measure best --json > $O/tune3_T1.json 2> $O/tune3_T1.log
date
.venv/bin/python scripts/k_check.py $O/tune3_T1.json $O/bench_T1/results.json > $O/check3_T1.md
$SD tune --workload spec-bench --limit 12 --max-new-tokens 48 --proposer draft,ngram,hybrid --k 1,2,4,6 \
  --temperature 0 --measure best --json > $O/tune3_T0.json 2> $O/tune3_T0.log
date
.venv/bin/python scripts/k_check.py $O/tune3_T0.json $O/bench_T0/results.json > $O/check3_T0.md
echo DONE
# Then, for tune's default proposers (draft, ngram) with the same code, from the saved acceptance runs:
#   python redo.py tune3_T1.json redo_T1.json draft,ngram && python scripts/k_check.py redo_T1.json bench_T1_results.json
