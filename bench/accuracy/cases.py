"""The injected-fault cases of the accuracy benchmark and the 2-GPU example runs: what runs, the
known answer (``truth.json``), the control that removes only the cause, and the lever that turns
the one into the other.

Stdlib only: ``generate.py`` imports this on the GPU machine, which has torch but not this
package's dependencies.

Truth fields:

- ``cause``: one of :data:`CAUSES` (what was injected, by construction); ``none`` for a control;
- ``class``: the bottleneck class an analysis should name (``compute-bound``, ``dispatch-bound``,
  ``memory-bound``, ``data-loader-bound``, ``communication-bound``), or None where no class of the
  taxonomy fits or the construction does not settle it (said in ``notes``);
- ``rank``: the rank at fault (the straggler), or None when every rank has the fault;
- ``lever``: the first lever (an id of :data:`LEVERS`, the same name as in
  ``tools/levers/catalogs/workload.yaml``) that removes the cause, None for a control;
- ``control``: the jobid of the run that differs from this one only by that lever (None when no
  control was made); a control lists the cases it serves in ``control_of``;
- ``sites``: added by the workload for host-side causes: ``{cause: {file, line, function,
  def_line}}`` of the line that injects it (``workloads/faults.py`` / ``models.py``);
- ``notes``: how the fault was made and what the evidence should look like.

A control's configuration is its case's with the lever applied (:func:`apply_change`), checked by
``tests/test_workloads_cpu.py`` on the parsed arguments; several cases share one control only where
that holds for each of them. ``est_s`` is the estimated device seconds of one run (see
:data:`RUN_BASE_S`), ``ORDER_1GPU`` / ``ORDER_2GPU`` the order the driver runs them in (most
valuable first; ``long`` is the long trace of issue 29, last).
"""

from __future__ import annotations

if __package__:
    from .measured import MEASURED
else:  # imported as a file (generate.py on the device: stdlib only, no package)
    from measured import MEASURED  # type: ignore  # noqa: E402

CAUSES = {
    "dataloader-stall": "too few DataLoader workers and a slow per-batch transform starve the GPU",
    "straggler": "one rank does extra GPU work every step; the others wait for it in the collectives",
    "slow-link": "NCCL_P2P_DISABLE=1: collectives go through host shared memory instead of NVLink",
    "exposed-communication": "a wide model on a tiny batch: the gradient all-reduce outlasts the backward",
    "host-sync": ".item()/.cpu() on device values in the step (every layer, every parameter): each drains the stream",
    "kernel-launch-overhead": "hundreds of tiny kernels per step: the CPU cannot launch them fast enough",
    "memory-bound-elementwise": "chains of elementwise kernels over large activations (HBM bandwidth)",
    "compute-bound-gemm": "large bf16 GEMMs keep the tensor cores busy",
    "sdpa-math-fallback": "scaled_dot_product_attention forced onto the MATH backend (no fused kernel)",
    "recompilation": "torch.compile(dynamic=False) with a new batch size every step recompiles every step",
    "cuda-launch-blocking": "CUDA_LAUNCH_BLOCKING=1 makes every launch wait for its kernel",
    "gpu-contention": "a second process runs matmuls on the same GPU (time-sliced with the job)",
    # ---- issue 24: one GPU
    "tf32-off": "fp32 matrix multiplies without TF32 (float32_matmul_precision 'highest', torch's default): FFMA "
                "sgemm kernels instead of tensor cores (seed 001 T9)",
    "anomaly-mode": "torch.autograd.set_detect_anomaly(True) left on: a NaN check with a host sync after every "
                    "backward op and a stack trace per forward op (seed 001 T12)",
    "activation-checkpointing": "torch.utils.checkpoint on every layer of a model that fits without it: the "
                                "forward runs again in the backward (seed 001 T17: 20-30% recompute)",
    "pageable-h2d-copy": "the batch copied host-to-device from pageable memory with non_blocking=False: the CPU "
                         "blocks on every copy and nothing overlaps it (seed 001 T6)",
    "nchw-conv-layout": "a bf16 conv net in NCHW: layout transposes around every tensor-core convolution "
                        "(seed 001 T11)",
    "cudnn-benchmark-off": "torch.backends.cudnn.benchmark=False with fixed input shapes: cuDNN's heuristic "
                           "algorithm, not the fastest measured one (seed 001 T10)",
    "per-parameter-optimizer": "Adam(foreach=False) over thousands of parameter tensors: a few kernels launched "
                               "per tensor per step instead of multi-tensor kernels",
    "dataloader-worker-respawn": "persistent_workers=False with a slow worker start: every epoch begins with the "
                                 "workers re-forked and re-initialized (seed 001 T5)",
    "dataloader-shallow-prefetch": "bursty per-batch fetch times that prefetch_factor is too shallow to absorb: a "
                                   "stall every few steps (seed 001 T7)",
    "dataloader-cpu-transform": "the loader is bound by a CPU transform in its worker: host CPU busy (seed 001 T8)",
    "dataloader-io-wait": "the loader is bound by I/O waits in its worker: host CPU idle (seed 001 T8)",
    "cpu-oversubscription": "DataLoader workers x intra-op threads far above the cores: threads thrash the CPUs "
                            "(seed 001 T3, seed 000 lesson 22)",
    "graph-break": "graph breaks inside the compiled model: many small compiled fragments with eager Python "
                   "between them (seed 001 T15/T16)",
    # ---- issue 34: host-side kinds
    "d2h-param-copy": "every parameter copied device-to-host each step (~parameter bytes of pageable copies a step)",
    "allocator-churn": "torch.cuda.empty_cache() in every step: the caching allocator returns its segments "
                       "(cudaFree) and allocates them again (cudaMalloc) each step",
    "per-sample-loop": "one module run k times per step on batch-1 shapes in a Python loop instead of one batched "
                       "call",
    "python-outside-ops": "pure-Python work in the step (metrics bookkeeping) outside every recorded op, the GPU "
                          "idle meanwhile",
    "gc-pause": "a full gc.collect() every step over many live Python objects",
    "checkpoint-io-per-step": "torch.save of the model every step: device-to-host copies and file writes on the "
                              "critical path (seed 000 lesson 30)",
    "cpu-preprocess-in-step": "tensor preprocessing on the CPU in the main process between steps (aten ops on the "
                              "host, the GPU idle)",
    # ---- issue 30: two GPUs
    "ddp-small-buckets": "DDP with a tiny bucket_cap_mb over thousands of parameters: one small all-reduce per "
                         "tensor, latency-bound (seed 001 T23)",
    "ddp-find-unused-parameters": "DDP find_unused_parameters=True on a model that has none: a graph traversal "
                                  "every step (seed 001 T23)",
    "fsdp-no-prefetch": "FSDP without backward_prefetch/forward_prefetch: each block's all-gather waits for the "
                        "previous block's compute (seed 001 T23)",
    "straggler-host": "one rank does extra CPU work every step; the others wait for it in the collectives",
    "none": "no fault: the control",
}
"""Cause id -> what it means (the truth vocabulary; the scorer matches these ids)."""

