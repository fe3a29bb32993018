#!/bin/bash
# Session 10 (#5): tune's per-category picks against a bench k sweep on the same prompts, T=1 then
# greedy, default pair, run alone. T=1: 18 prompts (3 per category); greedy: 12 (2 per category).
set -x
cd /work/main
SD=.venv/bin/specdecode
O=/work/runs/s10
date
$SD tune --workload spec-bench --limit 18 --max-new-tokens 48 --proposer draft,ngram --k 1,2,4,6 \
  --temperature 1 --measure best --json > $O/tune_T1.json 2> $O/tune_T1.log
date
$SD bench --workload spec-bench --limit 18 --max-new-tokens 48 --methods plain,draft,ngram,hybrid \
  --k 1,2,4,6,auto --temperature 1 --out $O/bench_T1 > $O/bench_T1.log 2>&1
date
.venv/bin/python scripts/k_check.py $O/tune_T1.json $O/bench_T1/results.json > $O/check_T1.md
$SD tune --workload spec-bench --limit 12 --max-new-tokens 48 --proposer draft,ngram --k 1,2,4,6 \
  --temperature 0 --measure best --json > $O/tune_T0.json 2> $O/tune_T0.log
date
$SD bench --workload spec-bench --limit 12 --max-new-tokens 48 --methods plain,draft,ngram,hybrid \
  --k 1,2,4,6,auto --temperature 0 --out $O/bench_T0 > $O/bench_T0.log 2>&1
date
.venv/bin/python scripts/k_check.py $O/tune_T0.json $O/bench_T0/results.json > $O/check_T0.md
echo DONE
