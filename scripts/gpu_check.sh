#!/usr/bin/env bash
# The device check as one command for a lent GPU machine (docs/gpu.md, "The device check"). It runs on
# the machine's own CUDA build of torch with this checkout's src on the path (nothing is installed:
# a lent machine reaches no package index), stops itself within 8 minutes, and leaves
# gpu_check.json and gpu_check.md in $OUT (default: gpu-check-out).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-check-out}"
export PYTHONPATH="src:scripts${PYTHONPATH:+:$PYTHONPATH}"
python - <<'PY' || exit 2
import importlib.util, sys
missing = [m for m in ("torch", "transformers", "typer", "rich", "scipy") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_check: this python lacks {', '.join(missing)}: carry them as wheels, or use a machine image that has them")
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none (CPU rehearsal)'}")
PY
timeout 470 python scripts/gpu_check.py "$out" --budget-s 400 --acceptance docs/results/gpu-check/cpu-acceptance.json "$@"