LEVERS = {
    "tf32_matmul": ({"env": {"AI4S_MATMUL_PRECISION": "high"}}, ("tf32-off",)),
    "anomaly_detection_off": ({"script_args": {"--detect-anomaly": False}}, ("anomaly-mode",)),
    "launch_blocking_off": ({"env": {"CUDA_LAUNCH_BLOCKING": "0"}}, ("cuda-launch-blocking",)),
    "remove_host_syncs": ({"script_args": {"--host-sync": False, "--grad-norm-sync": "off"}}, ("host-sync",)),
    "compile_dynamic_shapes": ({"script_args": {"--compile": "dynamic"}}, ("recompilation",)),
    "remove_graph_breaks": ({"script_args": {"--graph-breaks": False}}, ("graph-break",)),
    "sdpa_fused_backend": ({"script_args": {"--sdpa-backend": "auto"}}, ("sdpa-math-fallback",)),
    "no_activation_checkpointing": ({"script_args": {"--checkpointing": False}}, ("activation-checkpointing",)),
    "pinned_nonblocking_h2d": ({"script_args": {"--pin-memory": True, "--blocking-h2d": False}},
                               ("pageable-h2d-copy",)),
    "channels_last": ({"script_args": {"--channels-last": True}}, ("nchw-conv-layout",)),
    "cudnn_benchmark": ({"env": {"AI4S_CUDNN_BENCHMARK": "1"}}, ("cudnn-benchmark-off",)),
    "foreach_optimizer": ({"script_args": {"--optimizer-impl": "foreach"}}, ("per-parameter-optimizer",)),
    "fused_optimizer": ({"script_args": {"--optimizer-impl": "fused"}}, ("per-parameter-optimizer",)),
    "persistent_workers": ({"script_args": {"--persistent-workers": True}}, ("dataloader-worker-respawn",)),
    "prefetch_factor_8": ({"script_args": {"--prefetch-factor": 8}}, ("dataloader-shallow-prefetch",)),
    "gpu_transform": ({"script_args": {"--transform-device": "cuda"}}, ("dataloader-cpu-transform",)),
    "num_workers_8": ({"script_args": {"--num-workers": 8}}, ("dataloader-io-wait", "dataloader-stall")),
    "worker_threads_1": ({"script_args": {"--worker-threads": 1}}, ("cpu-oversubscription",)),
    "no_per_step_param_copy": ({"script_args": {"--d2h-params": False}}, ("d2h-param-copy",)),
    "no_empty_cache": ({"script_args": {"--empty-cache": False}}, ("allocator-churn",)),
    "batch_per_sample_loop": ({"script_args": {"--per-sample-loop": False}}, ("per-sample-loop",)),
    "no_python_work_in_step": ({"script_args": {"--python-work-ms": 0}}, ("python-outside-ops",)),
    "no_gc_collect_per_step": ({"script_args": {"--gc-collect": False}}, ("gc-pause",)),
    "no_checkpoint_per_step": ({"script_args": {"--save-every-step": False}}, ("checkpoint-io-per-step",)),
    "preprocess_on_gpu": ({"script_args": {"--preprocess": "cuda"}}, ("cpu-preprocess-in-step",)),
    "cuda_graphs": ({"env": {"AI4S_TORCH_COMPILE": "reduce-overhead"}}, ("kernel-launch-overhead",)),
    "torch_compile": ({"env": {"AI4S_TORCH_COMPILE": "default"}}, ("memory-bound-elementwise",)),
    "ddp_bucket_cap_25mb": ({"script_args": {"--bucket-cap-mb": 25}}, ("ddp-small-buckets",)),
    "ddp_find_unused_off": ({"script_args": {"--find-unused-parameters": False}}, ("ddp-find-unused-parameters",)),
    "fsdp_prefetch": ({"script_args": {"--fsdp-prefetch": "full"}}, ("fsdp-no-prefetch",)),
    "enable_p2p": ({"env": {"NCCL_P2P_DISABLE": "0"}}, ("slow-link",)),
    "balance_straggler_rank": ({"script_args": {"--straggler-matmuls": 0, "--straggler-host-ms": 0}},
                               ("straggler", "straggler-host")),
    "batch_64_per_rank": ({"script_args": {"--batch-size": 64}}, ("exposed-communication",)),
}
"""Lever id -> (its change: ``env`` / ``script_args`` as in a lever catalog, the causes it removes).
Every lever of ``tools/levers/catalogs/workload.yaml`` has the same change (a test checks it)."""

RUN_BASE_S = 5.5
"""Estimated fixed device seconds of one 1-GPU run, on top of its steps: python start and ``import
torch`` ~2 s, CUDA context + cuBLAS/cuDNN handles ~1.5 s, profiler start and trace export ~1 s,
process exit and the driver's copying ~1 s (an estimate for the H200 machine; the driver records
each run's real seconds in ``summary.json``)."""

RUN_BASE_2GPU_S = 9.0
"""Estimated fixed seconds of one 2-GPU torchrun run (the 1-GPU costs plus rendezvous and NCCL init)."""


