#!/usr/bin/env bash
# The GPU run behind bench/README.md's GPU table: the CUDA parity tests, the whole benchmark on
# `cuda`, then the sampler stages at 1 and 4 samples per call with and without CUDA graphs. Usage, from the repository root on a CUDA machine with the package's dependencies:
#   bash bench/gpu_check.sh [OUT_DIR]        (default bench/results/gpu)
# Results: OUT_DIR/{gpu.txt,pytest.log,bench.log,<timestamp>.json,<timestamp>.md}.
# Where the machine lacks packages, put their wheels in .devcarry/whl and importable folders in
# .devcarry/site (both git-ignored); they are installed to /tmp/site first.
set -u
OUT_DIR=${1:-${OUT:-bench/results/gpu}}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .devcarry ]; then
    if ls .devcarry/whl/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .devcarry/whl/*.whl || exit 1
        PYTHONPATH="$PYTHONPATH:/tmp/site"
    fi
    [ -d .devcarry/site ] && PYTHONPATH="$PYTHONPATH:$PWD/.devcarry/site"
fi
{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
    nproc
} 2>&1 | tee "$OUT_DIR/gpu.txt"

timeout "${PYTEST_TIMEOUT:-180}" python3 -m pytest -q -p no:cacheprovider -k cuda \
    tests/test_cuda_parity.py tests/rendering/test_marching_cubes.py 2>&1 | tee "$OUT_DIR/pytest.log"

timeout "${BENCH_TIMEOUT:-420}" python3 -m bench --device cuda --threads "${BENCH_THREADS:-8}" \
    --timeout 150 --out-dir "$OUT_DIR" ${BENCH_ARGS:-} 2>&1 | tee "$OUT_DIR/bench.log"

for samples in 1 4; do
    for graph in "" "--cuda-graph"; do
        timeout "${GRAPH_TIMEOUT:-300}" python3 -m bench --device cuda --threads "${BENCH_THREADS:-8}" --timeout 280 \
            --stages sample_heun64,sample_fast --samples "$samples" $graph --out-dir "$OUT_DIR/graphs" \
            2>&1 | tee -a "$OUT_DIR/graphs.log"
    done
done
