"""The node-health probe: file format round trip, and the real probe of the job templates
failing on one node of the local SLURM cluster (a per-node path missing on node1 only)."""

from __future__ import annotations

import pytest

from ai4s_graph.tools.slurm import health, client as slurm
from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.slurm.jobscript import JobSpec, write_script


def test_format_and_parse_round_trip(tmp_path):
    rows = [health.ProbeRow("node1", "home", True, "/root"),
            health.ProbeRow("node1", "shared_dir", False, "/x: no such directory"),
            health.ProbeRow("node2", "home", True, "/root")]
    p = tmp_path / health.PROBE_FILE
    p.write_text(health.format_rows(rows))
    text = p.read_text().splitlines()
    assert text[0].startswith("#") and text[-1] == "BAD_NODES=node1"
    assert text[2] == "node1\tshared_dir\tfail\t/x: no such directory"
    res = health.parse_probe_file(p)
    assert res.rows == rows and res.bad_nodes == ["node1"] and res.nodes == ["node1", "node2"] and not res.ok


def test_missing_bad_nodes_line_is_derived_and_malformed_rows_refused(tmp_path):
    res = health.parse_probe_text("node3\tshared_dir\tfail\tEIO\nnode4\thome\tok\t/h\n")
    assert res.bad_nodes == ["node3"]
    with pytest.raises(InputError, match=":2: not a probe row"):
        health.parse_probe_text("# h\nnode1 home ok\n", "f")
    with pytest.raises(InputError, match="no node health probe file"):
        health.parse_probe_file(tmp_path / "nope.txt")


def test_known_bad_nodes_file_appends_only_new_names(tmp_path):
    p = tmp_path / "known_bad_nodes.txt"
    assert health.append_known_bad(p, ["node1"], jobid="7") == ["node1"]
    assert health.append_known_bad(p, ["node1", "node9"], jobid="8") == ["node1", "node9"]
    assert health.read_known_bad(p) == ["node1", "node9"]
    assert p.read_text().count("node1") == 1


@pytest.mark.slurm
def test_probe_fails_on_the_node_with_a_missing_mount(local_cluster, tmp_path):
    shared = tmp_path / "shared"
    (tmp_path / "scratch" / "node2").mkdir(parents=True)  # node1's per-node mount is missing
    cluster = slurm.ClusterConfig(shared_dir=str(shared), probe_paths=[str(tmp_path / "scratch" / "{node}")])
    spec = JobSpec(template="cpu-toy", job_name="probe", model="probe-test", nodes=2,
                   script_args=["--model", "mlp", "--epochs", "1", "--steps-per-epoch", "2"])
    jid = slurm.sbatch(write_script(spec, cluster, tmp_path / "jobs"))
    rec = slurm.wait_for_terminal(jid, timeout_s=60, poll_s=0.3)
    assert rec.state == "FAILED" and rec.exit_code == f"{health.BAD_NODE_EXIT_CODE}:0"
    run_dir = shared / "models" / "probe-test" / "perf-runs" / jid
    res = health.parse_probe_file(run_dir / health.PROBE_FILE)
    assert res.bad_nodes == ["node1"]
    assert sorted(res.nodes) == ["node1", "node2"]
    failed = [r for r in res.rows if not r.ok]
    assert [(r.node, r.check) for r in failed] == [("node1", "probe_path")]
    assert "no such directory" in failed[0].detail
    assert not (run_dir / "train.log").exists()  # the workload never started
