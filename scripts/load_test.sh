#!/bin/bash
# Load test of `specdecode serve` with the default pair on loopback: plain vs speculative servers,
# one after the other in one run, each driven by `specdecode bench --endpoint` at the same levels.
# Usage: scripts/load_test.sh OUT_DIR [REQUESTS] [MAX_TOKENS]
set -euo pipefail
OUT=${1:-load-out}; REQUESTS=${2:-12}; MAX_TOKENS=${3:-48}
SD=${SD:-.venv/bin/specdecode}
PORT=8123
mkdir -p "$OUT"
run() {  # name, serve flags...
  local name=$1; shift
  $SD serve --port $PORT --max-batch 8 "$@" > "$OUT/$name.serve.log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do curl -sf localhost:$PORT/health > /dev/null && break; sleep 1; done
  $SD bench --endpoint http://127.0.0.1:$PORT --concurrency 1,2,4,8 --requests "$REQUESTS" \
      --max-new-tokens "$MAX_TOKENS" --temperature 0 --limit 12 --tokenizer default --ignore-eos --out "$OUT/$name" \
      > "$OUT/$name.bench.log" 2>&1 || true
  curl -s localhost:$PORT/metrics > "$OUT/$name.metrics.txt" || true
  kill -TERM $pid; wait $pid || true
}
SERVERS=${SERVERS:-plain ngram draft draft-policy-off}
for s in $SERVERS; do
  case $s in
    plain) run plain --proposer none --k 0 ;;
    ngram) run ngram --proposer ngram --k 4 ;;
    draft) run draft --proposer draft --k 4 ;;
    draft-policy-off) run draft-policy-off --proposer draft --k 4 --load-policy off ;;
  esac
done
.venv/bin/python scripts/load_table.py "$OUT" $SERVERS | tee "$OUT/table.md"
