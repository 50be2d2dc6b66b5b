#!/usr/bin/env python3
"""Make the real GPU data of the accuracy benchmark in ONE run on a 2-GPU machine (stdlib only;
the workload itself needs torch): what ran on the device, reproducible.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        python3 bench/accuracy/generate.py --out $OUT

Phases (each case's failure is logged and the rest go on; ``summary.json`` says what ran):

1. the 2-GPU cases of :mod:`cases` (``torchrun --nproc-per-node 2 workloads/train.py``), one
   after the other;
2. the 1-GPU fault cases in two lanes at once, one per GPU (``CUDA_VISIBLE_DEVICES`` and
   ``AI4S_TELEMETRY_GPUS`` pin a lane's run and its telemetry to its GPU); lane B also makes the
   long trace for the trace benchmark (issue 12: the GNN workload, ``--profile-steps`` profiled
   steps, >= 150 MB of JSON);
3. ``tools/cluster/gpu_bench.py collectives`` (all-reduce / all-gather / reduce-scatter by message
   size, with and without ``NCCL_P2P_DISABLE=1``) and ``gpu_bench.py probe`` (the probe's
   all-reduce check);
4. packing: ``runs-multi.tar.gz`` and ``runs-single.tar.gz`` (the case directories),
   ``bench.tar.gz`` (gpu_bench JSON, ``nvidia-smi topo -m``), ``longtrace.json.gz`` (each split
   into ``.partNN`` files of 15 MiB when larger) and ``summary.json`` (with the driver's log).

``--cpu`` rehearses the same driver on a CPU machine (gloo, tiny sizes, no hog, no long trace).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import CASES  # type: ignore  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
LANES = {"A": ["93101", "93102", "93103", "93104", "93105", "93106"], "B": ["long", "93108", "93109", "93107", "93110"]}
PART_BYTES = 15 * 1024 * 1024
PACK_RESERVE_S = 30.0
"""Seconds kept at the end of ``--budget`` for packing the outputs."""
_log_lock = threading.Lock()
_deadline = [float("inf")]


def left(cap: float) -> float:
    """Seconds a command may run: ``cap``, or less so the run ends before the budget's deadline."""
    return max(1.0, min(cap, _deadline[0] - PACK_RESERVE_S - time.time()))


def log(out: Path, msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    with _log_lock:
        print(line, flush=True)
        with open(out / "driver.log", "a") as fh:
            fh.write(line + "\n")


def run_cmd(cmd: list[str], env: dict[str, str], cwd: Path, stdout: Path, stderr: Path, timeout: float) -> int:
    """Run ``cmd`` in its own process group; kill the group on timeout (returns 124)."""
    timeout = left(timeout)
    with open(stdout, "w") as so, open(stderr, "w") as se:
        p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=so, stderr=se, start_new_session=True)
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return 124


def base_env(cpu: bool) -> dict[str, str]:
    env = {**os.environ, **NO_MULTICAST, "AI4S_PROFILE": "1", "AI4S_TELEMETRY_INTERVAL": "0.25",
           "PYTHONUNBUFFERED": "1"}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID", "SLURMD_NODENAME"):
        env.pop(k, None)
    if cpu:
        env["OMP_NUM_THREADS"] = "1"
    return env


def cpu_args(args: list[str]) -> list[str]:
    """Shrink a case's arguments for the CPU rehearsal (small widths, few steps)."""
    out, skip = [], False
    drop = {"--hidden", "--depth", "--tokens", "--batch-size", "--straggler-matmuls", "--steps-per-epoch"}
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a in drop:
            skip = True
            continue
        out.append(a)
    return out + ["--batch-size", "2", "--steps-per-epoch", "8", "--straggler-matmuls", "2", "--straggler-dim", "128"]


