#!/bin/bash
# The two GPU optimizer loops of issue 17 on one GPU, with the local executor (no SLURM there):
# the dispatch-bound GNN (examples/perf-runs/92001's configuration) and the data-loader-bound ViT
# (92002's). The verified class of each baseline configuration comes from the analysis of those
# bundled runs (inputs/*-baseline-report.json, made with `ai4s-graph run --llm none`).
# Each loop is bounded by --node-hours (the loop stops cleanly and writes its report) and a timeout.
# Outputs: $OUT/<model>.log and $OUT/<model>.tgz (the loop directory and every run directory).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=${W:-/tmp/gpu-loops}
OUTD=${OUT:-$W/out}
mkdir -p "$W" "$OUTD"
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"; } 2>&1 | tee "$OUTD/gpu.txt"
declare -A NH=([gnn]=0.04 [vit]=0.055) TO=([gnn]=150 [vit]=230)   # job-time budget (h), wall timeout (s)
for m in gnn vit; do
    timeout "${TO[$m]}" python3 -m ai4s_graph.cli optimize --model "$m" --catalog "tools/levers/catalogs/$m.yaml" \
        --executor local --report "reports/gpu-loops/inputs/$m-baseline-report.json" --iterations 4 \
        --node-hours "${NH[$m]}" --loop-root "$W/loops-$m" --shared-dir "$W/shared" --wait-timeout 200 \
        2>&1 | tee "$OUTD/$m.log"
    # a loop cut by its timeout leaves its detached job running: end it (its own process group)
    for p in "$W"/shared/models/"$m"/perf-runs/*/.local_job/pid; do
        [ -f "$p" ] && kill -- -"$(cat "$p")" 2>/dev/null
    done
    tar czf "$OUTD/$m.tgz" -C "$W" "loops-$m" "shared/models/$m"
done
ls -la "$OUTD"
