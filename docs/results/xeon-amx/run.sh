#!/usr/bin/env bash
# The fastest-runtime issue's checks on a 2-core Xeon with AMX, llama.cpp built with its AMX kernels
# (the Makefile's probe chose them): `--target auto` and `--draft auto`, our default (hybrid k=auto)
# and the n-gram proposer at k = auto, 2, 4, 6 beside llama.cpp's plain loops (llama-server,
# llama-cpp-python on the target's GGUF) and, on code, llama.cpp's own speculation (llama-server's
# n-gram cache and draft model, llama-cpp-python's prompt lookup); one interleaved run per workload
# and temperature.
set -u
cd "$(dirname "$0")/../../.."
S=.venv/bin/specdecode
OUT=${OUT:-/tmp/xeon-amx}; mkdir -p $OUT
CODE=plain,ngram,hybrid,llamacpp,llama-server,llama-server-ngram,llama-server-draft,llamacpp-pld
MIX=plain,ngram,hybrid,llamacpp,llama-server
for T in 0 1; do
  $S bench --workload code --limit 8 --max-new-tokens 64 --temperature $T --ignore-eos --k auto,2,4,6 --methods $CODE \
    --target auto --draft auto --out $OUT/code-t$T
done
for T in 0 1; do
  $S bench --workload spec-bench --limit 12 --max-new-tokens 64 --temperature $T --ignore-eos --k auto --methods $MIX \
    --target auto --draft auto --out $OUT/mix-t$T
done
$S report $OUT/code-t0 $OUT/code-t1 $OUT/mix-t0 $OUT/mix-t1 > $OUT/speed_checks.md