def run_case(c: dict, out: Path, scratch: Path, gpu: str | None, cpu: bool, port: int) -> dict:
    """One case: run it, then keep manifest/train.log/traces/telemetry/truth under ``out/runs/<jobid>``."""
    jid = c["jobid"]
    d = scratch / jid
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    env = {**base_env(cpu), **c["env"]}
    args = cpu_args(c["args"]) if cpu else c["args"]
    truth = {**c["truth"], "jobid": jid, "name": c["name"], "gpus": c["gpus"], "env": c["env"]}
    common = ["--device", "cpu" if cpu else "cuda", "--out-dir", str(d), "--jobid", jid, "--write-manifest",
              "--log-format", "batch", "--truth", json.dumps(truth)]
    train = str(REPO / "workloads" / "train.py")
    if c["gpus"] > 1:
        env["MASTER_PORT"] = str(port)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(c["gpus"]),
               "--master-port", str(port), train] + args + common
    else:
        if gpu is not None and not cpu:
            env["CUDA_VISIBLE_DEVICES"] = gpu
            env["AI4S_TELEMETRY_GPUS"] = gpu
        cmd = [sys.executable, train] + args + common
    hog = None
    if c["hog"] and not cpu:
        hog = subprocess.Popen([sys.executable, str(REPO / "workloads" / "faults.py"), "hog", "--device", "0",
                                "--seconds", str(c["timeout"])], env=env, cwd=REPO, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=open(d / "hog.err", "w"))
        time.sleep(8)  # the hog is running its matmuls before the job starts
    t0 = time.time()
    rc = run_cmd(cmd, env, REPO, d / "train.log", d / "stderr.log", c["timeout"])
    if hog is not None:
        os.killpg(hog.pid, signal.SIGKILL)
        hog.wait()
    res = {"jobid": jid, "name": c["name"], "rc": rc, "seconds": round(time.time() - t0, 1), "cmd": cmd[1:]}
    traces = sorted(p.name for p in (d / "traces").glob("*.json.gz"))
    res["traces"] = traces
    res["trace_bytes"] = sum((d / "traces" / t).stat().st_size for t in traces)
    keep = out / "runs" / jid
    keep.mkdir(parents=True, exist_ok=True)
    for f in ("manifest.json", "train.log", "truth.json", "run_info.json"):
        if (d / f).exists():
            shutil.copy(d / f, keep / f)
    for sub in ("traces", "telemetry"):
        if (d / sub).exists():
            shutil.copytree(d / sub, keep / sub, dirs_exist_ok=True)
    err = (d / "stderr.log").read_text(errors="replace").splitlines()
    (keep / "stderr.tail").write_text("\n".join(err[-60:]) + "\n")
    (keep / "cmd.txt").write_text(" ".join(cmd[1:]) + "\n" + json.dumps(c["env"]) + "\n")
    if rc != 0:
        res["error_tail"] = err[-15:]
    return res


