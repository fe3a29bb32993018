#!/bin/bash
# Every measurement the docs cite, in order, alone on the machine (each writes under OUT):
#   results   the README's results table (bench, default pair, greedy, peers in the same run)
#   svg       the server at concurrency 1 against generate (scripts/server_vs_generate.sh)
#   load      plain vs the hybrid llama.cpp-draft server at concurrency 1, 2, 4, 8 (load_test.sh)
#   soak      3000 requests with hang-ups on tiny models (tests/soak.py)
# Usage: scripts/measure_all.sh OUT [STEPS...]   (default: all four)
set -uo pipefail
OUT=${1:-measure-out}; shift || true
STEPS=${*:-results svg load soak}
SD=${SD:-.venv/bin/specdecode}
mkdir -p "$OUT"
for step in $STEPS; do
  start=$(date +%s)
  case $step in
    results)
      $SD bench --workload spec-bench,code --limit 7 --max-new-tokens 64 --temperature 0 --ignore-eos \
        --methods plain,draft,ngram,hybrid,hf-pld,hf-assisted,llamacpp,llamacpp-pld --k 4,auto \
        --draft llamacpp:default@q4_0,default --draft-context 128 --out "$OUT/results" > "$OUT/results.log" 2>&1 ;;
    svg) scripts/server_vs_generate.sh "$OUT/svg" 6 48 > "$OUT/svg.log" 2>&1 ;;
    load) SERVERS="plain hybrid-lc" scripts/load_test.sh "$OUT/load" 8 48 2 > "$OUT/load.log" 2>&1 ;;
    soak) .venv/bin/python tests/soak.py --requests 3000 --concurrency 8 --json > "$OUT/soak.json" 2> "$OUT/soak.log" ;;
    *) echo "unknown step $step" >&2 ;;
  esac
  echo "$step: exit $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/steps.log"
done
