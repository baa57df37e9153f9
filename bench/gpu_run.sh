#!/usr/bin/env bash
# The `features` suite's gpu part (issue 26 §2) on a CUDA host, in under 5 minutes:
# an environment record, the device-loader tests on CUDA, the part at --quick size
# (a smoke run), then at full size (16 M x 64 float32, 4.3 GB, batch 65,536), then
# the device path's stage-by-stage profile (bench/gpu_profile.py) into "$OUT/profile".
# Everything goes to "$OUT" as it is produced (logs, each run's numbers as JSON
# lines, the reports), so a run cut short keeps what it measured.
#
# Usage (repo root copied with .venv and the built python/mmapkit/_native.abi3.so;
# no network needed): OUT=/some/dir bench/gpu_run.sh
set -x
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the directory for the results}
mkdir -p "$OUT"
PY=${PYTHON:-.venv/bin/python}
DATA=${DATA_DIR:-/tmp/mmapkit-gpu-bench-data}
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export MMAPKIT_BENCH_PARTIAL="$OUT/gpu-runs.jsonl"

{
    date -u
    nproc
    free -g
    df -h . /tmp
    nvidia-smi
    "$PY" -c 'import torch, mmapkit; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available()); print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no device")'
} > "$OUT/env.txt" 2>&1

# The device loader's tests, its CUDA test included (about 20 s).
timeout 60 "$PY" -m pytest -q -p no:cacheprovider tests/python/test_device_loader.py \
    > "$OUT/tests.log" 2>&1
echo "tests rc=$?" >> "$OUT/tests.log"

# A smoke run at --quick size (1 M rows): a broken part shows here in seconds.
timeout 75 "$PY" -m bench features --quick --tasks gpu --sizes qgpu --repeat 3 \
    --cache warm --data-dir "$DATA" --results-dir "$OUT/quick" > "$OUT/quick.log" 2>&1
echo "quick rc=$?" >> "$OUT/quick.log"

# Full size: data generation (~1 min) and 10 contenders x (1 warm-up + 3 runs).
timeout 240 "$PY" -m bench features --tasks gpu --sizes gpu --repeat 3 \
    --cache warm --data-dir "$DATA" --results-dir "$OUT/full" > "$OUT/full.log" 2>&1
echo "full rc=$?" >> "$OUT/full.log"

# Each stage of the device path alone (gather by threads, pinned or not, numpy,
# host-to-device copies, loader epochs by prefetch/threads/workers, per-batch
# overhead, first touch): one JSON and one log. On the full size's store (made above;
# its own otherwise).
mkdir -p "$OUT/profile"
STORE=()
G="$DATA/features-gpu-s13/store"  # the suite's data dir for size gpu (DATA_SEED 13)
[ -f "$G/meta.json" ] && STORE=(--store "$G")
timeout 100 "$PY" bench/gpu_profile.py --out "$OUT/profile" --data "$DATA/profile" "${STORE[@]}" \
    > "$OUT/profile/profile.log" 2>&1
echo "profile rc=$?" >> "$OUT/profile/profile.log"
date -u >> "$OUT/env.txt"
