#!/usr/bin/env bash
# The fastest-runtime issue's checks sized to a 2-core machine, after aimed probes and the greedy
# shortcut: the default (k=auto) against llama.cpp's own loop, llama-cpp-python and our plain, one
# interleaved run per workload and temperature; then the speed checks of the three runs.
set -u
cd "$(dirname "$0")/../../.."
S=.venv/bin/specdecode
OUT=${OUT:-/tmp/b34b}; mkdir -p $OUT
M=plain,ngram,hybrid,llamacpp,llama-server
$S bench --workload code --limit 8 --max-new-tokens 64 --temperature 0 --k auto --methods $M \
  --target auto --draft auto --out $OUT/code-t0
$S bench --workload spec-bench --limit 12 --max-new-tokens 64 --temperature 0 --ignore-eos --k auto --methods $M \
  --target auto --draft auto --out $OUT/mix-t0
$S bench --workload code --limit 8 --max-new-tokens 64 --temperature 1 --ignore-eos --k auto --methods $M \
  --target auto --draft auto --out $OUT/code-t1
$S report $OUT/code-t0 $OUT/mix-t0 $OUT/code-t1 > $OUT/speed_checks.md
.venv/bin/python docs/results/zen3-check-34b/pass_ab.py > $OUT/pass_ab.txt
$S bench --workload code --limit 8 --max-new-tokens 64 --temperature 0 --k 2,4,auto --methods plain,ngram,hybrid \
  --target auto --draft auto --out $OUT/k-t0
$S report $OUT/k-t0 >> $OUT/speed_checks.md
