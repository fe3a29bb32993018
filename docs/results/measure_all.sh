#!/bin/bash
# Every measurement the docs cite, in order, alone on the machine (each writes under OUT):
#   results   the README's results table, torch target (bench, default pair, greedy, peers in the same run)
#   results-lc  the same with the llama.cpp target and draft
#   load      plain vs the hybrid llama.cpp-draft server at concurrency 1, 2, 4, 8, llama.cpp target, paired
#   samplers  standard vs drafter-invariant sampling and token vs block verification, T = 1
#   soak      3000 requests with hang-ups on tiny models (tests/soak.py)
#   suffix    suffix vs ngram vs plain on the repetitive workload's 40 extractions, T = 0 and 1
#   suffix-mix  the same methods on Spec-Bench (2 prompts a category), T = 0 and 1
#   suffix-edit  the code-edit sessions (--turns all), llama.cpp target (fast enough for 4 x 4 turns)
#   suffix-serve  a suffix server fed the 40 extractions in order: first vs last quarter
#   curve     a target pass by width on every target runtime installed (specdecode profile curve)
#   draft-cost  a draft token per draft runtime and shortlist beside the Q4_0 target (specdecode profile draft-cost)
# Usage: docs/results/measure_all.sh OUT [STEPS...]   (default: results results-lc load soak samplers)
set -uo pipefail
OUT=${1:-measure-out}; shift || true
STEPS=${*:-results results-lc load soak samplers}
SD=${SD:-.venv/bin/specdecode}
mkdir -p "$OUT"
for step in $STEPS; do
  start=$(date +%s)
  case $step in
    results)
      $SD bench --workload spec-bench,code --limit 7 --max-new-tokens 64 --temperature 0 --ignore-eos \
        --methods plain,draft,ngram,hybrid,hf-pld,hf-assisted,llamacpp,llamacpp-pld --k 4,auto \
        --draft llamacpp:default@q4_0,default --draft-context 128 --out "$OUT/results" > "$OUT/results.log" 2>&1 ;;
    results-lc)
      $SD bench --workload spec-bench,code --limit 7 --max-new-tokens 64 --temperature 0 --ignore-eos \
        --target llamacpp:default --methods plain,draft,ngram,hybrid,llamacpp,llamacpp-pld --k 4,auto \
        --draft llamacpp:default@q4_0 --draft-context 128 --out "$OUT/results-lc" > "$OUT/results-lc.log" 2>&1 ;;
    load)
      $SD bench --serve "--target llamacpp:default --proposer none --max-batch 8" \
        --serve "--target llamacpp:default --proposer hybrid --draft llamacpp:default@q4_0 --k auto --draft-context 128 --max-batch 8" \
        --workload spec-bench --limit 12 --concurrency 1,2,4,8 --max-new-tokens 32 --ignore-eos \
        --out "$OUT/load" > "$OUT/load.log" 2>&1 ;;
    samplers)
      $SD bench --workload spec-bench --limit 6 --max-new-tokens 48 --temperature 1 --ignore-eos \
        --target llamacpp:default --methods plain,draft,hybrid --k 4 --sampler standard,invariant \
        --verifier token,block --draft llamacpp:default@q4_0 --draft-context 128 --out "$OUT/samplers" \
        > "$OUT/samplers.log" 2>&1 ;;
    suffix)
      $SD bench --workload repetitive --categories extraction --max-new-tokens 96 --temperature 0,1 \
        --methods plain,ngram,suffix --k auto --out "$OUT/suffix" > "$OUT/suffix.log" 2>&1 ;;
    suffix-mix)
      $SD bench --workload spec-bench --limit 12 --max-new-tokens 64 --temperature 0,1 \
        --methods plain,ngram,suffix --k auto --out "$OUT/suffix-mix" > "$OUT/suffix-mix.log" 2>&1 ;;
    suffix-edit)
      $SD bench --workload repetitive --categories code_edit --turns all --max-new-tokens 192 --temperature 0,1 \
        --target llamacpp:default --methods plain,ngram,suffix --k auto --out "$OUT/suffix-edit" \
        > "$OUT/suffix-edit.log" 2>&1 ;;
    curve) $SD profile curve --json > "$OUT/curve.json" 2> "$OUT/curve.log" ;;
    draft-cost) $SD profile draft-cost --target llamacpp:default@q4_0 --json > "$OUT/draft-cost.json" \
                  2> "$OUT/draft-cost.log" ;;
    suffix-serve)
      for scope in shared off; do
        $SD bench --serve "--proposer suffix --k auto --suffix-scope $scope" --workload repetitive \
          --categories extraction --requests 40 --concurrency 1 --max-new-tokens 96 --temperature 0 \
          --tokenizer default --out "$OUT/suffix-serve/$scope" > "$OUT/suffix-serve-$scope.log" 2>&1
      done ;;
    soak) .venv/bin/python tests/soak.py --requests 3000 --concurrency 8 > "$OUT/soak.json" 2> "$OUT/soak.log" ;;
    *) echo "unknown step $step" >&2 ;;
  esac
  echo "$step: exit $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/steps.log"
done
