"""The probe judges a node without peers against an absolute reference, and says "not checked"
when it has none (a 1-node probe used to compare the node with itself: STREAM, copy and
all-reduce degradation could never be flagged). Plus the RoCE GID-table consistency check across
nodes (seed 000 lesson 26). Inputs: the real H200 probe parts (reports/raw-*) and hand-built
sysfs trees; expected answers computed from the thresholds by hand."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ai4s_graph.tools.cluster import node_probe as P
from ai4s_graph.tools.cluster import probe_judge as J
from ai4s_graph.tools.cluster import roce_gid as G
from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.slurm.health import parse_probe_file

REPO = Path(__file__).resolve().parent.parent
H200 = json.loads((REPO / "reports" / "raw-2026-11-29" / "node_health_probe-h200.json").read_text())["parts"][0]
TWO = json.loads((REPO / "reports" / "raw-2026-11-30-2gpu" / "node_health_probe-2gpu.json").read_text())


def _part(node: str, **over) -> dict:
    p = copy.deepcopy(H200)
    p["node"] = node
    p.update(over)
    return p


def _two_gpu_part(node: str, scale: float = 1.0, wrong: bool = False) -> dict:
    """The 2-GPU H200 node's real probe (launch, copy, all-reduce), busbw x ``scale``."""
    p = _part(node, gpu=copy.deepcopy({"gpus": TWO["gpus"], "allreduce": TWO["allreduce"]}))
    for r in p["gpu"]["allreduce"]["rows"]:
        r["busbw_gbps"] = round(r["busbw_gbps"] * scale, 2)
        r["correct"] = r["correct"] and not wrong
    return p


def test_one_node_stream_is_judged_against_a_measured_baseline():
    base = [_part(f"b{i}") for i in range(3)]  # three healthy nodes: copy 92.9 GB/s each
    slow = _part("n1")
    slow["stream"]["all"]["copy"] = 40.0  # < 0.80 x 92.9 = 74.3
    rows, notes = J.judge([slow], baseline=base)
    r = {x.check: x for x in rows}["stream:all"]
    assert not r.ok and "below limit: copy" in r.detail and "baseline median of 3 node(s)" in r.detail
    ok = _part("n1")
    ok["stream"]["all"]["copy"] = 75.0  # >= 74.3
    assert {x.check: x for x in J.judge([ok], baseline=base)[0]}["stream:all"].ok
    # no peer and no baseline: no row, a "not checked" line (never the old self-comparison pass)
    rows, notes = J.judge([slow])
    assert "stream:all" not in {x.check for x in rows}
    assert any(n.startswith("n1: stream:all: GB/s copy 40.0") and J.NOT_CHECKED_PEERS in n for n in notes)


def test_one_gpu_copy_is_judged_against_the_h200_datasheet_floor():
    # 4800 GB/s x 87.8% (the measured H200 copy) = 4213.8 GB/s expected; the limit is 80% of it
    floor, src = J.d2d_floor("NVIDIA H200")
    assert floor == pytest.approx(4213.8) and "4800 GB/s" in src
    for v, ok in ((4217.9, True), (3372.0, True), (3370.0, False)):  # 0.8 x 4213.8 = 3371.04
        p = _part("n1")
        p["gpu"]["gpus"][0].update(name="NVIDIA H200", d2d_gbps=v)
        r = {x.check: x for x in J.judge([p])[0]}["gpu0:d2d_copy"]
        assert r.ok is ok, (v, r.detail)
    # a GPU family whose copy efficiency was never measured: not checked
    p = _part("n1")
    p["gpu"]["gpus"][0].update(name="AMD Instinct MI300X")
    rows, notes = J.judge([p])
    assert "gpu0:d2d_copy" not in {x.check for x in rows} and any("gpu0:d2d_copy" in n and "not checked" in n for n in notes)


def test_one_node_allreduce_against_the_2gpu_baseline_and_the_sum_always():
    base = [_two_gpu_part("healthy")]  # peak busbw 299.56 GB/s at 256 MiB
    half = _two_gpu_part("n1", scale=0.5)  # 149.78 < 0.80 x 299.56 = 239.6
    r = {x.check: x for x in J.judge([half], baseline=base)[0]}["allreduce"]
    assert not r.ok and "baseline median of 1 node(s) 299.6 GB/s" in r.detail
    assert {x.check: x for x in J.judge([_two_gpu_part("n1", 0.85)], baseline=base)[0]}["allreduce"].ok
    rows, notes = J.judge([half])
    assert "allreduce" not in {x.check for x in rows} and any(n.startswith("n1: allreduce: peak busbw 149.8") for n in notes)
    wrong = {x.check: x for x in J.judge([_two_gpu_part("n1", wrong=True)])[0]}["allreduce"]
    assert not wrong.ok and "wrong sum" in wrong.detail  # correctness needs no reference


def test_peers_still_come_first():
    peers = [_part(f"n{i}") for i in range(3)]
    peers[2]["stream"]["all"]["copy"] /= 2
    rows, notes = J.judge(peers, baseline=[_part("b", stream={"all": {"copy": 1e6, "scale": 1e6, "add": 1e6, "triad": 1e6}})])
    assert P.bad_nodes(rows) == ["n2"] and "median of 3 node(s)" in {(x.node, x.check): x for x in rows}[("n2", "stream:all")].detail


