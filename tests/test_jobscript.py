"""Job-script rendering (sbatch/*.j2): every template passes ``bash -n``, carries the seed's wrapper
lessons, and refuses values with shell metacharacters."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.slurm.jobscript import TEMPLATES, JobSpec, render, write_script
from ai4s_graph.tools.slurm.client import ClusterConfig

CL = ClusterConfig(partition="gpu", account="proj42", shared_dir="/lustre/proj/ai4s", container_image="/images/pt.sif",
                   victoria_metrics_url="http://127.0.0.1:18428")
OMNI = CL.model_copy(update={"omnistat": True, "omnistat_dir": "/opt/omnistat"})


def _spec(template: str, **kw) -> JobSpec:
    args = ["train.py", "--epochs", "2"] if template == "generic" else ["--epochs", "2"]
    base = dict(template=template, job_name="perf-1", model="HydraGNN", nodes=2, gpus_per_node=8, ntasks_per_node=8,
                cpus_per_task=7, time_limit="01:00:00", env={"NUM_WORKERS": "4", "CUDA_VISIBLE_DEVICES": "0,1"},
                script_args=args)
    base.update(kw)
    return JobSpec(**base)


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("cluster", [CL, OMNI], ids=["plain", "omnistat"])
def test_every_template_renders_valid_bash(template, cluster, tmp_path):
    path = write_script(_spec(template), cluster.model_copy(update={"shared_dir": str(tmp_path / "shared")}), tmp_path)
    cp = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    assert (tmp_path / "shared" / "models" / "HydraGNN" / "perf-runs").is_dir()  # --output's directory


def test_header_and_lessons_in_the_script():
    text = render(_spec("hydragnn"), OMNI)
    head = [ln for ln in text.splitlines() if ln.startswith("#SBATCH")]
    assert "#SBATCH --nodes=2" in head and "#SBATCH --partition=gpu" in head and "#SBATCH --account=proj42" in head
    assert "#SBATCH --gpus-per-node=8" in head and "#SBATCH --ntasks-per-node=8" in head
    export = next(ln for ln in head if ln.startswith("#SBATCH --export="))
    # lesson 12: cluster paths listed explicitly; a comma-holding lever is exported in the body only
    assert export.startswith("#SBATCH --export=ALL,AI4S_SHARED_DIR=/lustre/proj/ai4s,")
    assert "NUM_WORKERS=4" in export and "CUDA_VISIBLE_DEVICES" not in export
    assert "export CUDA_VISIBLE_DEVICES=0,1" in text
    assert 'RUN_DIR="$AI4S_SHARED_DIR/models/$AI4S_MODEL/perf-runs/$SLURM_JOB_ID"' in text
    assert "exit 42" in text and "node_health_probe.txt" in text and "--ntasks-per-node=1" in text
    assert "AI4S_CONTAINER_IMAGE=/images/pt.sif" in text
    assert 'sed -e "s|@JOB_DIR@|$OMNI_JOB_DIR|g"' in text  # lesson 1
    assert "-fs.disableMmap" in text  # lesson 3
    assert "export AI4S_PROFILE=1" in text and "export AI4S_DISABLE_CKPT=1" in text  # lesson 30
    assert 'nn["Profile"] = {"enable": 1}' in text  # lesson 4: under NeuralNetwork


def test_omnistat_block_only_when_configured():
    plain = render(_spec("generic"), CL)
    assert "omnistat-usermode" not in plain and "@JOB_DIR@" not in plain
    assert "ai4s_graph.workloads.telemetry" in plain  # the node sampler instead


def test_orbit2_disables_checkpoints():
    text = render(_spec("orbit2", model="ORBIT-2"), CL)
    assert "export ORBIT2_DISABLE_CKPT=1" in text and "train_edm.py" in text


def test_omnistat_config_template_has_per_job_detection_file(repo_root):
    cfg = (repo_root / "sbatch" / "omnistat-usermode.config.in").read_text()
    assert re.search(r"^job_detection_file = @JOB_DIR@/omni_rmsjobinfo$", cfg, re.M)  # lesson 2
    assert "%(SLURM_JOB_ID)s" not in cfg.split("lesson 1", 1)[1].split("\n", 1)[1]


def test_hydragnn_profile_block_goes_under_neuralnetwork(tmp_path):
    """Run the template's own config rewrite on a real-shaped HydraGNN config."""
    text = render(_spec("hydragnn"), CL)
    snippet = text.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    src = tmp_path / "in.json"
    src.write_text(json.dumps({"Profile": {"enable": 1}, "NeuralNetwork": {"Training": {"num_epoch": 2}}}))
    out = tmp_path / "out.json"
    cp = subprocess.run([sys.executable, "-c", snippet, str(src), str(out)], env={"AI4S_PROFILE": "1"},
                        capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    cfg = json.loads(out.read_text())
    assert "Profile" not in cfg and cfg["NeuralNetwork"]["Profile"] == {"enable": 1}
    assert cfg["NeuralNetwork"]["Training"] == {"num_epoch": 2}


BAD = ["4;rm -rf ~", "$(id)", "`id`", "a|b", "a&b", "x>y", "x<y", "(x)", "two\nlines", "a b", "it's"]


@pytest.mark.parametrize("value", BAD)
def test_lever_value_with_shell_metacharacters_is_refused(value):
    with pytest.raises(InputError, match=r"env\.NUM_WORKERS: .*shell metacharacter"):
        render(_spec("cpu-toy", env={"NUM_WORKERS": value}), CL)


@pytest.mark.parametrize("value", ["perf;reboot", "a$b", "x`y`", "n\nm", "../x"])
def test_job_name_with_metacharacters_is_refused(value):
    with pytest.raises(InputError, match="job_name"):
        render(_spec("cpu-toy", job_name=value), CL)


def test_other_fields_are_checked_and_named():
    with pytest.raises(InputError, match=r"script_args\[1\]"):
        render(_spec("cpu-toy", script_args=["--x", "1;id"]), CL)
    with pytest.raises(InputError, match="env: 'BAD-NAME'"):
        render(_spec("cpu-toy", env={"BAD-NAME": "1"}), CL)
    with pytest.raises(InputError, match="env.AI4S_SHARED_DIR"):
        render(_spec("cpu-toy", env={"AI4S_SHARED_DIR": "/x"}), CL)
    with pytest.raises(InputError, match="time_limit"):
        render(_spec("cpu-toy", time_limit="1h;id"), CL)
    with pytest.raises(InputError, match="sbatch_options"):
        render(_spec("cpu-toy", sbatch_options={"wrap": "id"}), CL)
    with pytest.raises(InputError, match="cluster.shared_dir"):
        render(_spec("cpu-toy"), CL.model_copy(update={"shared_dir": "/x $(id)"}))
    with pytest.raises(InputError, match="model"):
        render(_spec("cpu-toy", model="m;x"), CL)


def test_values_are_quoted_where_they_reach_commands():
    text = render(_spec("cpu-toy", env={"LR": "1e-3", "PATHS": "/a:/b"}, script_args=["--lr", "1e-3"]), CL)
    assert "export LR=1e-3" in text and "export PATHS=/a:/b" in text
    assert "--write-manifest --lr 1e-3" in text
