#!/usr/bin/env bash
# The fastest-runtime issue, sized to this 2-core machine: code prompts, greedy, one interleaved run
# with the peers; then where a pass's time goes (specdecode profile) for our plain and our best.
set -u
cd "$(dirname "$0")/../../.."
S=.venv/bin/specdecode
OUT=${OUT:-/tmp/b34}; mkdir -p $OUT
date -u +%FT%TZ > $OUT/start
$S bench --workload code --limit 4 --max-new-tokens 64 --temperature 0 --k 4,auto \
  --methods plain,ngram,hybrid,llamacpp,llamacpp-shipped,llamacpp-pld,llama-server,llama-server-ngram \
  --target auto --draft auto --out $OUT/bench > $OUT/bench.txt 2>&1
echo "bench rc=$?" >> $OUT/bench.txt
$S profile --target auto --proposer none --k 0 --workload code --limit 3 --json > $OUT/profile-plain.json 2> $OUT/profile-plain.err
$S profile --target auto --draft auto --proposer hybrid --k auto --workload code --limit 3 --json > $OUT/profile-hybrid.json 2> $OUT/profile-hybrid.err
date -u +%FT%TZ > $OUT/end
