"""TraceLens's definitions, shared as data by the engine and the verifier's reader: the gpu_timeline
row names, the communication-kernel rule, and the op categories of kernel-launching ops (GEMM, CONV,
NORM, SDPA, elementwise, reduce, triton, ...)."""

from __future__ import annotations

import re

TIMELINE_ROWS: tuple[str, ...] = (
    "computation_time",
    "exposed_comm_time",
    "exposed_memcpy_time",
    "busy_time",
    "idle_time",
    "total_time",
    "total_comm_time",
    "total_memcpy_time",
)
"""Row names of TraceLens's gpu_timeline.csv, in its order."""

MAIN_TIMELINE_ROWS: tuple[str, ...] = TIMELINE_ROWS[:6]

# Communication kernels: TraceLens util.COMMUNICATION_KEYS + DEFAULT_CUSTOM_COLLECTIVE_PATTERNS.
_COMM_RE = re.compile(r"nccl|rccl|cross_device_reduce", re.IGNORECASE)

# Op-name -> category, following the categories TraceLens assigns through its perf-model
# registry (TraceLens/PerfModel/torch_op_mapping.py); written out here for the common ops.
_GEMM = ("aten::mm", "aten::addmm", "aten::_scaled_mm", "aten::bmm", "aten::baddbmm",
         "tex_ts::te_gemm_ts", "trtllm::cublas_scaled_mm", "bitsandbytes::int8_linear_matmul",
         "vllm::gemm_with_dynamic_quant")
_SDPA_FWD = ("FlashAttnFunc", "flash_attn::_flash_attn_forward", "flash_attn::_flash_attn_varlen_forward",
             "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_efficient_attention",
             "aten::_scaled_dot_product_flash_attention", "aiter::_flash_attn_forward",
             "aiter::wrapper_fmha_v3_fwd", "aiter::mha_fwd", "aiter::fmha_v3_fwd", "flash_attn_3::fwd",
             "EvoformerAttention", "aten::_efficient_attention_forward")
_SDPA_BWD = ("flash_attn::_flash_attn_backward", "flash_attn::_flash_attn_varlen_backward",
             "aiter::_flash_attn_backward", "aiter::wrapper_fmha_v3_bwd", "aiter::mha_bwd",
             "FlashAttnFuncBackward", "FusedAttnFuncBackward",
             "aten::_scaled_dot_product_cudnn_attention_backward",
             "aten::_scaled_dot_product_efficient_attention_backward",
             "aten::_scaled_dot_product_flash_attention_backward", "aten::_efficient_attention_backward")
_CONV_FWD = ("aten::convolution", "aten::miopen_convolution", "aten::cudnn_convolution", "ConvBias_", "ConvBiasReLU_")
_CONV_BWD = ("aten::convolution_backward", "ConvBias_Backward", "ConvBiasReLU_Backward")
_NORM_KINDS = ("batch", "layer", "group", "instance")
_NORM_FWD = tuple(f"aten::{v}{k}_norm" for k in _NORM_KINDS for v in ("", "native_", "miopen_", "cudnn_")) + (
    "aten::_fused_rms_norm", "primus::fused_ln_modulate")
_NORM_BWD = tuple(f"aten::{v}{k}_norm_backward" for k in _NORM_KINDS + ("rms",)
                  for v in ("", "native_", "miopen_", "cudnn_")) + (
    "aten::_fused_rms_norm_backward", "primus::fused_ln_modulate_backward")
_ELEMENTWISE = ("aten::copy", "aten::copy_", "aten::clamp_min", "aten::clamp_min_", "aten::clamp_max",
                "aten::clamp_max_", "aten::sigmoid", "aten::rsqrt", "aten::silu", "aten::neg", "aten::pow",
                "aten::div", "aten::div_", "aten::mul", "aten::mul_", "aten::add", "aten::add_",
                "aten::sigmoid_backward", "aten::threshold_backward", "aten::replication_pad1d",
                "aten::replication_pad2d", "aten::replication_pad3d", "aten::upsample_nearest1d",
                "aten::upsample_nearest2d", "aten::upsample_nearest3d", "LigerSiLUMulFunction")
_REDUCE = ("aten::sum", "aten::mean", "aten::max", "aten::min", "aten::norm", "aten::linalg_norm", "aten::std",
           "aten::var", "aten::logsumexp", "aten::cumsum", "aten::cumprod", "aten::amin", "aten::amax")

OP_CATEGORIES: dict[str, str] = {}
for _names, _cat in ((_GEMM, "GEMM"), (_SDPA_FWD, "SDPA_fwd"), (_SDPA_BWD, "SDPA_bwd"), (_CONV_FWD, "CONV_fwd"),
                     (_CONV_BWD, "CONV_bwd"), (_NORM_FWD, "NORM_fwd"), (_NORM_BWD, "NORM_bwd"),
                     (_ELEMENTWISE, "elementwise"), (_REDUCE, "reduce")):
    for _n in _names:
        OP_CATEGORIES[_n] = _cat


