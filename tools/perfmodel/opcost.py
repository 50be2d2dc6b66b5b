"""FLOPs and bytes moved per PyTorch op, from the shapes and dtypes a trace recorded with
``record_shapes=True`` (cpu_op ``args``: ``Input Dims``, ``Input type``, ``Concrete Inputs``), as
TraceLens's perf model does (github.com/AMD-AGI/TraceLens, ``TraceLens/PerfModel/perf_model.py``:
GEMM 2·M·N·K, SDPA 4·B·H·L·S·E forward, elementwise/normalization/reduction bytes = inputs + output).

Categories: ``GEMM``, ``CONV``, ``SDPA``, ``elementwise``, ``normalization``, ``reduction``.
Bytes are the compulsory traffic (each input read once, the output written once), so achieved
bandwidth from them is a lower bound on what the kernel moved.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

DTYPE_BYTES = {"float": 4, "c10::float": 4, "float32": 4, "double": 8, "c10::bfloat16": 2, "bfloat16": 2, "c10::half": 2,
               "half": 2, "float16": 2, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1, "long int": 8, "int": 4,
               "bool": 1, "unsigned char": 1, "signed char": 1, "short int": 2, "c10::complex<float>": 8}
PRECISION = {"float": "fp32", "c10::float": "fp32", "float32": "fp32", "double": "fp64", "c10::bfloat16": "bf16",
             "bfloat16": "bf16", "c10::half": "fp16", "half": "fp16", "float16": "fp16", "c10::float8_e4m3fn": "fp8",
             "c10::float8_e5m2": "fp8"}

GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear", "aten::_scaled_mm"}
CONV_OPS = {"aten::convolution", "aten::_convolution", "aten::conv2d", "aten::conv1d", "aten::conv3d", "aten::cudnn_convolution",
            "aten::miopen_convolution"}
SDPA_OPS = {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
            "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
            "aten::_scaled_dot_product_attention_math", "aten::_flash_attention_forward", "aten::_efficient_attention_forward"}
NORM_OPS = {"aten::layer_norm", "aten::native_layer_norm", "aten::batch_norm", "aten::native_batch_norm",
            "aten::_batch_norm_impl_index", "aten::cudnn_batch_norm", "aten::group_norm", "aten::native_group_norm",
            "aten::rms_norm", "aten::_fused_rms_norm", "aten::native_layer_norm_backward", "aten::native_batch_norm_backward"}
REDUCE_OPS = {"aten::sum", "aten::mean", "aten::max", "aten::min", "aten::amax", "aten::norm", "aten::linalg_vector_norm",
              "aten::_softmax", "aten::softmax", "aten::_log_softmax", "aten::log_softmax", "aten::var", "aten::std",
              "aten::argmax", "aten::cumsum", "aten::_softmax_backward_data"}
ELEMENTWISE_OPS = {"aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::mul", "aten::mul_", "aten::div", "aten::div_",
                   "aten::gelu", "aten::gelu_backward", "aten::relu", "aten::relu_", "aten::silu", "aten::silu_",
                   "aten::silu_backward", "aten::sigmoid", "aten::tanh", "aten::exp", "aten::log", "aten::pow", "aten::sqrt",
                   "aten::rsqrt", "aten::neg", "aten::copy_", "aten::fill_", "aten::zero_", "aten::where", "aten::clamp",
                   "aten::threshold_backward", "aten::native_dropout", "aten::dropout", "aten::addcmul_", "aten::addcdiv_",
                   "aten::lerp_", "aten::_foreach_add_", "aten::_foreach_mul_", "aten::abs", "aten::sin", "aten::cos"}
NORM_FLOPS_PER_ELEM = 5   # mean, centre, square, scale, shift (TraceLens perf model, LayerNorm: ~5 FLOPs/element)


@dataclass(frozen=True)
class OpCost:
    """One op's modelled work: ``flops`` (FLOP), ``bytes`` (B), ``precision`` (``bf16``...)."""

    category: str
    flops: float
    bytes: float
    precision: str


def category_of(name: str) -> str | None:
    """The roofline category of an ``aten::`` op name, None when the op is not modelled."""
    for cat, ops in (("GEMM", GEMM_OPS), ("CONV", CONV_OPS), ("SDPA", SDPA_OPS), ("normalization", NORM_OPS),
                     ("reduction", REDUCE_OPS), ("elementwise", ELEMENTWISE_OPS)):
        if name in ops:
            return cat
    return None


