#!/usr/bin/env bash
# The AVX2 rows kernels against llama.cpp's own, on one thread (a standalone copy of each kernel, checked
# bit for bit against a scalar reference with the same float steps), then the target's pass by width with
# the stock library, the Q4_0 kernel alone and both kernels, one process each, two rounds.
# Usage: docs/results/zen3-avx2-rows/run.sh LIBS   (LIBS/{stock,q4rows,both}: copies of llama_cpp/lib)
set -eu
LIBS=${1:?usage: run.sh LIBS}
HERE=$(cd "$(dirname "$0")" && pwd); cd "$HERE/../../.."
L=.venv/lib/python3.11/site-packages/llama_cpp/lib
for h in q4_0 q6_K; do
  g++ -O2 -mavx2 -mfma -mf16c -DROWMAX=8 -DSTOCK "$HERE/harness_$h.cpp" -o /tmp/harness_$h -L"$LIBS/stock" \
    -l:libggml-cpu.so -Wl,-rpath,"$LIBS/stock"
done
/tmp/harness_q4_0 1536 143360; /tmp/harness_q6_K 1536 151936
for round in 1 2; do
  for v in stock q4rows both; do
    cp -a "$LIBS/$v/." $L/
    .venv/bin/specdecode profile curve llamacpp:default@q4_0 --rounds 3 --widths 1,2,3,4,5,6,8 --json > "$HERE/curve-$v-r$round.json"
  done
done
cp -a "$LIBS/both/." $L/
