#!/usr/bin/env bash
# The fastest-runtime issue's checks on this machine, one interleaved bench per workload and temperature
# (64 new tokens, prefill included, --ignore-eos): `--target auto` and `--draft auto` (chosen and cached
# on the first run), our default (hybrid-suffix k=auto), hybrid and the n-gram proposer at k = auto and the fixed CODE_K
# on code, beside every peer in the same run: llama.cpp's plain loops (llama-cpp-python and
# llama-server on the target's GGUF, llama-cpp-python on the shipped Q4_K_M), llama-cpp-python's
# prompt lookup, llama-server's n-gram cache and draft model (one server per k), and plain torch;
# then the Spec-Bench mix at MIX_LIMIT prompts (6 categories) beside llama.cpp's plain loop.
# Usage: docs/results/speed_checks.sh OUT   (env: CODE_K, default auto,2,3,4,6; MIX_LIMIT, default 12)
set -u
OUT=${1:?usage: speed_checks.sh OUT}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.."
S=${S:-.venv/bin/specdecode}
CODE=plain,ngram,hybrid,hybrid-suffix,llamacpp,llamacpp-shipped,llamacpp-pld,llama-server,llama-server-ngram,llama-server-draft,plain-torch
for T in 0 1; do
  $S bench --workload code --limit 8 --max-new-tokens 64 --temperature $T --ignore-eos --k "${CODE_K:-auto,2,3,4,6}" \
    --methods $CODE --target auto --draft auto --out "$OUT/code-t$T"
done
for T in 0 1; do
  $S bench --workload spec-bench --limit "${MIX_LIMIT:-12}" --max-new-tokens 64 --temperature $T --ignore-eos --k auto \
    --methods plain,ngram,hybrid,hybrid-suffix,llamacpp --target auto --draft auto --out "$OUT/mix-t$T"
done
$S report "$OUT/code-t0" "$OUT/code-t1" "$OUT/mix-t0" "$OUT/mix-t1" > "$OUT/speed_checks.md"