def est(steps: int, step_ms: float, extra_s: float = 0.5, base: float = RUN_BASE_S) -> float:
    """Estimated device seconds of a run: ``base`` + ``steps`` x ``step_ms`` + ``extra_s`` (the
    first step's cuBLAS/cuDNN warm-up, worker starts, compilation)."""
    return round(base + steps * step_ms / 1000.0 + extra_s, 1)


def apply_change(args: list[str], env: dict[str, str], change: dict) -> tuple[list[str], dict[str, str]]:
    """A run's arguments and environment with a lever's ``change`` applied the way the optimizer's
    job script applies it (``tools/levers/catalog.py:script_args_list``): a flag already present
    has its value replaced (``True`` keeps the bare flag, ``False`` removes the flag); a new flag
    is appended (``True`` as a bare flag, ``False`` not at all); env values become strings."""
    out = list(args)
    for flag, value in change.get("script_args", {}).items():
        if flag in out:
            i = out.index(flag)
            has_value = i + 1 < len(out) and not out[i + 1].startswith("--")
            del out[i:i + (2 if has_value else 1)]
            if value is True:
                out[i:i] = [flag]
            elif value is not False:
                out[i:i] = [flag, str(value)]
        elif value is True:
            out.append(flag)
        elif value is not False:
            out += [flag, str(value)]
    e = dict(env)
    e.update({k: ("1" if v is True else "0" if v is False else str(v)) for k, v in change.get("env", {}).items()})
    return out, e


def _case(jobid, name, gpus, args, cause, klass, rank=None, notes="", env=None, example=False, bench=True,
          hog=False, timeout=180, lever=None, control=None, est_s=None, pending=False):
    """One case. ``pending``: defined, not yet made on the device (``bench`` stays False until
    its run is bundled under ``bench/accuracy/cases``)."""
    return {"jobid": str(jobid), "name": name, "gpus": gpus, "args": list(args), "env": dict(env or {}), "hog": hog,
            "example": example, "bench": bench and not pending, "pending": pending, "timeout": timeout,
            "est_s": est_s if est_s is not None else est(16, 20.0, base=RUN_BASE_S if gpus == 1 else RUN_BASE_2GPU_S),
            "truth": {"cause": cause, "class": klass, "rank": rank, "lever": lever,
                      "control": str(control) if control else None, "notes": notes}}


def _control(jobid, name, of, lever, klass, notes="", est_s=None, also=()):
    """The control of case ``of``: its arguments and environment with ``lever`` applied; cause
    ``none``; ``control_of`` lists ``of`` and the cases in ``also`` that share it."""
    args, env = apply_change(of["args"], of["env"], LEVERS[lever][0])
    c = _case(jobid, name, of["gpus"], args, "none", klass, env=env, est_s=est_s, pending=True,
              notes=notes or f"{of['name']} ({of['jobid']}) with the lever {lever}: the control")
    c["truth"]["control_of"] = [of["jobid"], *[str(j) for j in also]]
    return c


STEPS = ["--epochs", "1", "--steps-per-epoch", "16"]
S12 = ["--epochs", "1", "--steps-per-epoch", "12"]
S300 = ["--epochs", "1", "--steps-per-epoch", "300"]  # >= 10 s of steady steps at 40 ms: seed 001 T3 watches the host
                                                     # CPU ~10 s to tell a CPU-bound loader from an I/O-bound one
VIT_MED = ["--model", "vit", "--hidden", "512", "--depth", "6", "--tokens", "128", "--batch-size", "16"]
VIT_BIG = ["--model", "vit", "--precision", "bf16", "--batch-size", "256", "--num-workers", "2"]
VIT_BF16 = ["--model", "vit", "--precision", "bf16", "--hidden", "1024", "--depth", "12", "--tokens", "256"]
WIDE = ["--model", "wide", "--hidden", "4096", "--depth", "16", "--batch-size", "4", "--optimizer", "sgd"]
CONV = ["--model", "conv", "--precision", "bf16", "--hidden", "128", "--depth", "8", "--tokens", "224",
        "--batch-size", "128"] + S12
CONV_ENV = {"AI4S_CUDNN_BENCHMARK": "1"}
EXPERTS = ["--model", "experts", "--hidden", "64", "--depth", "512", "--tokens", "256", "--batch-size", "1"] + S12
GEMM_BASE = ["--model", "gemm", "--precision", "bf16", "--hidden", "2048", "--depth", "4", "--batch-size", "16384",
             "--host-objects", "200000"] + S12
STACKS = {"AI4S_PROFILE_WITH_STACK": "1"}
LOADER = VIT_MED + ["--epochs", "1", "--steps-per-epoch", "24"]
CLB0 = {"CUDA_LAUNCH_BLOCKING": "0"}
COMPILE_WIDE = ["--model", "wide", "--hidden", "1024", "--depth", "4", "--batch-size", "32", "--epochs", "1",
                "--steps-per-epoch", "8"]

