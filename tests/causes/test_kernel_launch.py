"""Kernel launch overhead on hand-built traces (known launch and kernel times), the sampler's
re-derivation confirming and refuting, the specific causes it yields to, and the bundled case +
a dispatch-bound control whose kernels outlast their launches."""

from __future__ import annotations

import pytest
from host_traces import Op, host_trace
from step_traces import bundled, confirmed

from ai4s_graph.graph.rules import registry
from ai4s_graph.graph.rules.causes import kernel_launch
from ai4s_graph.graph.rules.figures import Inputs, Reader
from ai4s_graph.tools.trace import onepass

CAUSE = kernel_launch.CAUSE
TINY = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"


def read(path):
    """The analyst's inputs with the trace's launch table (mean kernel and launch-call times, the
    kineto reader's ``launch_stats``: the engine's definitions) and the verifier's reader."""
    got = onepass.read_rank(str(path), 0, None, "0", wanted=registry.event_name_wanted,
                            raw_patterns=registry.raw_patterns())
    rank = {"path": str(path), "rank": 0, "step_accounting": got["step_accounting"],
            "name_dur_us": got["name_dur_us"], "launch": got["reader"]["launch"]}
    return Inputs(rank=rank, event_names=got["names"]), Reader(rank={"steps_sampled": got.get("steps_sampled")})


def tiny(n: int, kernel_us: float = 1.5, launch_us: float = 5.0, kernel: str = TINY) -> list[Op]:
    return [Op("aten::add", 20.0, kernel_us=kernel_us, launch_us=launch_us, kernel=kernel)] * n


def test_fires_when_kernels_are_shorter_than_their_launches(tmp_path):
    # 300 kernels of 1.5 µs, each launched by a 5 µs call the GPU waits on: 1500 µs of launches in GPU idle
    x, r = read(host_trace(tmp_path, tiny(300)))
    [f] = CAUSE.detect(x)
    assert f.causes == ("kernel-launch-overhead",) and f.share == pytest.approx(0.15, abs=1e-9)
    assert f.claim.metric == "steps.idle.launch.share" and f.claim.value == pytest.approx(0.15, abs=1e-9)
    assert "300 launch calls a step (kernels, async copies and fills), the mean kernel (1.5 µs) shorter than its " \
        "launch call (5.0 µs)" in f.claim.statement
    # the share printed as the report's tables print it: 1500 µs of the step's GPU idle in launch calls
    assert "15.0% of the profiled step" in f.claim.statement
    assert [lv.name for lv in f.levers] == ["cuda_graphs"] and CAUSE.explains == "dispatch-bound"
    assert confirmed(f, r) == "confirmed"


@pytest.mark.parametrize("rocm", [False, True])
def test_another_member_of_the_kind(tmp_path, rocm):
    # 200 tiny layer-norm kernels (MIOpen / ATen names) of 3 µs behind 8 µs launch calls
    kernel = "MIOpenLayerNormFwdContiguous" if rocm else "void at::native::vectorized_layer_norm_kernel<float, float>"
    x, r = read(host_trace(tmp_path, tiny(200, kernel_us=3.0, launch_us=8.0, kernel=kernel), rocm=rocm))
    [f] = CAUSE.detect(x)
    assert f.share == pytest.approx(0.16, abs=1e-9)
    assert confirmed(f, r) == "confirmed"


def test_kernels_longer_than_their_launches_do_not_fire(tmp_path):
    x, _ = read(host_trace(tmp_path, tiny(300, kernel_us=6.0)))  # 6 µs kernels behind 5 µs launches
    assert CAUSE.detect(x) == []


def test_a_sync_storm_is_the_more_specific_cause(tmp_path):
    # the same tiny kernels plus 40 host reads of a device value a step (>= 32: host_syncs' threshold)
    items = tiny(300) + [Op("aten::item", 15.0, launch_us=10.0, sync=True)] * 40
    x, _ = read(host_trace(tmp_path, items))
    assert x.rank["step_accounting"]["median_counts"]["sync_ops"] == 40
    assert CAUSE.detect(x) == []


def test_the_verifier_refutes_a_claim_its_trace_does_not_show(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    x, _ = read(host_trace(tmp_path / "a", tiny(300)))
    _, other = read(host_trace(tmp_path / "b", tiny(30)))
    [f] = CAUSE.detect(x)
    assert confirmed(f, other) == "refuted"


def test_bundled_case(tmp_path):
    row = bundled("launch-bound", tmp_path)
    assert (row["named_cause"], row["first_lever"]) == ("kernel-launch-overhead", "cuda_graphs")


def test_bundled_dispatch_control_with_long_kernels(tmp_path):
    row = bundled("gpu-transform", tmp_path)  # dispatch-bound, 21.6 µs mean kernel: not launch overhead
    assert row["cause_ok"] and row["named_cause"] is None