def categorize_op(name: str, first_kernel_name: str = "") -> str:
    """TraceLens-style op category (GEMM, CONV_fwd/bwd, NORM_fwd/bwd, SDPA_fwd/bwd, elementwise,
    reduce, triton, record_param_comms, multi_tensor_apply, other) of a kernel-launching op.

    Unknown ops fall back on the first kernel's name when it is an ATen native kernel
    (``void at::native...`` containing elementwise / reduce / multi_tensor_apply)."""
    cat = OP_CATEGORIES.get(name)
    if cat:
        return cat
    if name.startswith("triton"):
        return "triton"
    if name.startswith("record_param_comms"):
        return "record_param_comms"
    if first_kernel_name.startswith("void at::native"):
        for needle in ("elementwise", "reduce", "multi_tensor_apply"):
            if needle in first_kernel_name:
                return needle
    return "other"


# Category spellings. kineto's current names are libkineto/include/ActivityType.h (``_activityTypeNames``).
# Other PyTorch builds spell the kernel category ``Kernel`` (kineto PR #674 wrote it capitalised again for
# TensorBoard 0.4; issues #659, #564), and kineto before Nov 2021 (libkineto/src/output_json.cpp before
# commit bc4eaef5) wrote the legacy categories ``Kernel``, ``Runtime``, ``Memcpy``, ``Memset`` and flow
# events ``async_gpu`` (HTA's test trace trace_file_list/inference_rank_1 is one); the local notes
# (shared/notes/trace-libraries.md) record ``async_cpu_to_gpu`` flows in a 2022 trace.
KINETO_CATEGORIES: frozenset[str] = frozenset({
    "cpu_op", "user_annotation", "gpu_user_annotation", "gpu_memcpy", "gpu_memset", "kernel",
    "external_correlation", "cuda_runtime", "cuda_driver", "cpu_instant_event", "python_function", "overhead",
    "mtia_runtime", "mtia_ccp_events", "mtia_insight", "cuda_sync", "cuda_event", "mtia_counters", "glow_runtime",
    "cuda_profiler_range", "hpu_op", "xpu_runtime", "xpu_driver", "collective_comm", "privateuse1_runtime",
    "privateuse1_driver", "xpu_scope_profiler", "xpu_sync", "hardware_counters", "ac2g", "fwdbwd", "trace"})
LEGACY_CATEGORIES: dict[str, str] = {"runtime": "cuda_runtime", "memcpy": "gpu_memcpy", "memset": "gpu_memset",
                                     "async_gpu": "ac2g", "async_cpu_to_gpu": "ac2g"}


def canonical_category(cat: object) -> object:
    """kineto's current name of a trace event category: ``Kernel`` -> ``kernel``, ``GPU_MEMCPY`` ->
    ``gpu_memcpy``, legacy ``Runtime`` -> ``cuda_runtime``, ``Memcpy`` -> ``gpu_memcpy``, ``Memset`` ->
    ``gpu_memset``, ``async_gpu`` -> ``ac2g`` (sources above). Any other string is returned as it is
    (``Trace`` stays ``Trace``); a value that is not a string is no category (None)."""
    if not isinstance(cat, str):
        return None
    low = cat.lower()
    if low in KINETO_CATEGORIES:
        return cat if low == "trace" else low
    return LEGACY_CATEGORIES.get(low, cat)


#: Device activity of kinds neither reader takes (they read CUDA/HIP ``kernel``, ``gpu_memcpy``,
#: ``gpu_memset``), by kineto category (ActivityType.h), with what it is: a trace holding these and no
#: CUDA/HIP GPU event is no CPU-only run.
OTHER_DEVICE_CATEGORIES: dict[str, str] = {
    "mtia_ccp_events": "MTIA device events",
    "mtia_runtime": "MTIA runtime calls",
    "mtia_insight": "MTIA Insight events",
    "mtia_counters": "MTIA hardware counters",
    "cuda_profiler_range": "CUPTI range-profiler ranges (kernels measured per range, not one by one)",
    "hpu_op": "HPU (Gaudi) ops",
    "xpu_runtime": "Intel XPU runtime calls",
    "xpu_driver": "Intel XPU driver calls",
    "xpu_scope_profiler": "Intel XPU scope-profiler ranges",
    "privateuse1_runtime": "PrivateUse1-backend runtime calls",
    "privateuse1_driver": "PrivateUse1-backend driver calls",
    "glow_runtime": "Glow runtime calls",
    "gpu_user_annotation": "GPU-side annotations (ranges, not kernels)",
    "hardware_counters": "hardware counter samples",
}


def no_gpu_events_message(name: str, other: dict[str, int], dropped_gpu: int = 0) -> str:
    """The one-line refusal of a trace without CUDA/HIP GPU events: ``other`` counts the events of
    :data:`OTHER_DEVICE_CATEGORIES` it holds, ``dropped_gpu`` the GPU events the reader could not use
    (no number for ts or dur, a begin never ended, an instant). With neither it may be a CPU-only
    run; otherwise it says what is there and why it is not read."""
    if dropped_gpu:
        return (f"{name}: no usable GPU kernel, memcpy or memset event: {dropped_gpu} GPU event(s) on GPU rows could "
                "not be read (the reasons follow)")
    if not other:
        return f"{name}: no GPU kernel, memcpy or memset events and no graph launch (a CPU-only run?)"
    what = ", ".join(f"{n} {c} ({OTHER_DEVICE_CATEGORIES[c]})" for c, n in
                     sorted(other.items(), key=lambda kv: -kv[1]))
    return (f"{name}: no CUDA/HIP GPU events (kernel, gpu_memcpy, gpu_memset), but device activity of a kind this "
            f"tool does not read: {what}. It reads kineto's CUDA/HIP GPU events only; not a CPU-only run")
