#!/usr/bin/env bash
# The fastest-runtime issue's checks sized to a 2-core machine, after the cheaper sampler and the
# bench's thread-free memory peak: the default (k=auto) against llama.cpp's own loop (llama-server),
# llama-cpp-python and our plain, one interleaved run per workload and temperature; k=auto against
# fixed k at T = 1; then the speed checks of the runs.
set -u
cd "$(dirname "$0")/../../.."
S=.venv/bin/specdecode
OUT=${OUT:-/tmp/b36}; mkdir -p $OUT
M=plain,ngram,hybrid,llamacpp,llama-server
$S bench --workload code --limit 8 --max-new-tokens 64 --temperature 0 --k auto --methods $M \
  --target auto --draft auto --out $OUT/code-t0
$S bench --workload code --limit 8 --max-new-tokens 64 --temperature 1 --ignore-eos --k auto --methods $M \
  --target auto --draft auto --out $OUT/code-t1
$S bench --workload spec-bench --limit 12 --max-new-tokens 64 --temperature 1 --ignore-eos --k auto --methods $M \
  --target auto --draft auto --out $OUT/mix-t1
$S bench --workload code --limit 8 --max-new-tokens 64 --temperature 1 --ignore-eos --k 2,4,auto \
  --methods plain,ngram,hybrid --target auto --draft auto --out $OUT/k-t1
$S report $OUT/code-t0 $OUT/code-t1 $OUT/mix-t1 $OUT/k-t1 > $OUT/speed_checks.md
$S bench --workload spec-bench --limit 12 --max-new-tokens 64 --temperature 0 --ignore-eos --k auto --methods $M \
  --target auto --draft auto --out $OUT/mix-t0
$S report $OUT/mix-t0 >> $OUT/speed_checks.md
