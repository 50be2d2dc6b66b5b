"""Seed 000 lesson 28 as a lever: a time-boxed TunableOp tune that keeps its partial per-rank cache.

This machine's torch is a CPU build without ``torch.cuda.tunable``'s C++ side, so the time box is
driven here through a recorder with the same four calls (enable, tuning_enable, set_filename,
write_file) and an injected clock; ``test_real_tunableop_on_a_gpu`` runs it against the real
module on a GPU node."""

from __future__ import annotations

import os

import pytest
import torch

from ai4s_graph.tools.levers.catalog import bundled_catalog, load_catalog
from ai4s_graph.workloads import lever_hooks, tunable


class Recorder:
    """The four TunableOp calls the time box makes, recorded; write_file writes a file."""

    def __init__(self):
        self.calls: list[tuple] = []

    def enable(self, v):
        self.calls.append(("enable", v))

    def tuning_enable(self, v):
        self.calls.append(("tuning_enable", v))

    def set_filename(self, name, insert_device_ordinal=False):
        self.calls.append(("set_filename", name, insert_device_ordinal))

    def write_file(self, name=None):
        self.calls.append(("write_file", name))
        open(name, "w").write("Validator,PT_VERSION,2.13\n")
        return True


def test_time_box_tunes_then_stops_and_keeps_the_partial_cache(tmp_path):
    now = [100.0]
    api = Recorder()
    box = tunable.TimeBox(api, 120, tmp_path / "cache", rank=3, clock=lambda: now[0])
    assert box.arm().startswith("tunableop(tune for 120 s")
    assert api.calls == [("enable", True), ("tuning_enable", True),
                         ("set_filename", str(tmp_path / "cache" / "tunableop_results_rank3.csv"), False)]
    now[0] = 219.9  # 119.9 s: still tuning
    assert box.check() is False and len(api.calls) == 3
    now[0] = 220.0  # 120 s: the box closes once
    assert box.check() is True
    assert api.calls[3:] == [("tuning_enable", False), ("write_file", str(box.path))]
    assert box.path.is_file() and box.closed_at == pytest.approx(120.0)
    now[0] = 500.0
    assert box.check() is False and len(api.calls) == 5  # never twice
    with pytest.raises(ValueError):
        tunable.TimeBox(api, 0, tmp_path)


def test_lever_hooks_arm_the_box_and_check_it_before_every_forward(tmp_path, monkeypatch):
    holder = getattr(lever_hooks._train, "_models", lever_hooks._train)
    monkeypatch.setattr(holder, "build_model", holder.build_model)  # restored after the test
    api = Recorder()
    env = {"AI4S_TUNABLEOP_TIMEBOX_S": "0.000001", "AI4S_TUNABLEOP_DIR": str(tmp_path), "RANK": "1"}
    done = lever_hooks.apply_tunable(env, tunable_api=api)
    assert any(d.startswith("tunableop(") for d in done)
    model = holder.build_model("mlp", holder.model_config("mlp", "cpu", _NoArgs()))
    with torch.no_grad():
        model(torch.randn(2, 32))
    assert ("tuning_enable", False) in api.calls and (tmp_path / "tunableop_results_rank1.csv").is_file()


class _NoArgs:
    """train.py's arguments with every override unset (model_config falls back to its sizes)."""

    def __getattr__(self, name):
        return None


def test_the_gpu_catalogs_carry_the_time_boxed_tunableop_lever():
    for model in ("vit", "gnn"):
        cat = load_catalog(bundled_catalog(model))
        lv = next(x for x in cat.levers if x.name == "tunableop_timeboxed")
        assert lv.change.env["AI4S_TUNABLEOP_TIMEBOX_S"] == 120
        assert lv.status.value == "experimental" and 28 in lv.evidence[0].lessons
        assert cat.baseline.change.env["AI4S_WORKLOAD_MODULE"] == "ai4s_graph.workloads.lever_hooks"  # where it is applied
    assert tunable.from_env({}) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: torch.cuda.tunable")
def test_real_tunableop_on_a_gpu(tmp_path):
    import torch.cuda.tunable as api

    box = tunable.TimeBox(api, 1e-6, tmp_path, rank=0)
    box.arm()
    a = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    assert box.check() is True and not api.tuning_is_enabled()
    assert box.path.is_file() and box.path.stat().st_size > 0
    api.enable(False)
    os.environ.pop("PYTORCH_TUNABLEOP_ENABLED", None)
