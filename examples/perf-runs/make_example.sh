#!/usr/bin/env bash
# How examples/perf-runs/9200{1,3}/ were made: one NVIDIA H200, torch + pynvml only.
#   OUT=/some/dir bash examples/perf-runs/make_example.sh
# 92001: message-passing GNN potential, fp32 -- dispatch/launch-bound (many small kernels)
# 92003: ViT-style encoder, bf16 autocast -- GEMM-heavy, compute-bound
# 92002: the same ViT with 40 ms of I/O latency per batch in the Dataset and num_workers=0 -- data-loader-bound
# 92004: 92001 in fp64 -- the precision discriminator's pair for 92001 (seed lesson 13)
# RUNS="92002 92004" selects runs (default: all four).
set -euo pipefail
OUT="${OUT:?set OUT}"
SCRATCH="${SCRATCH:-/tmp/ai4s-example}"
export NCCL_NVLS_ENABLE=0 AI4S_PROFILE=1 AI4S_TELEMETRY_INTERVAL=0.25
rm -rf "$SCRATCH"; mkdir -p "$SCRATCH"
run() {  # jobid, then workload args
    local id="$1"; shift
    python3 -m ai4s_graph.workloads.train --device cuda --out-dir "$SCRATCH/$id" --jobid "$id" --write-manifest "$@" \
        >"$SCRATCH/$id.log" 2>"$SCRATCH/$id.err" || { tail -20 "$SCRATCH/$id.err"; return 1; }
    mkdir -p "$SCRATCH/$id"
    cp "$SCRATCH/$id.log" "$SCRATCH/$id/train.log"
    mkdir -p "$OUT/$id/traces" "$OUT/$id/telemetry"
    cp "$SCRATCH/$id/manifest.json" "$SCRATCH/$id/train.log" "$OUT/$id/"
    cp "$SCRATCH/$id/traces/trace_rank0.json.gz" "$OUT/$id/traces/"
    cp "$SCRATCH/$id/telemetry/export.jsonl" "$OUT/$id/telemetry/"
    tail -1 "$SCRATCH/$id.err"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
python3 -c "import torch, pynvml; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
RUNS="${RUNS:-92001 92002 92003 92004}"
for id in $RUNS; do
    case "$id" in
    92001) run 92001 --model gnn --precision fp32 --batch-size 16 --epochs "${GNN_EPOCHS:-100}" --steps-per-epoch 25 --log-format batch ;;
    92002) run 92002 --model vit --precision bf16 --batch-size 64 --epochs "${DL_EPOCHS:-8}" --steps-per-epoch 20 --log-format edm \
               --data-latency-ms 40 --num-workers 0 ;;
    92003) run 92003 --model vit --precision bf16 --batch-size 64 --epochs "${VIT_EPOCHS:-20}" --steps-per-epoch 20 --log-format edm ;;
    92004) run 92004 --model gnn --precision fp64 --batch-size 16 --epochs "${GNN_EPOCHS:-100}" --steps-per-epoch 25 --log-format batch ;;
    esac
done
ls -la "$OUT"/*/ "$OUT"/*/*/