# ---------------------------------------------------------------------------------------------------- 2 GPUs
_MULTI = [
    # examples/perf-runs/930xx
    _case(93001, "ddp-exposed-comm", 2, WIDE + STEPS, "exposed-communication", "communication-bound",
          lever="batch_64_per_rank",
          notes="DDP, 17 Linear 4096x4096 fp32 (1.1 GB of gradients) on 4 rows per rank, SGD: each step's "
                "all-reduce of ~1.1 GB outlasts the tiny backward it should hide behind", example=True),
    _case(93002, "ddp-slow-link", 2, WIDE + STEPS, "slow-link", "communication-bound",
          env={"NCCL_P2P_DISABLE": "1"}, lever="enable_p2p", control=93018,
          est_s=est(16, 49.0, 1.0, RUN_BASE_2GPU_S),
          notes="93001 with NCCL_P2P_DISABLE=1: the same all-reduce through host shared memory; busbw far "
                "below the NVLink sweep in reports/raw-2026-11-30-2gpu", example=True),
    _case(93003, "ddp-overlapped", 2, VIT_BIG + STEPS, "none", "compute-bound",
          notes="DDP ViT (12 x dim 1024, 256 tokens) bf16 batch 256 per rank, 2 DataLoader workers: the "
                "all-reduce buckets run during the backward, hidden behind compute. (At batch 32 the step "
                "was CPU-launch-bound, the ranks drifted and the all-reduce waited: measured on the first "
                "device run, not kept)", example=True),
    _case(93004, "ddp-straggler", 2, VIT_BIG + STEPS + ["--fault", "straggler", "--straggler-rank", "1",
                                                        "--straggler-matmuls", "24"],
          "straggler", None, rank=1, lever="balance_straggler_rank", control=93010,
          est_s=est(16, 227.0, 1.0, RUN_BASE_2GPU_S),
          notes="93003 where rank 1 runs 24 extra bf16 8192^3 matmuls (~35 ms) every step before its "
                "backward: rank 0 waits in the all-reduce (an NCCL kernel that overlaps its backward), "
                "rank 1 arrives last at the collectives. (With batch 32 the step was CPU-bound and the extra GPU "
                "work hid in rank 1's idle time: rank 0 arrived last; the first device run, not kept)",
          example=True),
    _case(93005, "fsdp", 2, VIT_BIG + STEPS + ["--parallel", "fsdp"], "none", "compute-bound",
          notes="FSDP2 fully_shard per encoder layer: parameter all-gathers and gradient reduce-scatters "
                "(no all-reduce of gradients)", example=True, bench=False),
]
_M = {c["jobid"]: c for c in _MULTI}
_M2 = [  # issue 30: the common DDP/FSDP mistakes, each with its control (not made yet: needs nvidia-h200-x2)
    _case(93011, "ddp-small-buckets", 2, EXPERTS + ["--bucket-cap-mb", "0.01", "--optimizer-impl", "foreach"],
          "ddp-small-buckets", "communication-bound", lever="ddp_bucket_cap_25mb", control=93012, pending=True,
          est_s=est(12, 60.0, 1.0, RUN_BASE_2GPU_S),
          notes="DDP over 512 experts (2048 parameter tensors, 4.3 M parameters) with bucket_cap_mb 0.01: every "
                "tensor is its own bucket, ~2048 small all-reduces a step (latency-bound) instead of one 17 MB bucket"),
    _case(93013, "ddp-find-unused", 2, VIT_BIG + STEPS + ["--find-unused-parameters"],
          "ddp-find-unused-parameters", None, lever="ddp_find_unused_off", control=93010, pending=True,
          est_s=est(16, 200.0, 1.0, RUN_BASE_2GPU_S),
          notes="93003 with find_unused_parameters=True on a model whose every parameter is used: DDP traverses "
                "the autograd graph after each forward (CPU time in DistributedDataParallel.forward); class not "
                "scored (the cost may hide behind a GPU-bound step)"),
    _case(93014, "fsdp-no-prefetch", 2, VIT_BIG + STEPS + ["--parallel", "fsdp1", "--fsdp-prefetch", "none"],
          "fsdp-no-prefetch", "communication-bound", lever="fsdp_prefetch", control=93015, pending=True,
          est_s=est(16, 260.0, 2.0, RUN_BASE_2GPU_S),
          notes="FSDP1 (FullyShardedDataParallel per encoder layer) with backward_prefetch=None and "
                "forward_prefetch=False: each layer's all-gather is issued only when the layer runs, so it "
                "is exposed between the layers' compute"),
    _case(93016, "ddp-straggler-host", 2, VIT_BIG + STEPS + ["--straggler-rank", "1", "--straggler-host-ms", "40"],
          "straggler-host", None, rank=1, lever="balance_straggler_rank", control=93010, pending=True,
          est_s=est(16, 240.0, 1.0, RUN_BASE_2GPU_S),
          notes="93003 where rank 1 spins its CPU 40 ms in every step before its backward (a rank slowed on the "
                "host, beside 93004 slowed on the GPU): rank 1's GPU idles meanwhile, rank 0 waits in the "
                "all-reduce; rank 1 arrives last"),
    _case(93017, "ddp-grad-hook-sync", 2, VIT_BIG + STEPS + ["--grad-norm-sync", "hook"], "host-sync", None,
          lever="remove_host_syncs", control=93010, pending=True, est_s=est(16, 260.0, 1.0, RUN_BASE_2GPU_S),
          notes="93003 with a .item() of every gradient's norm inside its gradient hook during the backward: "
                "the host waits for the device at every parameter, so DDP's bucketed all-reduces no longer "
                "overlap the backward that the CPU has not launched yet"),
]
_M2 += [
    _control(93010, "ddp-vit-control", _M["93004"], "balance_straggler_rank", "compute-bound",
             also=("93013", "93016", "93017"), est_s=est(16, 200.0, 1.0, RUN_BASE_2GPU_S),
             notes="93003's configuration (the 93004 arguments with no extra work): the control of the straggler, "
                   "host-straggler, find-unused and grad-hook-sync cases"),
    _control(93012, "ddp-buckets-control", _M2[0], "ddp_bucket_cap_25mb", None, est_s=est(12, 20.0, 1.0,
                                                                                          RUN_BASE_2GPU_S)),
    _control(93015, "fsdp-prefetch-control", _M2[2], "fsdp_prefetch", "compute-bound",
             est_s=est(16, 210.0, 2.0, RUN_BASE_2GPU_S)),
    _control(93018, "ddp-p2p-control", _M["93002"], "enable_p2p", "communication-bound",
             est_s=est(16, 12.0, 1.0, RUN_BASE_2GPU_S),
             notes="93002 with NCCL_P2P_DISABLE=0 (= 93001's configuration): the NVLink all-reduce, still exposed "
                   "(a wide model on a tiny batch)"),
]
ORDER_2GPU = ["93011", "93012", "93014", "93015", "93016", "93004", "93010", "93017", "93013", "93002", "93018"]
"""The 2-GPU lease's run order (issue 30 first; reruns of 93002/93004 beside their new controls)."""