def _sysfs(root: Path, gids: dict[int, tuple[str, str]], dev: str = "ionic_3") -> Path:
    port = root / dev / "ports" / "1"
    (port / "gids").mkdir(parents=True)
    (port / "gid_attrs" / "types").mkdir(parents=True)
    for i in range(4):
        g, t = gids.get(i, (G.ZERO_GID, ""))
        (port / "gids" / str(i)).write_text(g + "\n")
        (port / "gid_attrs" / "types" / str(i)).write_text(t + "\n")
    return root


LINK = ("fe80:0000:0000:0000:0200:00ff:fe00:0001", "RoCE v2")
ULA = "fd93:16d3:59b6:014f:0000:0000:0000:00{:02x}"
STRAY = ("2001:19f0:0000:0001:0000:0000:0000:0009", "RoCE v2")


def test_lesson26_gid_table_asymmetry_names_the_node(tmp_path):
    good = {0: LINK, 1: (ULA.format(1), "RoCE v2")}
    bad = {0: LINK, 1: STRAY, 2: (ULA.format(3), "RoCE v2")}  # the stray global IPv6 pushed the ULA to index 2
    tabs = {n: G.read_gid_tables(_sysfs(tmp_path / n, t)) for n, t in (("a4", good), ("a5", good), ("b1", bad))}
    assert tabs["b1"]["ionic_3/1"]["1"] == [STRAY[0], "RoCE v2"] and "3" not in tabs["b1"]["ionic_3/1"]
    for env in ({"NCCL_IB_GID_INDEX": "1"}, {}):  # told index 1, or the index most nodes use (1)
        parts = [{"node": n, "roce_gids": t, "env": env} for n, t in tabs.items()]
        rows, _n = G.check(parts)
        assert {r[0]: r[2] for r in rows} == {"a4": True, "a5": True, "b1": False}
        d = next(r[3] for r in rows if r[0] == "b1")
        assert "fd93:16d3:59b6:14f::/64" in d and "at index 2 on this node" in d and "RETRY_EXC" in d
    # through the probe's judgement: b1 is bad, exit 42's BAD_NODES names it
    parts = [_part(n, roce_gids=t, env={"NCCL_IB_GID_INDEX": "1"}) for n, t in tabs.items()]
    assert P.bad_nodes(J.judge(parts)[0]) == ["b1"]


def test_gid_tables_consistent_or_alone(tmp_path):
    good = {0: LINK, 1: (ULA.format(1), "RoCE v2")}
    parts = [{"node": n, "roce_gids": G.read_gid_tables(_sysfs(tmp_path / n, good))} for n in ("a", "b")]
    rows, notes = G.check(parts)
    assert [r[2] for r in rows] == [True, True] and notes == []
    rows, notes = G.check(parts[:1])
    assert rows == [] and notes == ["a: roce_gid:ionic_3/1: not checked: needs the GID table of another node probed with it"]
    assert G.read_gid_tables(tmp_path / "no-such-sysfs") == {}


def _baseline(tmp_path: Path, gbps: float) -> Path:
    p = tmp_path / f"base-{gbps:g}.json"
    p.write_text(json.dumps({"parts": [{"node": "ref", "stream": {"all": {k: gbps for k in ("copy", "scale", "add", "triad")}}}]}))
    return p


def test_cli_baseline_turns_the_one_node_stream_into_a_judged_row(tmp_path):
    home = tmp_path / "h"
    home.mkdir()

    def probe(out: str, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "probe", "--out", str(tmp_path / out), "--no-gpu",
                               "--stream-mib", "16", "--node", "solo", "--mounts", f"home={home}", *extra],
                              capture_output=True, text=True, cwd=REPO, timeout=180)

    # a baseline no real host reaches (10^6 GB/s) fails the node; one every host passes (10^-3 GB/s) clears it:
    # both answers are independent of this machine's speed and load
    r = probe("hi", "--baseline", str(_baseline(tmp_path, 1e6)))
    assert r.returncode == 42 and "BAD_NODES=solo" in r.stdout
    rows = {x.check: x for x in parse_probe_file(tmp_path / "hi" / "node_health_probe.txt").rows}
    assert not rows["stream:all"].ok and "baseline median of 1 node(s)" in rows["stream:all"].detail
    r = probe("lo", "--baseline", str(_baseline(tmp_path, 1e-3)))
    assert r.returncode == 0 and "gather: STATUS=ok" in r.stderr
    r = probe("none")
    assert r.returncode == 0 and "not checked: needs other nodes probed with it" in r.stderr
    assert json.loads((tmp_path / "none" / "node_health_probe.json").read_text())["not_checked"]


def test_bad_baseline_file(tmp_path):
    with pytest.raises(InputError, match="no probe baseline"):
        P.load_baseline(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(InputError, match="not a node_health_probe.json"):
        P.load_baseline(tmp_path / "x.json")
