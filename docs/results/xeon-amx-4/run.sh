#!/usr/bin/env bash
# The fastest-runtime issue's checks on a 2-core Xeon with AMX, with the llama.cpp build's kernels for
# passes of 2-8 tokens (make/llama-cpp-amx-rows.patch) and k=auto seeded from the cached choices:
# `--target auto` and `--draft auto`, our default (hybrid k=auto) and the n-gram proposer at k = auto,
# 2, 4, 6 beside llama.cpp's plain loops (llama-cpp-python and llama-server on the target's GGUF) and
# llama-server's own n-gram cache; one interleaved run per workload and temperature. Since xeon-amx-3: a
# plain step samples on one torch thread, and --draft auto times each draft's prefill (the catch-up's price).
set -u
cd "$(dirname "$0")/../../.."
S=.venv/bin/specdecode
OUT=${OUT:-/tmp/xeon-amx-4}; mkdir -p $OUT
CODE=plain,ngram,hybrid,llamacpp,llama-server,llama-server-ngram
for T in 0 1; do
  $S bench --workload code --limit 8 --max-new-tokens 64 --temperature $T --ignore-eos --k auto,2,4,6 --methods $CODE \
    --target auto --draft auto --out $OUT/code-t$T
done
for T in 0 1; do
  $S bench --workload spec-bench --limit 12 --max-new-tokens 64 --temperature $T --ignore-eos --k auto \
    --methods plain,ngram,hybrid,llamacpp --target auto --draft auto --out $OUT/mix-t$T
done
$S report $OUT/code-t0 $OUT/code-t1 $OUT/mix-t0 $OUT/mix-t1 > $OUT/speed_checks.md
