"""TraceLens's perf models of the ops its roofline sheets list, re-written for
:mod:`.tracelens_sheets` (AMD-AGI/TraceLens commit 171dd747, ``TraceLens/PerfModel/perf_model.py``:
``aten_mm``, ``aten_addmm``, ``aten_bmm``, ``aten_baddbmm``, ``aten__scaled_dot_product_*_attention``,
``aten_unary_elementwise``, ``aten_binary_elementwise``; ``PerfModel/utils.py``: ``name2bpe``,
``torch_dtype_map``). Each model takes an op's parsed ``Input Dims``, ``Input type``,
``Input Strides`` and ``Concrete Inputs`` and returns ``(params, FLOPs, bytes or None, compute
spec)``, params in the order TraceLens's ``get_param_details`` gives them."""

from __future__ import annotations

import math
from typing import Any

from .categories import _CONV_BWD, _CONV_FWD, _GEMM, _SDPA_BWD, _SDPA_FWD

ROOFLINE_SHEETS = ("GEMM", "SDPA_fwd", "SDPA_bwd", "CONV_fwd", "CONV_bwd", "UnaryElementwise", "BinaryElementwise")
"""The roofline sheets ``compare_perf_reports_pytorch --sheets roofline`` reads, in its order."""

ROOFLINE_PARAMS: dict[str, tuple[str, ...]] = {
    "GEMM": ("M", "N", "K", "bias", "stride_A", "stride_B", "dtype_A_B", "B"),
    "SDPA_fwd": ("B", "N_Q", "H_Q", "N_KV", "H_KV", "d_h_qk", "d_h_v", "dropout", "causal", "flash_impl", "dtype_A_B"),
    "SDPA_bwd": (), "CONV_fwd": (), "CONV_bwd": (),
    "UnaryElementwise": ("op_shape", "dtype_in_out", "stride_input", "stride_output"),
    "BinaryElementwise": ("shape_in1", "shape_in2", "dtype_in1_in2_out", "stride_input1", "stride_input2",
                          "stride_output"),
}
"""Each sheet's ``param:`` columns, in the order the perf model's ``get_param_details`` returns them."""

#: Bytes per element by dtype name, lower-cased (TraceLens PerfModel/utils.py ``name2bpe``).
BPE = {"double": 8, "long int": 8, "float": 4, "scalar": 4, "int": 4, "c10::half": 2, "c10::bfloat16": 2,
       "c10::float8_e4m3fnuz": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1, "unsigned char": 1,
       "signed char": 1}
#: Compute precision by dtype name, lower-cased (TraceLens PerfModel/utils.py ``torch_dtype_map``).
PRECISION = {"float": "fp32", "double": "fp64", "c10::half": "fp16", "c10::bfloat16": "bf16",
             "c10::float8_e4m3fnuz": "fp8", "c10::float8_e4m3fn": "fp8", "unsigned char": "fp8"}
_UNARY = {"aten::clamp_max", "aten::clamp_max_", "aten::clamp_min", "aten::clamp_min_", "aten::copy", "aten::copy_",
          "aten::neg", "aten::pow", "aten::rsqrt", "aten::sigmoid", "aten::silu"}
_BINARY = {"aten::add", "aten::add_", "aten::div", "aten::div_", "aten::mul", "aten::mul_", "aten::sigmoid_backward",
           "aten::threshold_backward"}
#: TraceLens's op names per roofline sheet beyond the modelled ones (torch_op_mapping /
#: ``build_sheet_category_to_op_names``, aten and the common extension ops): a sheet is written when
#: the trace holds one of its ops, so that both reports of a comparison have the same sheets.
SHEET_OPS: dict[str, frozenset[str]] = {
    "GEMM": frozenset(_GEMM),
    "SDPA_fwd": frozenset(_SDPA_FWD + _SDPA_BWD),
    "CONV_fwd": frozenset(_CONV_FWD),
    "CONV_bwd": frozenset(_CONV_BWD),
    "UnaryElementwise": frozenset(_UNARY | {"aten::replication_pad1d", "aten::replication_pad2d",
                                            "aten::replication_pad3d", "aten::upsample_nearest1d",
                                            "aten::upsample_nearest2d", "aten::upsample_nearest3d",
                                            "_C::silu_and_mul", "sgl_kernel::silu_and_mul", "aiter::silu_and_mul"}),
    "BinaryElementwise": frozenset(_BINARY | {"LigerSiLUMulFunction"}),
}


def sheet_present(sheet: str, op_names: set[str]) -> bool:
    """Whether TraceLens writes roofline sheet ``sheet`` for a trace whose ``cpu_op`` names are
    ``op_names``: one of its ops is there (``SDPA_bwd``: a forward attention op whose backward ran,
    i.e. a backward attention op is there too)."""
    if sheet == "SDPA_bwd":
        return bool(op_names & set(_SDPA_FWD)) and bool(op_names & set(_SDPA_BWD))
    return bool(op_names & SHEET_OPS[sheet])


_SDPA_FWD_ARGS = {"aten::_scaled_dot_product_flash_attention": (3, 4, True),
                  "aten::_scaled_dot_product_efficient_attention": (5, 6, False),
                  "aten::_scaled_dot_product_cudnn_attention": (5, 6, False)}




def _bpe(dtype: Any) -> int | None:
    return BPE.get(str(dtype).lower()) if dtype is not None else None


def _spec(kind: str, dtype: Any) -> str:
    p = PRECISION.get(str(dtype).lower()) if dtype is not None else None
    return f"{kind}_{p}" if p else ""


