#!/usr/bin/env bash
# The fastest-runtime issue's checks sized to a 2-core machine, with `--target auto` (which chose
# onnx:default here) and `--draft auto`: our default (hybrid k=auto) and the n-gram proposer beside
# llama.cpp's plain loops (llama-server, llama-cpp-python on the Q4_0 GGUF) and, on code, llama.cpp's
# own speculation (llama-server's n-gram cache and draft model, llama-cpp-python's prompt lookup) and
# fixed k = 4; one interleaved run per workload and temperature.
set -u
cd "$(dirname "$0")/../../.."
S=.venv/bin/specdecode
OUT=${OUT:-/tmp/zen3-ort}; mkdir -p $OUT
CODE=plain,ngram,hybrid,llamacpp,llama-server,llama-server-ngram,llama-server-draft,llamacpp-pld
MIX=plain,ngram,hybrid,llamacpp,llama-server
for T in 0 1; do
  $S bench --workload code --limit 8 --max-new-tokens 64 --temperature $T --ignore-eos --k auto,4 --methods $CODE \
    --target auto --draft auto --out $OUT/code-t$T
done
for T in 0 1; do
  $S bench --workload spec-bench --limit 12 --max-new-tokens 64 --temperature $T --ignore-eos --k auto --methods $MIX \
    --target auto --draft auto --out $OUT/mix-t$T
done
$S report $OUT/code-t0 $OUT/code-t1 $OUT/mix-t0 $OUT/mix-t1 > $OUT/speed_checks.md
