#!/usr/bin/env bash
# The fastest-runtime issue's checks on a 2-core Xeon with AMX, with the llama.cpp build's kernels for
# passes of 2-8 tokens (make/llama-cpp-amx-rows.patch): `--target auto` and `--draft auto` (chosen and
# cached here), our default (hybrid k=auto) and the n-gram proposer at k = auto, 2, 4, 6, beside every
# peer in the same interleaved run on code: llama.cpp's plain loops (llama-cpp-python and llama-server
# on the target's GGUF, llama-cpp-python on the shipped Q4_K_M), llama-cpp-python's prompt lookup,
# llama-server's n-gram cache and draft model (the default draft's GGUF), and plain torch. One run per
# workload and temperature. Since xeon-amx-5: a draft's catch-up is priced by how many tokens it
# covers (a long prompt at what long catch-ups cost).
set -u
cd "$(dirname "$0")/../../.."
S=.venv/bin/specdecode
OUT=${OUT:-/tmp/xeon-amx-6}; mkdir -p $OUT
CODE=plain,ngram,hybrid,llamacpp,llamacpp-shipped,llamacpp-pld,llama-server,llama-server-ngram,llama-server-draft,plain-torch
for T in 0 1; do
  $S bench --workload code --limit 8 --max-new-tokens 64 --temperature $T --ignore-eos --k auto,2,4,6 --methods $CODE \
    --target auto --draft auto --out $OUT/code-t$T
done
for T in 0 1; do
  $S bench --workload spec-bench --limit 12 --max-new-tokens 64 --temperature $T --ignore-eos --k auto \
    --methods plain,ngram,hybrid,llamacpp --target auto --draft auto --out $OUT/mix-t$T
done
$S report $OUT/code-t0 $OUT/code-t1 $OUT/mix-t0 $OUT/mix-t1 > $OUT/speed_checks.md