# ---------------------------------------------------------------------------------------------------- 1 GPU
_OLD = [
    # the first 1-GPU cases (2026-11-30, nvidia-h200-x2), bench/accuracy/cases; the reruns use the knobs
    # their --fault alias set, so a lever can turn them off
    _case(93101, "dataloader-stall", 1, VIT_MED + STEPS + ["--num-workers", "1", "--data-latency-ms", "30",
                                                           "--transform-ms", "30"],
          "dataloader-stall", "data-loader-bound", lever="num_workers_8", control=93141, est_s=est(16, 62.0, 0.8),
          notes="one DataLoader worker; each batch sleeps 30 ms (I/O) and spins the CPU 30 ms (transform): "
                "~60 ms of data per step against a few ms of GPU work"),
    _case(93102, "host-sync", 1, VIT_MED + STEPS + ["--host-sync"], "host-sync", "dispatch-bound", env=CLB0,
          lever="remove_host_syncs", control=93120, est_s=est(16, 22.0),
          notes="a NaN check with .item() on every Linear output and a per-parameter grad norm .item(): "
                "~150 stream drains per step; the GPU idles between them"),
    _case(93103, "launch-bound", 1, ["--model", "wide", "--hidden", "64", "--depth", "48", "--batch-size", "8"]
          + STEPS, "kernel-launch-overhead", "dispatch-bound", lever="cuda_graphs", est_s=est(16, 14.0),
          notes="49 Linear 64x64 layers on 8 rows, AdamW: hundreds of microsecond kernels per step"),
    _case(93104, "memory-bound", 1, ["--model", "elementwise", "--hidden", "8192", "--depth", "24",
                                     "--batch-size", "8192"] + STEPS,
          "memory-bound-elementwise", "memory-bound", lever="torch_compile", est_s=est(16, 46.0),
          notes="24 x (scale, shift, GELU, residual) over a 8192x8192 fp32 activation: elementwise kernels "
                "streaming 256 MB each"),
    _case(93105, "compute-bound", 1, ["--model", "gemm", "--hidden", "8192", "--depth", "8", "--batch-size",
                                      "8192", "--precision", "bf16"] + STEPS,
          "compute-bound-gemm", "compute-bound", est_s=est(16, 53.0),
          notes="9 Linear 8192x8192 on 8192 rows in bf16 autocast (healthy: no lever removes it)"),
    _case(93106, "sdpa-math", 1, ["--model", "attn", "--precision", "bf16", "--tokens", "2048", "--hidden", "1024",
                                  "--depth", "4", "--batch-size", "8", "--sdpa-backend", "math"] + STEPS,
          "sdpa-math-fallback", None, lever="sdpa_fused_backend", control=93134, est_s=est(16, 94.0),
          notes="causal attention over 2048 tokens with SDPA forced to MATH: the 8x16x2048x2048 score matrix "
                "is written, masked and softmaxed in HBM (no flash kernel in the trace). Measured: ~49% of "
                "kernel time in fp32 GEMMs (the math path upcasts bf16 to fp32: no tensor cores) and most of "
                "the rest in elementwise/softmax kernels over the score matrix, GPU busy 98%: no single class "
                "fits, so the class is not scored (the construction-time guess memory-bound was not borne out)"),
    _case(93107, "recompile", 1, COMPILE_WIDE + ["--compile", "static", "--vary-batch"],
          "recompilation", "dispatch-bound", timeout=300, lever="compile_dynamic_shapes", control=93139,
          est_s=est(8, 2400.0, 1.0),
          notes="torch.compile(dynamic=False, inductor), batch size 32+step: Dynamo and Inductor recompile "
                "every step on the CPU while the GPU idles"),
    _case(93108, "launch-blocking", 1, VIT_MED + STEPS, "cuda-launch-blocking", "dispatch-bound",
          env={"CUDA_LAUNCH_BLOCKING": "1"}, lever="launch_blocking_off", control=93120, est_s=est(16, 27.0),
          notes="CUDA_LAUNCH_BLOCKING=1 left on: every launch returns only when its kernel is done"),
    _case(93109, "gpu-contention", 1, ["--model", "vit", "--precision", "bf16", "--hidden", "1024", "--depth", "6",
                                       "--batch-size", "32"] + STEPS, "gpu-contention", "compute-bound", hog=True,
          control=93110, est_s=est(16, 39.0, 8.5),
          notes="a second process (workloads/faults.py hog) runs back-to-back bf16 8192^3 matmuls on the same "
                "GPU for the whole run; telemetry shows the GPU busy beyond what the job's own kernels explain; "
                "class: seed 001 T1 GPU-bound (utilization 100%, power 687 W of 700 W: the shared GPU is the "
                "resource that limits the job, its kernels time-sliced with the other process's; the trace 79.4% "
                "computing, the compute rule nearer; its lone control 93110 is dispatch-bound)"),
    _case(93110, "gpu-contention-control", 1, ["--model", "vit", "--precision", "bf16", "--hidden", "1024",
                                               "--depth", "6", "--batch-size", "32"] + STEPS, "none", None,
          bench=False, est_s=est(16, 25.0),
          notes="93109 without the second process: the control for the contention case"),
]
_O = {c["jobid"]: c for c in _OLD}
_O["93110"]["truth"]["control_of"] = ["93109"]