def _gemm(name: str, dims: tuple, types: tuple, strides: tuple | None, conc: tuple | None) -> tuple | None:
    """GEMM / aten_mm, aten_addmm, aten_bmm, aten_baddbmm: (params, flops, bytes, compute spec)."""
    first = 1 if name in ("aten::addmm", "aten::baddbmm") else 0
    a, b = dims[first], dims[first + 1]
    batched = name in ("aten::bmm", "aten::baddbmm")
    if batched:
        bb, m, k = a
        n = b[2]
    else:
        bb, (m, k), n = 1, a, b[1]
    bias = first == 1
    dt = tuple(types[first:first + 2])
    st_a = tuple(strides[first]) if strides else None
    st_b = tuple(strides[first + 1]) if strides else None
    params = {"M": m, "N": n, "K": k, "bias": bias, "stride_A": st_a, "stride_B": st_b, "dtype_A_B": dt, "B": bb}
    flops = bb * (2 * m * n * k + (m * n if bias else 0))
    bpe = _bpe(dt[0])
    nbytes = None if bpe is None else bb * (m * k + k * n + m * n + (n if bias else 0)) * bpe
    return params, flops, nbytes, _spec("matrix", dt[0])


def _sdpa(name: str, dims: tuple, types: tuple, strides: tuple | None, conc: tuple | None) -> tuple | None:
    """SDPA / aten__scaled_dot_product_{flash,efficient,cudnn}_attention (q, k, v as B, H, N, d)."""
    i_drop, i_causal, flash = _SDPA_FWD_ARGS[name]
    (b, hq, nq, dq), (bk, hk, nk, dk), (bv, hv, nv, dv) = dims[0], dims[1], dims[2]
    if not (b == bk == bv and hk == hv and nk == nv and dq == dk):
        return None
    conc = conc or ()

    def c(i: int) -> str:
        return str(conc[i]) if i < len(conc) else ""

    try:
        drop = float(c(i_drop)) if c(i_drop) not in ("", "None") else 0.0
    except ValueError:
        drop = 0.0
    causal = c(i_causal).lower() == "true"
    dt = tuple(types[:2])
    params = {"B": b, "N_Q": nq, "H_Q": hq, "N_KV": nk, "H_KV": hk, "d_h_qk": dq, "d_h_v": dv, "dropout": drop,
              "causal": causal, "flash_impl": flash, "dtype_A_B": dt}
    flops = b * hq * (2 * nq * nk * dq) + b * hq * (2 * nq * dv * nk)
    if causal:
        if nq != nk:
            return None
        flops /= 2
    nbytes = (b * nq * hq * dq + b * nk * hk * dq + b * nk * hk * dv + b * nq * hq * dv) * 2  # bytes_per_element=2
    return params, flops, nbytes, _spec("matrix", dt[0])


def _unary(name: str, dims: tuple, types: tuple, strides: tuple | None, conc: tuple | None) -> tuple | None:
    """UnaryElementwise / aten_unary_elementwise."""
    shape = tuple(dims[0])
    out = len(dims) > 1 and bool(dims[1])
    d_in, d_out = types[0], (types[1] if out else None)
    params = {"op_shape": shape, "dtype_in_out": (d_in, d_out), "stride_input": tuple(strides[0]) if strides else None,
              "stride_output": tuple(strides[1]) if (out and strides) else None}
    n = math.prod(shape)
    b_in = _bpe(d_in)
    b_out = _bpe(d_out) if d_out is not None else b_in
    nbytes = None if b_in is None or b_out is None else n * b_in + n * b_out
    return params, n, nbytes, _spec("vector", d_in)


def _binary(name: str, dims: tuple, types: tuple, strides: tuple | None, conc: tuple | None) -> tuple | None:
    """BinaryElementwise / aten_binary_elementwise (output shape by broadcasting)."""
    s1, s2 = tuple(dims[0]), tuple(dims[1])
    nd = max(len(s1), len(s2))
    p1, p2 = (1,) * (nd - len(s1)) + s1, (1,) * (nd - len(s2)) + s2
    if any(x != y and x != 1 and y != 1 for x, y in zip(p1, p2)):
        return None
    out_shape = tuple(max(x, y) for x, y in zip(p1, p2))
    out = len(dims) > 2 and bool(dims[2])
    d1, d2, d3 = types[0], types[1], (types[2] if out else None)
    params = {"shape_in1": s1, "shape_in2": s2, "dtype_in1_in2_out": (d1, d2, d3),
              "stride_input1": tuple(strides[0]) if strides else None,
              "stride_input2": tuple(strides[1]) if strides else None,
              "stride_output": tuple(strides[2]) if (out and strides) else None}
    b1, b2 = _bpe(d1), _bpe(d2)
    if d3 is not None:
        b3 = _bpe(d3)
    elif b1 and b2:
        b3 = max(b1, b2) if (s1 != () and s2 != ()) else b1
    else:
        b3 = None
    n1, n2, n3 = math.prod(s1), math.prod(s2), math.prod(out_shape)
    nbytes = None if None in (b1, b2, b3) else n1 * b1 + n2 * b2 + n3 * b3
    return params, n3, nbytes, _spec("vector", d1)


MODELS = {**{n: ("GEMM", _gemm) for n in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")},
           **{n: ("SDPA_fwd", _sdpa) for n in _SDPA_FWD_ARGS},
           **{n: ("UnaryElementwise", _unary) for n in _UNARY},
           **{n: ("BinaryElementwise", _binary) for n in _BINARY}}
"""Op name -> (roofline sheet, perf model) for the ops whose TraceLens model is re-written here."""


