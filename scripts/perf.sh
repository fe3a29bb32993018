#!/bin/bash
# The README's Performance tables: four bench runs, one after the other (run nothing else meanwhile).
# Usage: scripts/perf.sh OUT_DIR     (about 30 minutes on 2 cores; needs the llamacpp extra)
set -euo pipefail
OUT=${1:-perf-out}
SD=${SD:-.venv/bin/specdecode}
mkdir -p "$OUT"
$SD bench --target default --draft hf:default,llamacpp:default,llamacpp:default@q4_0 \
  --methods plain,draft,ngram,hf,hf-assisted,llamacpp,llamacpp-pld --k 4 \
  --workload spec-bench,code --categories coding,code_completion --limit 6 --max-new-tokens 64 \
  --temperature 0 --out "$OUT/code_t0"
$SD bench --target default --draft hf:default,llamacpp:default@q4_0 --methods plain,draft,ngram,hf-assisted,llamacpp \
  --k 4 --workload spec-bench --limit 6 --max-new-tokens 64 --temperature 0 --out "$OUT/mix_t0"
$SD bench --target default --draft hf:default,llamacpp:default@q4_0 --methods plain,draft,ngram --k 4 \
  --workload spec-bench,code --limit 7 --max-new-tokens 64 --temperature 1 --out "$OUT/t1"
$SD bench --target llamacpp:default --draft llamacpp:default@q4_0 --methods plain,draft,ngram,llamacpp,llamacpp-pld \
  --k 2,4 --workload spec-bench,code --limit 7 --max-new-tokens 64 --temperature 0 --out "$OUT/lc_target"