def run_long(out: Path, scratch: Path, gpu: str | None, cpu: bool, steps: int) -> dict:
    """The long GNN profile for the trace benchmark (issue 12)."""
    d = scratch / "long"
    shutil.rmtree(d, ignore_errors=True)
    env = base_env(cpu)
    if gpu is not None and not cpu:
        env["CUDA_VISIBLE_DEVICES"] = gpu
        env["AI4S_TELEMETRY_GPUS"] = gpu
    total = steps + max(20, steps // 5)
    cmd = [sys.executable, str(REPO / "workloads" / "train.py"), "--model", "gnn", "--precision", "fp32",
           "--batch-size", "16", "--epochs", "1", "--steps-per-epoch", str(total), "--profile-steps", str(steps),
           "--device", "cpu" if cpu else "cuda", "--out-dir", str(d), "--jobid", "93900", "--write-manifest"]
    d.mkdir(parents=True)
    t0 = time.time()
    rc = run_cmd(cmd, env, REPO, d / "train.log", d / "stderr.log", 420)
    res = {"name": "long-trace", "rc": rc, "seconds": round(time.time() - t0, 1), "cmd": cmd[1:]}
    tr = d / "traces" / "trace_rank0.json.gz"
    if tr.exists():
        import gzip
        import hashlib

        raw = 0
        with gzip.open(tr, "rb") as fh:
            while chunk := fh.read(1 << 24):
                raw += len(chunk)
        res.update(gz_bytes=tr.stat().st_size, json_bytes=raw,
                   sha256=hashlib.sha256(tr.read_bytes()).hexdigest())
        data = tr.read_bytes()
        if len(data) <= PART_BYTES:
            (out / "longtrace.json.gz").write_bytes(data)
            res["parts"] = ["longtrace.json.gz"]
        else:
            res["parts"] = []
            for i in range(0, len(data), PART_BYTES):
                name = f"longtrace.json.gz.part{i // PART_BYTES:02d}"
                (out / name).write_bytes(data[i:i + PART_BYTES])
                res["parts"].append(name)
        for f in ("manifest.json", "train.log"):
            if (d / f).exists():
                shutil.copy(d / f, out / "runs" / f"long-{f}")
    else:
        res["error_tail"] = (d / "stderr.log").read_text(errors="replace").splitlines()[-15:]
    return res


def run_bench(out: Path, cpu: bool) -> list[dict]:
    bd = out / "bench"
    bd.mkdir(exist_ok=True)
    gb = str(REPO / "tools" / "cluster" / "gpu_bench.py")
    env = base_env(cpu)
    jobs = [("collectives", [gb, "collectives", "--json", str(bd / "collectives-2gpu.json"), "--coll-max",
                             "1MiB" if cpu else "1GiB", "--coll-iters", "3" if cpu else "20"]
             + (["--cpu-ranks", "2"] if cpu else []), 300)]
    if not cpu:
        jobs.append(("probe", [gb, "probe", "--json", str(bd / "node_health_probe-2gpu.json")], 240))
        # the eval-cluster measurements with short settings (the collective sweep ran above)
        jobs.append(("eval", [gb, "eval", "--json", str(bd / "eval-2gpu.json"), "--local-dir", "/tmp",
                              "--fio-sizes", "16KiB,1MiB", "--fio-runtime", "10", "--mamf-budget", "20",
                              "--mamf-dims", "4096,8192,12288,16384", "--msmf-candidates", "1",
                              "--msmf-seconds", "5", "--dcgm-level", "0", "--no-collectives", "--ar-max", "1GiB"],
                     300))
        for name, cmd in (("topo", ["nvidia-smi", "topo", "-m"]), ("nvlink", ["nvidia-smi", "nvlink", "-s"])):
            with open(bd / f"{name}.txt", "w") as fh:
                try:
                    subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=30, check=False)
                except (OSError, subprocess.SubprocessError) as e:
                    fh.write(f"{cmd}: {e}\n")
    res = []
    for name, cmd, tmo in jobs:
        if left(tmo) < 20:
            res.append({"name": name, "rc": None, "skipped": "no time left in --budget"})
            log(out, f"bench {name}: skipped, no time left")
            continue
        t0 = time.time()
        rc = run_cmd([sys.executable] + cmd, env, REPO, bd / f"{name}.out", bd / f"{name}.err", tmo)
        res.append({"name": name, "rc": rc, "seconds": round(time.time() - t0, 1)})
        log(out, f"bench {name}: rc={rc} in {res[-1]['seconds']} s")
    return res


