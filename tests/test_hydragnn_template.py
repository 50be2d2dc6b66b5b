"""The HydraGNN job template applies its lever catalog's variables (HYDRAGNN_BATCH_SIZE,
HYDRAGNN_NUM_WORKERS, HYDRAGNN_PRECISION, HYDRAGNN_TORCH_COMPILE): the rendered script's own
config rewrite, argument assembly and launcher are executed against a stand-in HydraGNN
(tests/data/hydragnn_stub) that reads each value where the real one does, and each is found applied."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ai4s_graph.tools.levers.catalog import bundled_catalog, env_strings, load_catalog
from ai4s_graph.tools.slurm.client import ClusterConfig
from ai4s_graph.tools.slurm.jobscript import JobSpec, render

STUB = Path(__file__).resolve().parent / "data" / "hydragnn_stub"
CL = ClusterConfig(partition="gpu", shared_dir="/lustre/proj/ai4s", python=sys.executable)
LEVERS = ("batch_800", "num_workers_12", "precision_fp32", "torch_compile_e3nn")


def _env_of_levers(names) -> dict[str, str]:
    cat = load_catalog(bundled_catalog("hydragnn"))
    env: dict[str, str] = {}
    for lv in cat.levers:
        if lv.name in names:
            env.update(env_strings(lv.change))
    return env


def _script(env: dict[str, str]) -> str:
    spec = JobSpec(template="hydragnn", job_name="hg", model="hydragnn", nodes=1, gpus_per_node=1, ntasks_per_node=1,
                   cpus_per_task=2, time_limit="00:10:00", env=env, script_args=["--epochs", "2"])
    return render(spec, CL)


def _run_template_parts(text: str, tmp: Path, env: dict[str, str]) -> dict:
    """Execute the script's config rewrite, lever-argument block and launcher with ``env``."""
    cfg_src = tmp / "in.json"
    cfg_src.write_text(json.dumps({"NeuralNetwork": {"Training": {"batch_size": 128, "precision": "fp64", "num_epoch": 1}}}))
    cfg = tmp / "hydragnn_config.json"
    rewrite = text.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRAGNN_")} | env
    subprocess.run([sys.executable, "-c", rewrite, str(cfg_src), str(cfg)], env=full_env, check=True)
    block = text.split("# >>> hydragnn lever args\n", 1)[1].split("# <<< hydragnn lever args\n", 1)[0]
    out = subprocess.run(["bash", "-c", block + 'printf "%s\\n" "${HYDRAGNN_ARGS[@]}"; echo "NW=${HYDRAGNN_NUM_WORKERS:-}"'],
                         env=full_env, capture_output=True, text=True, check=True).stdout.splitlines()
    args = [a for a in out if a and not a.startswith("NW=")]
    launcher = tmp / "hydragnn_launch.py"
    launcher.write_text(text.split("<<'LAUNCH'\n", 1)[1].split("\nLAUNCH\n", 1)[0] + "\n")
    run_env = dict(full_env, PYTHONPATH=str(STUB))
    p = subprocess.run([sys.executable, str(launcher), str(STUB / "examples/multidataset_hpo_sc26/gfm_mlip_all_mpnn.py"),
                        "--inputfile", str(cfg), *args, "--epochs", "2"], env=run_env, capture_output=True, text=True,
                       timeout=240)
    assert p.returncode == 0, p.stderr
    return dict(json.loads(p.stdout.strip().splitlines()[-1]), config=json.loads(cfg.read_text()), args=args, stderr=p.stderr)


def test_catalog_variables_are_the_ones_the_template_applies():
    env = _env_of_levers(LEVERS)
    assert env == {"HYDRAGNN_BATCH_SIZE": "800", "HYDRAGNN_NUM_WORKERS": "12", "HYDRAGNN_PRECISION": "fp32",
                   "HYDRAGNN_TORCH_COMPILE": "inductor"}
    text = _script(env)
    for k, v in env.items():
        assert f"export {k}={v}" in text  # the lever block exports each


def test_every_hydragnn_lever_variable_is_applied(tmp_path):
    env = _env_of_levers(LEVERS)
    got = _run_template_parts(_script(env), tmp_path, env)
    assert got["args"] == ["--batch_size", "800", "--precision", "fp32"]
    assert got["batch_size"] == 800 and got["config"]["NeuralNetwork"]["Training"]["batch_size"] == 800
    assert got["precision"] == "fp32" and got["config"]["NeuralNetwork"]["Training"]["precision"] == "fp32"
    assert got["num_workers"] == 12
    assert got["model"] == "OptimizedModule"  # torch.compile wrapped the constructed model
    assert "torch.compile(backend=inductor)" in got["stderr"]


def test_without_levers_hydragnn_runs_its_own_defaults(tmp_path):
    got = _run_template_parts(_script({}), tmp_path, {})
    assert got["args"] == []
    assert got["batch_size"] == 128  # the config's
    assert got["precision"] == "fp64"  # gfm_mlip_all_mpnn.py's --precision default, which overrides the JSON
    assert got["num_workers"] == 0 and got["model"] == "Linear"


@pytest.mark.parametrize("lever,key,want", [("batch_800", "batch_size", 800), ("precision_fp32", "precision", "fp32"),
                                            ("num_workers_12", "num_workers", 12)])
def test_each_lever_alone_changes_only_its_value(tmp_path, lever, key, want):
    env = _env_of_levers([lever])
    got = _run_template_parts(_script(env), tmp_path, env)
    base = {"batch_size": 128, "precision": "fp64", "num_workers": 0, "model": "Linear"}
    assert {k: got[k] for k in base} == dict(base, **{key: want})