def _numel(d) -> int:
    return math.prod(d) if isinstance(d, list) and d and all(isinstance(x, int) for x in d) else 0


def _tensors(dims: list, types: list) -> list[tuple[list[int], str]]:
    out = []
    for d, t in zip(dims, types):
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d) and t in DTYPE_BYTES:
            out.append((d, t))
    return out


def _ints(s: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", s or "")]


def op_cost(name: str, args: dict) -> OpCost | None:
    """FLOPs and bytes of one cpu_op from its recorded ``args``; None when the op is not
    modelled or its shapes were not recorded (a trace without ``record_shapes``)."""
    cat = category_of(name)
    dims, types = args.get("Input Dims"), args.get("Input type")
    if cat is None or not dims or not types:
        return None
    types = [str(t).lower() for t in types]
    ts = _tensors(dims, types)
    if not ts:
        return None
    esz = DTYPE_BYTES[ts[0][1]]
    prec = PRECISION.get(ts[0][1], ts[0][1])
    conc = args.get("Concrete Inputs") or []
    if cat == "GEMM":
        mats = [(d, t) for d, t in ts if len(d) >= 2]
        if len(mats) < 2:
            return None
        if name in ("aten::addmm", "aten::baddbmm"):
            mats = mats[-2:]
        (a, ta), (b, _tb) = mats[0], mats[1]
        esz, prec = DTYPE_BYTES[ta], PRECISION.get(ta, ta)
        if name == "aten::linear":  # input (..., K), weight (N, K)
            m, k, n, batch = _numel(a[:-1]), a[-1], b[0], 1
        elif len(a) == 3 and len(b) == 3:  # bmm (B, M, K) x (B, K, N)
            batch, m, k, n = a[0], a[1], a[2], b[2]
        else:
            batch, m, k, n = _numel(a[:-2]) or 1, a[-2], a[-1], b[-1]
        flops = 2.0 * batch * m * n * k
        nbytes = esz * batch * (m * k + k * n + m * n)
        return OpCost(cat, flops, nbytes, prec)
    if cat == "CONV":
        if len(ts) < 2:
            return None
        (x, tx), (w, _tw) = ts[0], ts[1]
        if len(x) < 3 or len(w) != len(x):
            return None
        stride = _ints(conc[3]) if len(conc) > 3 else []
        pad = _ints(conc[4]) if len(conc) > 4 else []
        dil = _ints(conc[5]) if len(conc) > 5 else []
        groups = (_ints(conc[8]) or [1])[0] if len(conc) > 8 else 1
        nsp = len(x) - 2
        out_sp = []
        for i in range(nsp):
            s = stride[i] if i < len(stride) else 1
            p = pad[i] if i < len(pad) else 0
            dl = dil[i] if i < len(dil) else 1
            out_sp.append((x[2 + i] + 2 * p - dl * (w[2 + i] - 1) - 1) // s + 1)
        n_out = x[0] * w[0] * math.prod(out_sp)
        flops = 2.0 * n_out * (x[1] // max(groups, 1)) * math.prod(w[2:])
        nbytes = DTYPE_BYTES[tx] * (_numel(x) + _numel(w) + n_out)
        return OpCost(cat, flops, nbytes, PRECISION.get(tx, tx))
    if cat == "SDPA":
        q4 = [(d, t) for d, t in ts if len(d) == 4][:3]
        if len(q4) < 3:
            return None
        (q, tq), (k, _), (v, _) = q4
        b, h, lq, e = q
        s, ev = k[2], v[3]
        causal = any(str(c).strip().lower() == "true" for c in conc[4:7]) if len(conc) > 4 else False
        flops = 2.0 * b * h * lq * s * (e + ev) * (0.5 if causal else 1.0)
        nbytes = DTYPE_BYTES[tq] * (_numel(q) + _numel(k) + _numel(v) + b * h * lq * ev)
        return OpCost(cat, flops, nbytes, PRECISION.get(tq, tq))
    big = max(_numel(d) for d, _t in ts)
    inputs = sum(_numel(d) * DTYPE_BYTES[t] for d, t in ts)
    if cat == "normalization":
        return OpCost(cat, NORM_FLOPS_PER_ELEM * big, inputs + big * esz, prec)
    if cat == "reduction":
        keeps = "softmax" in name or name == "aten::cumsum"  # output as large as the input
        return OpCost(cat, float(big), inputs + (big * esz if keeps else esz), prec)
    out = 0 if name.endswith("_") else big * esz  # in-place ops write into an input
    return OpCost(cat, float(big), inputs + out, prec)