_NEW = [  # issue 24: the causes one GPU can show, each with its control
    _case(93111, "tf32-off", 1, ["--model", "gemm", "--hidden", "4096", "--depth", "8", "--batch-size", "4096"] + S12,
          "tf32-off", "compute-bound", lever="tf32_matmul", control=93112, pending=True, est_s=est(12, 80.0),
          notes="9 Linear 4096x4096 on 4096 rows in fp32 with torch's default float32_matmul_precision 'highest': "
                "cuBLAS runs FFMA sgemm kernels (~3.7 TFLOP a step on the CUDA cores, not the tensor cores)"),
    _case(93113, "anomaly-mode", 1, VIT_MED + STEPS + ["--detect-anomaly"], "anomaly-mode", "dispatch-bound",
          env=CLB0, lever="anomaly_detection_off", control=93120, pending=True, est_s=est(16, 45.0),
          notes="torch.autograd.set_detect_anomaly(True) for the whole run: aten::isnan + aten::_is_any_true + "
                "aten::item after every backward node (a host sync each) and a Python stack trace captured per "
                "forward op"),
    _case(93114, "activation-checkpointing", 1, VIT_BF16 + ["--batch-size", "64", "--checkpointing"] + S12,
          "activation-checkpointing", "compute-bound", lever="no_activation_checkpointing", control=93115,
          pending=True, est_s=est(12, 85.0, 1.0),
          notes="the 92003 ViT (12 x dim 1024, 256 tokens, bf16, batch 64; fits in a few GB of the 141) with "
                "torch.utils.checkpoint(use_reentrant=False) around every encoder layer: every layer's forward "
                "kernels appear twice per step (once more inside the backward)"),
    _case(93116, "pageable-h2d", 1, CONV + ["--channels-last", "--blocking-h2d"], "pageable-h2d-copy",
          "data-loader-bound", env=CONV_ENV, lever="pinned_nonblocking_h2d", control=93117, pending=True,
          est_s=est(12, 20.0, 1.5),
          notes="conv net (patchify 4x4 stem, 8 x 3x3 conv of 128 channels at 56x56, bf16 channels_last) on 128 "
                "host images 3x224x224 fp32 = 77 MB a step copied from pageable memory with non_blocking=False: "
                "Memcpy HtoD (Pageable) on the critical path with the CPU blocked. Class: seed 001 files T6 under "
                "the input pipeline (DataLoader) section"),
    _case(93118, "nchw-conv", 1, CONV + ["--pin-memory"], "nchw-conv-layout", "compute-bound", env=CONV_ENV,
          lever="channels_last", control=93117, pending=True, est_s=est(12, 18.0, 1.5),
          notes="93117 without channels_last: the bf16 convolutions run on NCHW tensors, so cuDNN adds "
                "nchwToNhwc/nhwcToNchw layout transposes around the tensor-core kernels"),
    _case(93119, "cudnn-benchmark-off", 1, CONV + ["--channels-last", "--pin-memory"], "cudnn-benchmark-off",
          "compute-bound", env={"AI4S_CUDNN_BENCHMARK": "0"}, lever="cudnn_benchmark", control=93117, pending=True,
          est_s=est(12, 14.0, 1.0),
          notes="93117 with torch.backends.cudnn.benchmark=False (torch's default) on fixed shapes: cuDNN's "
                "heuristic picks; the effect size is what the control's ratio says (a ratio near 1 means the "
                "heuristic was already right on this net, and the case should not be scored)"),
    _case(93121, "per-parameter-optimizer", 1, EXPERTS + ["--optimizer-impl", "forloop"], "per-parameter-optimizer",
          "dispatch-bound", lever="foreach_optimizer", control=93122, pending=True, est_s=est(12, 100.0, 2.5),
          notes="512 experts = 2048 parameter tensors (4.3 M parameters), AdamW(foreach=False): ~10 kernels per "
                "tensor in Optimizer.step (~20 000 launches a step) around a forward/backward of a few batched "
                "matmuls"),
    _case(93123, "grad-norm-sync", 1, EXPERTS + ["--optimizer-impl", "foreach", "--grad-norm-sync", "after"],
          "host-sync", "dispatch-bound", lever="remove_host_syncs", control=93122, pending=True,
          est_s=est(12, 70.0),
          notes="93122 plus a per-parameter gradient-norm log: p.grad.norm().item() for each of the 2048 tensors "
                "after the backward, all from one line (truth sites['host-sync']): 2048 aten::item -> "
                "aten::_local_scalar_dense -> cudaStreamSynchronize a step"),
    _case(93124, "worker-respawn", 1, VIT_MED + ["--epochs", "8", "--steps-per-epoch", "3", "--num-workers", "2",
                                                 "--worker-init-ms", "400"], "dataloader-worker-respawn",
          "data-loader-bound", lever="persistent_workers", control=93125, pending=True, est_s=est(24, 13.0, 4.2),
          notes="2 workers that take 400 ms to start (opening files) and persistent_workers=False over 8 epochs of "
                "3 steps: every epoch's first step waits ~0.4 s for new workers (median step ~15 ms, mean ~150 "
                "ms); the profiled steps 9-11 begin at epoch 3's start"),
    _case(93126, "shallow-prefetch", 1, LOADER + ["--num-workers", "4", "--prefetch-factor", "1", "--burst-every",
                                                  "5", "--burst-ms", "120"], "dataloader-shallow-prefetch",
          "data-loader-bound", lever="prefetch_factor_8", control=93127, pending=True, est_s=est(24, 20.0, 1.0),
          notes="4 workers with prefetch_factor 1 (4 batches ahead, ~60 ms of steps) and every 5th batch 120 ms "
                "slow: the mean fetch rate keeps up, the bursts do not (a stall at steps 5, 10, 15, 20; step 10 "
                "is profiled)"),
    _case(93128, "cpu-transform-loader", 1, VIT_MED + S300 + ["--num-workers", "1", "--transform-ms", "40"],
          "dataloader-cpu-transform", "data-loader-bound", lever="gpu_transform", control=93129, pending=True,
          est_s=est(300, 42.0),
          notes="1 worker spinning its CPU 40 ms per batch (a Python augmentation): one host CPU at ~100% user "
                "time in node_cpu_seconds_total while the GPU waits"),
    _case(93130, "io-wait-loader", 1, VIT_MED + S300 + ["--num-workers", "1", "--data-latency-ms", "40"],
          "dataloader-io-wait", "data-loader-bound", lever="num_workers_8", control=93131, pending=True,
          est_s=est(300, 42.0),
          notes="1 worker sleeping 40 ms per batch (reading a shard from storage): the host CPUs idle in "
                "node_cpu_seconds_total while the GPU waits"),
    _case(93132, "cpu-oversubscription", 1, VIT_MED + S12 + ["--num-workers", "8", "--worker-threads", "16",
                                                            "--transform-matmuls", "8", "--transform-dim", "512"],
          "cpu-oversubscription", None, lever="worker_threads_1", control=93133, pending=True,
          est_s=est(12, 60.0, 1.5),
          notes="8 workers each set to 16 intra-op threads (torch.set_num_threads(16) in worker_init_fn) doing 8 "
                "torch matmuls of 512^2 per batch: 128 OpenMP threads on 16 cores; every CPU busy and load1 far "
                "above the cores in telemetry. Class not scored: the starved main thread also slows the launches"),
    _case(93135, "profiler-stretched", 1, VIT_BF16 + ["--batch-size", "32"] + S12, "none", "compute-bound",
          env={"AI4S_PROFILE_WITH_STACK": "1", "AI4S_PROFILE_RECORD_SHAPES": "1", "AI4S_PROFILE_MEMORY": "1"},
          pending=True, est_s=est(12, 40.0, 1.5),
          notes="a GPU-bound ViT (12 x 1024, bf16, batch 32: ~7 TFLOP a step, about half 92003's) profiled with "
                "record_shapes, with_stack and "
                "profile_memory: the profiler's CPU cost per op stretches the profiled steps past the log's "
                "steady step; it must keep its class (compare 93136, the same run with the default profiler)"),
    _case(93136, "profiler-plain", 1, VIT_BF16 + ["--batch-size", "32"] + S12, "none", "compute-bound",
          pending=True, est_s=est(12, 32.0),
          notes="93135 with the default profiler settings (the stretch is the ratio of their profiled steps)"),
    _case(93137, "graph-break", 1, COMPILE_WIDE + ["--compile", "default", "--graph-breaks"], "graph-break",
          "dispatch-bound", lever="remove_graph_breaks", control=93138, pending=True, timeout=240,
          est_s=est(8, 10.0, 8.0),
          notes="the compiled wide MLP (6 Linear 1024, batch 32) with torch._dynamo.graph_break() in every hidden "
                "Linear's forward: the step runs as 5+ compiled regions ('Torch-Compiled Region: i/j') with eager "
                "Python between them instead of one"),
]
_N = {c["jobid"]: c for c in _NEW}

