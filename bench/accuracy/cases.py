"""The injected-fault cases of the accuracy benchmark and the 2-GPU example runs: what runs, and
the known answer (``truth.json``).

Stdlib only: ``generate.py`` imports this on the GPU machine, which has torch but not this
package's dependencies.

Truth fields:

- ``cause``: one of :data:`CAUSES` (what was injected, by construction);
- ``class``: the bottleneck class an analysis should name (``compute-bound``, ``dispatch-bound``,
  ``memory-bound``, ``data-loader-bound``, ``communication-bound``), or None where no class of the
  taxonomy fits (the GPU shared with another process; a straggler, where the slow rank is busy with
  its extra work and the other rank's wait runs in an NCCL kernel that overlaps its backward, so
  each rank's own timeline looks GPU-bound);
- ``rank``: the rank at fault (the straggler), or None when every rank has the fault;
- ``notes``: how the fault was made and what the evidence should look like.
"""

from __future__ import annotations

CAUSES = {
    "dataloader-stall": "too few DataLoader workers and a slow per-batch transform starve the GPU",
    "straggler": "one rank does extra GPU work every step; the others wait for it in the collectives",
    "slow-link": "NCCL_P2P_DISABLE=1: collectives go through host shared memory instead of NVLink",
    "exposed-communication": "a wide model on a tiny batch: the gradient all-reduce outlasts the backward",
    "host-sync": ".item() on device values every layer and every parameter, every step",
    "kernel-launch-overhead": "hundreds of tiny kernels per step: the CPU cannot launch them fast enough",
    "memory-bound-elementwise": "chains of elementwise kernels over large activations (HBM bandwidth)",
    "compute-bound-gemm": "large bf16 GEMMs keep the tensor cores busy",
    "sdpa-math-fallback": "scaled_dot_product_attention forced onto the MATH backend (no fused kernel)",
    "recompilation": "torch.compile(dynamic=False) with a new batch size every step recompiles every step",
    "cuda-launch-blocking": "CUDA_LAUNCH_BLOCKING=1 makes every launch wait for its kernel",
    "gpu-contention": "a second process runs matmuls on the same GPU (time-sliced with the job)",
    "none": "no fault: the control",
}
"""Cause id -> what it means (the truth vocabulary; the scorer matches these ids)."""

STEPS = ["--epochs", "1", "--steps-per-epoch", "16"]
VIT_MED = ["--model", "vit", "--hidden", "512", "--depth", "6", "--tokens", "128", "--batch-size", "16"]
VIT_BIG = ["--model", "vit", "--precision", "bf16", "--batch-size", "256", "--num-workers", "2"]
WIDE = ["--model", "wide", "--hidden", "4096", "--depth", "16", "--batch-size", "4", "--optimizer", "sgd"]


def _case(jobid, name, gpus, args, cause, klass, rank=None, notes="", env=None, example=False, bench=True,
          hog=False, timeout=180):
    return {"jobid": str(jobid), "name": name, "gpus": gpus, "args": args, "env": env or {}, "hog": hog,
            "example": example, "bench": bench, "timeout": timeout,
            "truth": {"cause": cause, "class": klass, "rank": rank, "notes": notes}}


