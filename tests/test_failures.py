"""The failure classifier and the one job lifecycle (tools/slurm/failures.py, jobs.py): every
signature of failure_signatures.yaml classifies its own example; infrastructure failures name the
node to exclude; the earliest matching line decides; unknown failures are the lever's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.slurm import failures, health, jobs
from ai4s_graph.tools.slurm.client import SacctRecord

SIGS = failures.load_signatures()


@pytest.mark.parametrize("sig", SIGS, ids=[s.name for s in SIGS])
def test_every_signature_classifies_its_own_example(sig):
    nodes = [sig.example_node, "nodeX"] if sig.example_node else ["nodeA", "nodeB"]
    state = sig.slurm_state or "FAILED"
    status = sig.exit_status if sig.exit_status is not None else 1
    probe = ["nodeA"] if sig.exit_status == 42 else None
    f = failures.classify(state=state, exit_status=status, log_text=f"starting\n{sig.example}\nmore output\n",
                          nodes_list=nodes, probe_bad_nodes=probe)
    assert (f.signature, f.klass, f.kind) == (sig.name, sig.klass, sig.kind)
    assert sig.source and f.source == sig.source
    if sig.example_node:
        assert f.nodes == [sig.example_node]
    if sig.klass == "lever":
        assert f.nodes == [] and not f.is_infra
    if sig.slurm_state:
        assert f.nodes == nodes  # the whole allocation's state failed: its nodes
    if sig.exit_status == 42:
        assert f.nodes == ["nodeA"]


def test_kinds_cover_the_issue_list():
    kinds = {s.kind for s in SIGS if s.klass == "infra"}
    assert {"bad-node", "fabric", "launcher", "filesystem", "missing-library"} <= kinds


def test_earliest_line_decides_and_unknown_is_the_lever():
    # the lever's traceback comes first; the NCCL abort on another rank is its consequence
    log = ("Traceback (most recent call last):\n"
           "RuntimeError: torch.compile with aot_autograd does not currently support double backward\n"
           "node2:9:9 [1] NCCL INFO NET/IB : Got completion from peer with status=12 RETRY_EXC\n")
    f = failures.classify(state="FAILED", exit_status=1, log_text=log, nodes_list=["node1", "node2"])
    assert f.klass == "lever" and f.signature == "aot_double_backward"
    # the reverse order: the fabric failed first
    log2 = "\n".join(reversed(log.splitlines()))
    f2 = failures.classify(state="FAILED", exit_status=1, log_text=log2, nodes_list=["node1", "node2"])
    assert f2.klass == "infra" and f2.kind == "fabric" and f2.nodes == ["node2"]
    # a 2-node job whose fabric line names no node: infra, but no node to exclude
    f3 = failures.classify(state="FAILED", exit_status=1, log_text="ionic_comp_msn: cqe with error 12",
                           nodes_list=["a1", "a2"])
    assert f3.is_infra and f3.nodes == []
    # the same line on a one-node job: that node
    f4 = failures.classify(state="FAILED", exit_status=1, log_text="ionic_comp_msn: cqe with error 12",
                           nodes_list=["a1"])
    assert f4.nodes == ["a1"]
    # nothing known: the lever, with the workload's own error line
    f5 = failures.classify(state="FAILED", exit_status=2,
                           log_text="train.py: error: argument --dataset: invalid choice: 'sharded'\nsrun: error: x",
                           nodes_list=["node1"])
    assert f5.klass == "lever" and f5.signature is None and "invalid choice: 'sharded'" in f5.line


def test_signature_file_is_validated():
    with pytest.raises(InputError, match="cites no source"):
        failures.parse_signatures({"signatures": [{"name": "x", "class": "infra", "kind": "fabric", "pattern": "x"}]})
    with pytest.raises(InputError, match="kind one of"):
        failures.parse_signatures({"signatures": [{"name": "x", "class": "infra", "kind": "weather", "pattern": "x",
                                                   "source": "s"}]})
    with pytest.raises(InputError, match="matches nothing"):
        failures.parse_signatures({"signatures": [{"name": "x", "class": "lever", "kind": "lever", "source": "s"}]})


def _run_dir(tmp_path: Path, log: str, probe: str | None = None) -> Path:
    d = jobs.perf_run_dir(tmp_path / "shared", "toy", "812")
    d.mkdir(parents=True)
    (d / "train.log").write_text(log)
    if probe is not None:
        (d / health.PROBE_FILE).write_text(probe)
    return d


def test_one_perf_run_path():
    assert jobs.perf_run_dir("/s", "hydragnn", 7) == Path("/s/models/hydragnn/perf-runs/7")
    assert jobs.perf_run_dir("/s", "m", "7").parent == jobs.perf_runs_root("/s", "m")


def test_job_end_exit_42_then_retry_plan_excludes_by_name(tmp_path):
    probe = "# ai4s-graph node health probe v1\nnode1\tshared_dir\tfail\t/x: not writable\nnode2\tshared_dir\tok\t/x\nBAD_NODES=node1\n"
    d = _run_dir(tmp_path, "", probe)
    rec = SacctRecord(jobid="812", state="FAILED", exit_code="42:0", nodelist=["node1", "node2"], elapsed_s=36.0)
    end = jobs.classify_end(rec, d, None)
    assert end.verdict == "infra" and end.bad_nodes == ["node1"] and end.node_hours == pytest.approx(0.02)
    kb = tmp_path / "known_bad_nodes.txt"
    plan = jobs.plan_retry(end, kb, [], 0, 2)
    assert plan.resubmit and plan.exclude == ["node1"] and health.read_known_bad(kb) == ["node1"]
    assert not jobs.plan_retry(end, kb, ["node1"], 2, 2).resubmit  # retries spent


def test_job_end_fabric_failure_and_lever_failure(tmp_path):
    d = _run_dir(tmp_path, "step 1\nnode6:88:120 [3] NCCL INFO NET/IB : Got completion from peer 10.1.0.7 with "
                           "status=12 opcode=0 vendor err 11 RETRY_EXC\n")
    rec = SacctRecord(jobid="812", state="FAILED", exit_code="1:0", nodelist=["node5", "node6"], elapsed_s=10)
    end = jobs.classify_end(rec, d, None)
    assert end.verdict == "infra" and end.failure.kind == "fabric" and end.bad_nodes == ["node6"]
    plan = jobs.plan_retry(end, tmp_path / "kb.txt", ["node9"], 0, 2)
    assert plan.resubmit and plan.exclude == ["node6", "node9"]
    # a missing library with no node named on a 2-node job: re-run once without a new exclusion
    (d / "train.log").write_text("python3: error while loading shared libraries: libamdhip64.so.6: cannot open "
                                 "shared object file: No such file or directory\n")
    end2 = jobs.classify_end(rec, d, None)
    assert end2.failure.kind == "missing-library" and end2.bad_nodes == []
    p0 = jobs.plan_retry(end2, tmp_path / "kb2.txt", [], 0, 2)
    p1 = jobs.plan_retry(end2, tmp_path / "kb2.txt", [], 1, 2)
    assert p0.resubmit and p0.exclude == [] and not p1.resubmit
    # a lever failure keeps its verbatim error
    (d / "train.log").write_text("Traceback\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    end3 = jobs.classify_end(rec, d, None)
    assert end3.verdict == "failed" and "CUDA out of memory" in end3.error()
    m = jobs.build_manifest(end3, "toy", executor="slurm", attempt=1)
    assert m.nodes_list == ["node5", "node6"] and m.model_extra["failure"]["signature"] == "cuda_oom"
    assert jobs.write_manifest(m, d) and json.loads((d / "manifest.json").read_text())["executor"] == "slurm"
