#!/usr/bin/env bash
# The two earlier runs (new sampler, the bench's 5 ms memory-sampling thread still on).
set -u
cd "$(dirname "$0")/../../../.."
S=.venv/bin/specdecode
OUT=${OUT:-/tmp/b35}; mkdir -p $OUT
M=plain,ngram,hybrid,llamacpp,llama-server
$S bench --workload code --limit 8 --max-new-tokens 64 --temperature 1 --ignore-eos --k auto --methods $M \
  --target auto --draft auto --out $OUT/code-t1
$S bench --workload code --limit 8 --max-new-tokens 64 --temperature 0 --k auto --methods $M \
  --target auto --draft auto --out $OUT/code-t0
$S report $OUT/code-t0 $OUT/code-t1 > $OUT/speed_checks.md
