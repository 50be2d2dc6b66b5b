"""Perf model: FLOPs/bytes from recorded shapes (hand-computed answers), the roofline on
TraceLens's H100 traces (kernel time per category equals TraceLens's own ops_summary.csv), the
datasheet table, and the two MFU figures kept apart (seed 000 lesson 4)."""

from __future__ import annotations

import csv

import pytest

from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.perfmodel import datasheet as D
from ai4s_graph.tools.perfmodel.opcost import op_cost
from ai4s_graph.tools.perfmodel.roofline import roofline


def test_gemm_addmm_flops_bytes():
    c = op_cost("aten::addmm", {"Input Dims": [[512], [141, 512], [512, 512], [], []],
                                "Input type": ["c10::BFloat16"] * 3 + ["Scalar", "Scalar"]})
    assert c.category == "GEMM" and c.precision == "bf16"
    assert c.flops == 2 * 141 * 512 * 512
    assert c.bytes == 2 * (141 * 512 + 512 * 512 + 141 * 512)


def test_bmm_and_linear():
    assert op_cost("aten::bmm", {"Input Dims": [[8, 64, 32], [8, 32, 16]], "Input type": ["float", "float"]}).flops == 2 * 8 * 64 * 16 * 32
    lin = op_cost("aten::linear", {"Input Dims": [[4, 10, 256], [128, 256], [128]], "Input type": ["c10::Half"] * 3})
    assert lin.flops == 2 * 40 * 128 * 256 and lin.precision == "fp16"


def test_conv_output_size_from_stride_padding():
    # ResNet stem: 1x3x224x224, 64x3x7x7, stride 2, padding 3 -> 1x64x112x112
    c = op_cost("aten::convolution", {"Input Dims": [[1, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], [], [], []],
                                      "Input type": ["float", "float", "", "", "", "", "", "", ""],
                                      "Concrete Inputs": ["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "False", "[0, 0]", "1"]})
    assert c.flops == 2 * (64 * 112 * 112) * 3 * 49
    assert c.bytes == 4 * (3 * 224 * 224 + 64 * 3 * 49 + 64 * 112 * 112)


def test_sdpa_forward_flops_and_causal_half():
    args = {"Input Dims": [[2, 8, 128, 64], [2, 8, 256, 64], [2, 8, 256, 64]], "Input type": ["c10::BFloat16"] * 3}
    assert op_cost("aten::scaled_dot_product_attention", args).flops == 4 * 2 * 8 * 128 * 256 * 64
    causal = dict(args, **{"Concrete Inputs": ["", "", "", "", "0.", "True", ""]})
    assert op_cost("aten::scaled_dot_product_attention", causal).flops == 2 * 2 * 8 * 128 * 256 * 64


def test_elementwise_norm_reduction_bytes():
    add = op_cost("aten::add", {"Input Dims": [[1024, 1024], [1024, 1024], []], "Input type": ["float", "float", "Scalar"]})
    assert (add.category, add.flops, add.bytes) == ("elementwise", 1024 * 1024, 3 * 4 * 1024 * 1024)
    ln = op_cost("aten::layer_norm", {"Input Dims": [[64, 768], [], [768], [768]], "Input type": ["c10::BFloat16", "", "c10::BFloat16", "c10::BFloat16"]})
    assert ln.category == "normalization" and ln.flops == 5 * 64 * 768
    assert op_cost("aten::sum", {"Input Dims": [[4096]], "Input type": ["float"]}).bytes == 4 * 4096 + 4
    assert op_cost("aten::view", {"Input Dims": [[4]], "Input type": ["float"]}) is None
    assert op_cost("aten::mm", {}) is None  # no record_shapes: nothing to model


def test_datasheet_rows_and_lookup():
    assert set(D.GPUS) == {"MI250X", "MI300X", "MI325X", "MI355X", "A100", "H100", "H200", "B200"}
    for g in D.GPUS.values():
        assert g.source and g.hbm_tbps > 0 and g.tflops["bf16"] > 0
    assert D.gpu_key("NVIDIA H100 80GB HBM3") == "H100"
    assert D.gpu_key("AMD Instinct MI325X") == "MI325X" and D.gpu_key("AMD Instinct MI300X") == "MI300X"
    assert D.gpu_key("NVIDIA H100 PCIe") is None
    assert D.peak_tflops(D.GPUS["H200"], "c10::bfloat16") == 989.0
    assert D.peak_tflops(D.GPUS["MI250X"], "tf32") is None


@pytest.fixture(scope="module")
def bert(shared_data):
    return shared_data / "traces" / "tracelens-h100" / "gaunernst_bert-small-uncased__1016001.json.gz"


def _tracelens_ms(csv_path, op):
    with open(csv_path) as f:
        for row in csv.DictReader(f):
            if row["name"] == op:
                return float(row["total_direct_kernel_time_sum"])
    raise KeyError(op)


def test_roofline_kernel_time_matches_tracelens_ops_summary(bert):
    r = roofline(bert)
    assert r["shapes_recorded"] and r["gpu"] == "NVIDIA H100 SXM5"
    ops = bert.parent / "gaunernst_bert-small-uncased__1016001_perf_report_csvs" / "ops_summary.csv"
    cats = r["categories"]
    assert cats["GEMM"]["kernel_us"] == pytest.approx(_tracelens_ms(ops, "aten::addmm"), abs=0.01)
    assert cats["SDPA"]["kernel_us"] == pytest.approx(_tracelens_ms(ops, "aten::_flash_attention_forward"), abs=0.01)
    assert cats["normalization"]["kernel_us"] == pytest.approx(_tracelens_ms(ops, "aten::native_layer_norm"), abs=0.01)
    # 26 addmm of 141x512 @ 512x512 (and 512x2048 / 2048x512): arithmetic intensity ~105 FLOP/B,
    # below the H100 bf16 ridge 989/3.35 = 295 FLOP/B: memory-bound by the roofline
    g = cats["GEMM"]
    assert g["ops"] == 26 and g["ridge"] == pytest.approx(989.0 / 3.35)
    assert g["intensity"] < g["ridge"] and g["bound"] == "memory"
    assert g["tflops"] == pytest.approx(g["flops"] / (g["kernel_us"] * 1e-6) / 1e12)


def test_mfu_time_averaged_and_burst_kept_apart(shared_data):
    r = roofline(shared_data / "traces" / "tracelens-h100" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    mm_us = sum(r["categories"][c]["kernel_us"] for c in ("GEMM", "CONV", "SDPA") if c in r["categories"])
    assert r["mfu_burst"] > r["mfu_time_averaged"] > 0
    assert r["mfu_time_averaged"] / r["mfu_burst"] == pytest.approx(mm_us / r["window_us"])
    assert r["categories"]["GEMM"]["bound"] == "compute"  # Qwen's 0.5B GEMMs: ~607 FLOP/B > 295


def test_trace_without_shapes_has_no_roofline(repo_root):
    r = roofline(repo_root / "examples" / "perf-runs" / "92001" / "traces" / "trace_rank0.json.gz", "H100")
    assert r["shapes_recorded"] is False and r["categories"] == {} and r["mfu_burst"] is None


def test_unknown_gpu_is_an_error(bert):
    with pytest.raises(InputError, match="not in the datasheet"):
        roofline(bert, "Some GPU 9000")
