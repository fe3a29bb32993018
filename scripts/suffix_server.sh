#!/bin/bash
# A suffix-decoding server (shared memory) fed the repetitive workload's 40 extractions in order at
# concurrency 1: does a request in the last quarter run faster than one in the first, as the
# memory fills with earlier answers? Then the same with the memory off (--suffix-scope off), the
# control. Usage: scripts/suffix_server.sh OUT_DIR [TARGET]   (SCOPES="shared" for the first alone)
set -euo pipefail
OUT=${1:-suffix-serve-out}; TARGET=${2:-default}
SD=${SD:-.venv/bin/specdecode}
mkdir -p "$OUT"
for scope in ${SCOPES:-shared off}; do
  port=$([ "$scope" = shared ] && echo 8131 || echo 8132)
  $SD serve --port "$port" --target "$TARGET" --proposer suffix --k auto --suffix-scope "$scope" \
      > "$OUT/$scope.serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do curl -sf "localhost:$port/health" > /dev/null && break; sleep 1; done
  $SD bench --endpoint "http://127.0.0.1:$port" --workload repetitive --categories extraction --requests 40 \
      --concurrency 1 --max-new-tokens 96 --temperature 0 --tokenizer default --out "$OUT/$scope" \
      > "$OUT/$scope.bench.log" 2>&1
  curl -s "localhost:$port/metrics" | grep suffix > "$OUT/$scope.metrics.txt" || true
  kill -TERM $pid; wait $pid || true
done
grep -h "^| 1 " "$OUT"/shared/report.md "$OUT"/off/report.md
