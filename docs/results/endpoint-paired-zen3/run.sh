#!/usr/bin/env bash
# The endpoints issue's floor check: paired endpoint bench (ours spec vs ours plain) against the in-process bench, c=1.
set -u
cd "$(dirname "$0")/../../.."
S=.venv/bin/specdecode
T=llamacpp:default@q4_0
D=llamacpp:default@q4_0+v32k
OUT=${OUT:-/tmp/p35}; mkdir -p $OUT
date -u +%FT%TZ > $OUT/start
$S serve --target $T --draft $D --proposer hybrid --k auto --port 8101 --max-batch 1 --served-model-name m > $OUT/spec.log 2>&1 &
A=$!
$S serve --target $T --draft $D --proposer none --k 0 --port 8102 --max-batch 1 --served-model-name m > $OUT/plain.log 2>&1 &
B=$!
for port in 8101 8102; do
  for i in $(seq 1 300); do curl -sf http://127.0.0.1:$port/v1/models >/dev/null && break; sleep 2; done
done
$S bench --endpoint http://127.0.0.1:8101 --endpoint http://127.0.0.1:8102 --workload code --limit 8 \
  --concurrency 1 --ignore-eos --max-new-tokens 64 --api chat --out $OUT/paired > $OUT/paired.txt 2>&1
echo "paired rc=$?" >> $OUT/paired.txt
kill $A $B; wait $A $B 2>/dev/null
$S bench --workload code --limit 8 --methods plain,hybrid --k auto --max-new-tokens 64 --target $T --draft $D \
  --temperature 0 --out $OUT/inproc > $OUT/inproc.txt 2>&1
echo "inproc rc=$?" >> $OUT/inproc.txt
date -u +%FT%TZ > $OUT/end
