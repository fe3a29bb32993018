#!/bin/bash
# The server at concurrency 1 against `bench` (generate) on the same prompts and configuration, in
# alternating rounds (server, generate, generate, server): the same engine behind both, so the two
# should be level up to HTTP and streaming overhead.
# Usage: scripts/server_vs_generate.sh OUT_DIR [LIMIT] [MAX_TOKENS]
set -euo pipefail
OUT=${1:-svg-out}; LIMIT=${2:-6}; MAX_TOKENS=${3:-48}
SD=${SD:-.venv/bin/specdecode}
CONF=(--proposer hybrid --draft llamacpp:default@q4_0 --k auto --draft-context 128)
WORK=(--workload spec-bench --limit "$LIMIT" --max-new-tokens "$MAX_TOKENS" --temperature 0 --ignore-eos)
mkdir -p "$OUT"
$SD serve --port 8131 --max-batch 8 "${CONF[@]}" > "$OUT/serve.log" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null || true' EXIT
for _ in $(seq 600); do curl -sf localhost:8131/health > /dev/null && break; sleep 1; done
server() { $SD bench --endpoint http://127.0.0.1:8131 --concurrency 1 --requests "$LIMIT" --tokenizer default \
             "${WORK[@]}" --out "$OUT/server-$1" > "$OUT/server-$1.log" 2>&1; }
offline() { $SD bench --methods hybrid --k auto --draft llamacpp:default@q4_0 --draft-context 128 "${WORK[@]}" \
              --out "$OUT/generate-$1" > "$OUT/generate-$1.log" 2>&1; }
server 1; offline 1; offline 2; server 2
.venv/bin/python scripts/server_vs_generate.py "$OUT" | tee "$OUT/table.md"