_HOST = [  # issue 34: host-side kinds on a GPU-dense base (bf16 GEMMs: the GPU busy unless the host stalls it)
    _case(93201, "d2h-param-copy", 1, GEMM_BASE + ["--d2h-params"], "d2h-param-copy", None, env=STACKS,
          lever="no_per_step_param_copy", control=93211, pending=True, est_s=est(12, 40.0),
          notes="5 Linear 2048^2 (21 M fp32 parameters, 84 MB) copied to the host every step after the optimizer "
                "(state_dict -> .to('cpu'), 10 pageable Memcpy DtoH of 84 MB a step, the host allocating and "
                "faulting the pages in), profiled with stacks: the file:line is truth sites['d2h-param-copy']. "
                "Class not scored (part of the step is the GPU's DtoH memcpy)"),
    _case(93202, "d2h-param-copy-nostack", 1, GEMM_BASE + ["--d2h-params"], "d2h-param-copy", None,
          lever="no_per_step_param_copy", control=93210, pending=True, est_s=est(12, 38.0),
          notes="93201 profiled without stacks: the pair (93201, 93202) measures what with_stack costs, and the "
                "report must say that the trace holds no Python stacks"),
    _case(93203, "allocator-churn", 1, GEMM_BASE + ["--empty-cache"], "allocator-churn", "dispatch-bound",
          lever="no_empty_cache", control=93210, pending=True, est_s=est(12, 15.0),
          notes="torch.cuda.empty_cache() after the backward and after the optimizer step: cudaFree of every "
                "cached segment, then cudaMalloc again for the next activations and optimizer temporaries"),
    _case(93204, "per-sample-loop", 1, GEMM_BASE + ["--aux-head", "256", "--per-sample-loop"], "per-sample-loop",
          "dispatch-bound", env={**STACKS, "AI4S_PROFILE_RECORD_SHAPES": "1"}, lever="batch_per_sample_loop",
          control=93205, pending=True, est_s=est(12, 25.0),
          notes="an auxiliary head (Linear 2048->256, GELU, Linear 256->1) run 256 times per step on batch-1 "
                "shapes in a Python loop (models.py WithAuxHead, truth sites['per-sample-loop']); profiled with "
                "record_shapes and stacks: aten::linear on [1, 2048] x 256 a step"),
    _case(93206, "python-outside-ops", 1, GEMM_BASE + ["--python-work-ms", "40"], "python-outside-ops",
          "dispatch-bound", env=STACKS, lever="no_python_work_in_step", control=93211, pending=True,
          est_s=est(12, 46.0),
          notes="40 ms of pure-Python metrics bookkeeping after each step's loss is read (no op recorded, GPU "
                "idle): with stacks, the python_function events name faults.py python_metrics/spin"),
    _case(93207, "gc-pause", 1, GEMM_BASE + ["--gc-collect"], "gc-pause", "dispatch-bound", env=STACKS,
          lever="no_gc_collect_per_step", control=93211, pending=True, est_s=est(12, 120.0),
          notes="gc.collect() every step over the torch process's objects plus 200 000 live lists (a file "
                "index): tens of ms a step outside every op, GPU idle"),
    _case(93208, "checkpoint-per-step", 1, GEMM_BASE + ["--save-every-step"], "checkpoint-io-per-step", None,
          env=STACKS, lever="no_checkpoint_per_step", control=93211, pending=True, est_s=est(12, 70.0),
          notes="torch.save(model.state_dict()) of 84 MB to /tmp every step (deleted at the end: lesson 30): "
                "DtoH copies and a file write; class not scored (part is the GPU's DtoH memcpy)"),
    _case(93209, "cpu-preprocess", 1, GEMM_BASE + ["--preprocess", "cpu"], "cpu-preprocess-in-step",
          "dispatch-bound", env=STACKS, lever="preprocess_on_gpu", control=93212, pending=True,
          est_s=est(12, 60.0),
          notes="a 1024x4096 block made, sorted per row and standardized on the CPU in the main process before "
                "every forward (aten::randn/sort/sub/div/std on the host, no kernels): the GPU idles"),
]
_H = {c["jobid"]: c for c in _HOST}

