#!/usr/bin/env bash
# The GPU-host check in one call, after `python bench/device_kit.py` here (see its docstring):
#   device run: command "bash bench/gpu_device.sh", carry [".device"], timeout_s 540
# Installs the carried wheels beside the host's own torch and transformers, then runs
# bench/gpu.py three ways (default, --host-only, --trace always) and the CUDA test; everything
# it prints also lands in $OUT/gpu.txt. Each step is bounded; the whole stays under ~6 minutes.
set -u -o pipefail
OUT=${OUT:-/tmp/gpu-device-out}
mkdir -p "$OUT"
log="$OUT/gpu.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .device/whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD/.device/site:$PWD" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    PYTHONUNBUFFERED=1
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    echo "cpus $(nproc)"
    python3 -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__, torch.cuda.is_available())"
} 2>&1 | tee "$log"
status=0
step() {
    echo "== $*" | tee -a "$log"
    timeout "$1" "${@:2}" 2>&1 | tee -a "$log" || status=1
}
step 150 python3 bench/gpu.py --seconds 20
step 120 python3 bench/gpu.py --seconds 20 --host-only
step 150 python3 bench/gpu.py --seconds 20 --trace always
step 120 python3 -m pytest -q -p no:cacheprovider -o "filterwarnings=ignore::DeprecationWarning" \
    tests/classifiers/test_gpu.py
exit $status