def pack(out: Path, name: str, dirs: list[Path]) -> list[str]:
    """``<name>.tar.gz`` of ``dirs`` (under ``runs/`` or ``bench/`` inside the archive), split into
    ``.partNN`` files of at most PART_BYTES when larger (``cat`` them back together)."""
    tgz = out / f"{name}.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        for d in sorted(dirs):
            tf.add(d, arcname=f"{d.parent.name}/{d.name}" if d.parent.name == "runs" else d.name)
    if tgz.stat().st_size <= PART_BYTES:
        return [tgz.name]
    data, names = tgz.read_bytes(), []
    for i in range(0, len(data), PART_BYTES):
        (out / f"{tgz.name}.part{i // PART_BYTES:02d}").write_bytes(data[i:i + PART_BYTES])
        names.append(f"{tgz.name}.part{i // PART_BYTES:02d}")
    tgz.unlink()
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--scratch", default="/tmp/ai4s-gen")
    ap.add_argument("--cpu", action="store_true", help="rehearse on the CPU (gloo, tiny sizes)")
    ap.add_argument("--long-steps", type=int, default=130)
    ap.add_argument("--only", default="", help="comma-separated jobids (default: all)")
    ap.add_argument("--skip", default="", help="comma-separated phases to skip: multi, lanes, long, bench")
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for the whole run, packing included")
    a = ap.parse_args(argv)
    _deadline[0] = time.time() + a.budget
    out, scratch = Path(a.out), Path(a.scratch)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, a.skip.split(",")))
    only = set(filter(None, a.only.split(",")))
    by_id = {c["jobid"]: c for c in CASES if not only or c["jobid"] in only}
    summary: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": a.cpu, "cases": [],
                     "lanes": {}}
    t_all = time.time()
    log(out, f"generate: {len(by_id)} cases, cpu={a.cpu}")
    if "multi" not in skip:
        for i, c in enumerate(c for c in by_id.values() if c["gpus"] > 1):
            try:
                r = run_case(c, out, scratch, None, a.cpu, 29600 + i)
            except Exception as e:  # noqa: BLE001
                r = {"jobid": c["jobid"], "name": c["name"], "rc": -1, "traces": [],
                     "error_tail": [f"{type(e).__name__}: {e}"]}
            summary["cases"].append(r)
            log(out, f"{c['jobid']} {c['name']}: rc={r['rc']} in {r['seconds']} s, traces {r['traces']}")

    def lane(name: str, gpu: str) -> None:
        for jid in LANES[name]:
            if jid == "long":
                if "long" in skip or a.cpu:
                    continue
                try:
                    r = run_long(out, scratch, gpu, a.cpu, a.long_steps)
                except Exception as e:  # noqa: BLE001
                    r = {"name": "long-trace", "rc": -1, "error_tail": [f"{type(e).__name__}: {e}"]}
                summary["long_trace"] = r
                log(out, f"long trace: rc={r['rc']} in {r['seconds']} s, json {r.get('json_bytes')} B")
                continue
            if jid not in by_id:
                continue
            c = by_id[jid]
            try:
                r = run_case(c, out, scratch, gpu, a.cpu, 0)
            except Exception as e:  # noqa: BLE001 - log it, go on with the lane
                r = {"jobid": jid, "name": c["name"], "rc": -1, "error_tail": [f"{type(e).__name__}: {e}"]}
            summary["cases"].append(r)
            log(out, f"{jid} {c['name']} (lane {name}): rc={r['rc']} in {r['seconds']} s, traces {r['traces']}")

    if "lanes" not in skip:
        ths = [threading.Thread(target=lane, args=(n, g)) for n, g in (("A", "0"), ("B", "1"))]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
    if "bench" not in skip:
        summary["bench"] = run_bench(out, a.cpu)
    multi = [d for d in (out / "runs").iterdir() if d.name in {c["jobid"] for c in CASES if c["gpus"] > 1}]
    single = [d for d in (out / "runs").iterdir() if d not in multi]
    summary["packed"] = pack(out, "runs-multi", multi) + pack(out, "runs-single", single)
    if (out / "bench").exists():
        summary["packed"] += pack(out, "bench", [out / "bench"])
        shutil.rmtree(out / "bench")
    shutil.rmtree(out / "runs")
    summary["seconds"] = round(time.time() - t_all, 1)
    summary["failed"] = [r["jobid"] for r in summary["cases"] if r["rc"] != 0]
    log(out, f"done in {summary['seconds']} s; failed: {summary['failed']}; files: {sorted(os.listdir(out))}")
    summary["log"] = (out / "driver.log").read_text().splitlines()
    (out / "driver.log").unlink()
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