_CONTROLS = [
    _control(93112, "tf32-on", _N["93111"], "tf32_matmul", "compute-bound", est_s=est(12, 15.0)),
    _control(93120, "vit-med-control", _N["93113"], "anomaly_detection_off", "dispatch-bound",
             also=("93102", "93108"), est_s=est(16, 13.0),
             notes="the small fp32 ViT (6 x dim 512, 128 tokens, batch 16) with nothing injected "
                   "(CUDA_LAUNCH_BLOCKING=0): the control of anomaly-mode, host-sync and launch-blocking"),
    _control(93115, "checkpointing-control", _N["93114"], "no_activation_checkpointing", "compute-bound",
             est_s=est(12, 65.0, 1.0)),
    _control(93117, "conv-control", _N["93116"], "pinned_nonblocking_h2d", "compute-bound", also=("93118", "93119"),
             est_s=est(12, 12.0, 1.5),
             notes="the conv net in bf16 channels_last, pinned host batches copied with non_blocking=True, "
                   "cudnn.benchmark on: the control of pageable-h2d, nchw-conv and cudnn-benchmark-off"),
    _control(93122, "experts-foreach", _N["93121"], "foreach_optimizer", "dispatch-bound", also=("93123",),
             est_s=est(12, 15.0)),
    _control(93125, "persistent-workers", _N["93124"], "persistent_workers", "dispatch-bound",
             est_s=est(24, 13.0, 1.0)),
    _control(93127, "deep-prefetch", _N["93126"], "prefetch_factor_8", "dispatch-bound", est_s=est(24, 13.0, 1.0)),
    _control(93129, "gpu-transform", _N["93128"], "gpu_transform", "dispatch-bound", est_s=est(300, 13.0)),
    _control(93131, "io-wait-8-workers", _N["93130"], "num_workers_8", "dispatch-bound", est_s=est(300, 13.0, 1.0)),
    _control(93133, "one-thread-workers", _N["93132"], "worker_threads_1", "dispatch-bound",
             est_s=est(12, 13.0, 1.0)),
    _control(93134, "sdpa-flash", _O["93106"], "sdpa_fused_backend", None, est_s=est(16, 30.0),
             notes="93106 with SDPA left on auto (the flash kernel): class not scored, like its case"),
    _control(93138, "compiled-no-breaks", _N["93137"], "remove_graph_breaks", "dispatch-bound",
             est_s=est(8, 6.0, 5.0)),
    _control(93139, "compile-dynamic", _O["93107"], "compile_dynamic_shapes", "dispatch-bound",
             est_s=est(8, 40.0, 10.0), notes="93107 compiled with dynamic=True: one shape-generic graph, no "
                                             "recompilation after the first (or second) step"),
    _control(93141, "dataloader-stall-8-workers", _O["93101"], "num_workers_8", "dispatch-bound",
             est_s=est(16, 13.0, 1.0)),
    _control(93210, "gemm-base", _H["93202"], "no_per_step_param_copy", "compute-bound", also=("93203",),
             est_s=est(12, 5.0), notes="5 Linear 2048^2 on 16384 rows in bf16 (a few long GEMMs a step, the GPU "
                                       "busy): the issue-34 control without stacks"),
    _control(93211, "gemm-base-stacks", _H["93201"], "no_per_step_param_copy", "compute-bound",
             also=("93206", "93207", "93208"), est_s=est(12, 5.5),
             notes="93210 profiled with stacks: the control of the issue-34 cases with stacks; with 93210 it "
                   "also measures what stacks cost on a GPU-dense step"),
    _control(93205, "aux-head-batched", _H["93204"], "batch_per_sample_loop", "compute-bound", est_s=est(12, 6.0)),
    _control(93212, "preprocess-on-gpu", _H["93209"], "preprocess_on_gpu", "compute-bound", est_s=est(12, 6.0)),
]
CASES = _MULTI + _M2 + _OLD + _NEW + _HOST + _CONTROLS
"""Every case, 2-GPU first."""


def _apply_measured(cases: list[dict]) -> None:
    """Complete each case's truth from what its run showed (:data:`measured.MEASURED`): the note
    appended, ``klass`` replacing the class, ``present`` / ``score_cause`` added; a case with an
    entry was made and bundled (``pending`` False, ``bench`` True) unless the entry says
    ``pending``."""
    for c in cases:
        m = MEASURED.get(c["jobid"])
        if not m:
            continue
        t = c["truth"]
        t["notes"] = f"{t['notes']}. {m['note']}" if t["notes"] else m["note"]
        if "klass" in m:
            t["class"] = m["klass"]
        for k in ("present", "score_cause"):
            if k in m:
                t[k] = m[k]
        c["pending"] = bool(m.get("pending", False))
        c["bench"] = not c["pending"]


_apply_measured(CASES)

ORDER_1GPU = [
    # issue 24's new causes, each beside its control
    "93111", "93112", "93120", "93113", "93114", "93115", "93116", "93117", "93118", "93121", "93122", "93123",
    "93124", "93125", "93126", "93127", "93128", "93129", "93130", "93131", "93132", "93133",
    # issue 34's host-side kinds
    "93210", "93211", "93201", "93202", "93203", "93204", "93205", "93206", "93207", "93208", "93209", "93212",
    # reruns of the first cases beside their new controls; the profiler-stretch pair; cudnn.benchmark
    "93102", "93108", "93106", "93134", "93135", "93136", "93119",
    # torch.compile (the slow ones), then the first loader case's pair
    "93137", "93138", "93139", "93107", "93101", "93141",
    # issue 29: the long real profile, last
    "long",
]
"""The 1-GPU lease's run order: most valuable first, so a ``--budget`` deadline drops the tail."""

LONG_EST_S = 45.0
"""Estimated seconds of the long GNN profile (130 profiled steps, >= 150 MB of JSON): ~17 ms a step
unprofiled (92001), the profiled steps slower, then kineto's export and gzip of ~150 MB."""

WARMUP_EST_S = 15.0
"""Estimated seconds of the driver's first command on a fresh machine (cold page cache: torch's
libraries read from disk, CUDA, cuBLAS and cuDNN initialized once)."""