CASES = [
    # ---- 2 GPUs (torchrun --nproc-per-node 2), examples/perf-runs/930xx
    _case(93001, "ddp-exposed-comm", 2, WIDE + STEPS, "exposed-communication", "communication-bound",
          notes="DDP, 17 Linear 4096x4096 fp32 (1.1 GB of gradients) on 4 rows per rank, SGD: each step's "
                "all-reduce of ~1.1 GB outlasts the tiny backward it should hide behind", example=True),
    _case(93002, "ddp-slow-link", 2, WIDE + STEPS, "slow-link", "communication-bound",
          env={"NCCL_P2P_DISABLE": "1"},
          notes="93001 with NCCL_P2P_DISABLE=1: the same all-reduce through host shared memory; busbw far "
                "below the NVLink sweep in reports/raw-2026-11-30-2gpu", example=True),
    _case(93003, "ddp-overlapped", 2, VIT_BIG + STEPS, "none", "compute-bound",
          notes="DDP ViT (12 x dim 1024, 256 tokens) bf16 batch 256 per rank, 2 DataLoader workers: the "
                "all-reduce buckets run during the backward, hidden behind compute. (At batch 32 the step "
                "was CPU-launch-bound, the ranks drifted and the all-reduce waited: measured on the first "
                "device run, not kept)", example=True),
    _case(93004, "ddp-straggler", 2, VIT_BIG + STEPS + ["--fault", "straggler", "--straggler-rank", "1",
                                                        "--straggler-matmuls", "24"],
          "straggler", None, rank=1,
          notes="93003 where rank 1 runs 24 extra bf16 8192^3 matmuls (~35 ms) every step before its "
                "backward: rank 0 waits in the all-reduce (an NCCL kernel that overlaps its backward), "
                "rank 1 arrives last at the collectives. (With batch 32 the step was CPU-bound and the extra GPU "
                "work hid in rank 1's idle time: rank 0 arrived last; the first device run, not kept)",
          example=True),
    _case(93005, "fsdp", 2, VIT_BIG + STEPS + ["--parallel", "fsdp"], "none", "compute-bound",
          notes="FSDP2 fully_shard per encoder layer: parameter all-gathers and gradient reduce-scatters "
                "(no all-reduce of gradients)", example=True, bench=False),
    # ---- 1 GPU, two lanes (CUDA_VISIBLE_DEVICES 0 and 1 in parallel), bench/accuracy/cases
    _case(93101, "dataloader-stall", 1, VIT_MED + STEPS + ["--num-workers", "1", "--data-latency-ms", "30",
                                                           "--transform-ms", "30"],
          "dataloader-stall", "data-loader-bound",
          notes="one DataLoader worker; each batch sleeps 30 ms (I/O) and spins the CPU 30 ms (transform): "
                "~60 ms of data per step against a few ms of GPU work"),
    _case(93102, "host-sync", 1, VIT_MED + STEPS + ["--fault", "host-sync"], "host-sync", "dispatch-bound",
          notes="a NaN check with .item() on every Linear output and a per-parameter grad norm .item(): "
                "~150 stream drains per step; the GPU idles between them"),
    _case(93103, "launch-bound", 1, ["--model", "wide", "--hidden", "64", "--depth", "48", "--batch-size", "8"]
          + STEPS, "kernel-launch-overhead", "dispatch-bound",
          notes="49 Linear 64x64 layers on 8 rows, AdamW: hundreds of microsecond kernels per step"),
    _case(93104, "memory-bound", 1, ["--model", "elementwise", "--hidden", "8192", "--depth", "24",
                                     "--batch-size", "8192"] + STEPS,
          "memory-bound-elementwise", "memory-bound",
          notes="24 x (scale, shift, GELU, residual) over a 8192x8192 fp32 activation: elementwise kernels "
                "streaming 256 MB each"),
    _case(93105, "compute-bound", 1, ["--model", "gemm", "--hidden", "8192", "--depth", "8", "--batch-size",
                                      "8192", "--precision", "bf16"] + STEPS,
          "compute-bound-gemm", "compute-bound", notes="9 Linear 8192x8192 on 8192 rows in bf16 autocast"),
    _case(93106, "sdpa-math", 1, ["--model", "attn", "--precision", "bf16", "--tokens", "2048", "--hidden", "1024",
                                  "--depth", "4", "--batch-size", "8", "--fault", "sdpa-math"] + STEPS,
          "sdpa-math-fallback", None,
          notes="causal attention over 2048 tokens with SDPA forced to MATH: the 8x16x2048x2048 score matrix "
                "is written, masked and softmaxed in HBM (no flash kernel in the trace). Measured: ~49% of "
                "kernel time in fp32 GEMMs (the math path upcasts bf16 to fp32: no tensor cores) and most of "
                "the rest in elementwise/softmax kernels over the score matrix, GPU busy 98%: no single class "
                "fits, so the class is not scored (the construction-time guess memory-bound was not borne out)"),
    _case(93107, "recompile", 1, ["--model", "wide", "--hidden", "1024", "--depth", "4", "--batch-size", "32",
                                  "--epochs", "1", "--steps-per-epoch", "8", "--fault", "recompile"],
          "recompilation", "dispatch-bound", timeout=300,
          notes="torch.compile(dynamic=False, inductor), batch size 32+step: Dynamo and Inductor recompile "
                "every step on the CPU while the GPU idles"),
    _case(93108, "launch-blocking", 1, VIT_MED + STEPS, "cuda-launch-blocking", "dispatch-bound",
          env={"CUDA_LAUNCH_BLOCKING": "1"},
          notes="CUDA_LAUNCH_BLOCKING=1 left on: every launch returns only when its kernel is done"),
    _case(93109, "gpu-contention", 1, ["--model", "vit", "--precision", "bf16", "--hidden", "1024", "--depth", "6",
                                       "--batch-size", "32"] + STEPS, "gpu-contention", None, hog=True,
          notes="a second process (workloads/faults.py hog) runs back-to-back bf16 8192^3 matmuls on the same "
                "GPU for the whole run; telemetry shows the GPU busy beyond what the job's own kernels explain"),
    _case(93110, "gpu-contention-control", 1, ["--model", "vit", "--precision", "bf16", "--hidden", "1024",
                                               "--depth", "6", "--batch-size", "32"] + STEPS, "none", None,
          bench=False, notes="93109 without the second process: the control for the contention case"),
]
