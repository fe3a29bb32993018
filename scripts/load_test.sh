#!/bin/bash
# Load test of `specdecode serve` with the default pair on loopback: plain vs speculative servers,
# all started at once (one port each) and driven in turn by `specdecode bench --endpoint`. Each
# concurrency level runs in ROUNDS rounds of REQUESTS requests per server, the servers' order
# reversed every round (A B, B A, ...): the machine is shared and its speed drifts by tens of
# percent within minutes, and this way drift slows both sides alike. scripts/load_table.py pools
# the rounds of a level.
# Usage: scripts/load_test.sh OUT_DIR [REQUESTS] [MAX_TOKENS] [ROUNDS]   (SERVERS="plain ngram")
set -euo pipefail
OUT=${1:-load-out}; REQUESTS=${2:-8}; MAX_TOKENS=${3:-48}; ROUNDS=${4:-2}
SD=${SD:-.venv/bin/specdecode}
SERVERS=${SERVERS:-plain ngram}
TARGET=${TARGET:-default}  # e.g. TARGET=llamacpp:default: both servers on the llama.cpp target
LEVELS=${LEVELS:-1 2 4 8}
mkdir -p "$OUT"
declare -A PORT PID
port=8123
for s in $SERVERS; do
  case $s in
    plain) flags="--proposer none --k 0" ;;
    ngram) flags="--proposer ngram --k 4" ;;
    draft) flags="--proposer draft --k 4" ;;
    draft-policy-off) flags="--proposer draft --k 4 --load-policy off" ;;
    hybrid-lc) flags="--proposer hybrid --draft llamacpp:default@q4_0 --k auto --draft-context 128" ;;
    *) echo "unknown server $s" >&2; exit 2 ;;
  esac
  PORT[$s]=$port
  # shellcheck disable=SC2086
  $SD serve --port "$port" --max-batch 8 --target "$TARGET" $flags > "$OUT/$s.serve.log" 2>&1 &
  PID[$s]=$!
  port=$((port + 1))
done
trap 'for s in $SERVERS; do kill -TERM ${PID[$s]} 2>/dev/null || true; done' EXIT
for s in $SERVERS; do
  for _ in $(seq 600); do curl -sf "localhost:${PORT[$s]}/health" > /dev/null && break; sleep 1; done
done
order=($SERVERS)
for c in $LEVELS; do
  for r in $(seq "$ROUNDS"); do
    for s in "${order[@]}"; do
      $SD bench --endpoint "http://127.0.0.1:${PORT[$s]}" --concurrency "$c" --requests "$REQUESTS" \
          --max-new-tokens "$MAX_TOKENS" --temperature 0 --limit 12 --tokenizer default --ignore-eos \
          --out "$OUT/$s/c$c-r$r" > "$OUT/$s.c$c-r$r.bench.log" 2>&1 || true
    done
    order=($(printf '%s\n' "${order[@]}" | tac))  # the other order next round
  done
done
for s in $SERVERS; do curl -s "localhost:${PORT[$s]}/metrics" > "$OUT/$s.metrics.txt" || true; done
.venv/bin/python scripts/load_table.py "$OUT" $SERVERS | tee "$OUT/table.md"
