#!/usr/bin/env python3
"""Make the real GPU data of the accuracy benchmark in ONE device call (stdlib only; the workload
itself needs torch): what ran on the device, reproducible.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        python3 bench/accuracy/generate.py --out $OUT --gpus 1 --budget 470

Phases, one after the other on one lane (concurrent runs would share the GPU and corrupt each
case's truth); each case's failure is logged and the rest go on; ``summary.json`` says what ran:

1. a warm-up command (``import torch``, CUDA, cuBLAS, cuDNN once; the GPU's name, driver and
   clocks), so the first case does not pay the cold page cache;
2. the cases of :mod:`cases` in ``ORDER_1GPU`` (``--gpus 1``) or ``ORDER_2GPU`` (``--gpus 2``,
   ``torchrun --nproc-per-node 2``), most valuable first: a case whose estimate (``est_s``) does
   not fit in what is left of ``--budget`` is skipped (logged), so the deadline drops the tail;
   ``long`` (issue 29's long GNN profile, >= 150 MB of JSON) comes last;
3. with ``--bench``: ``tools/cluster/gpu_bench.py`` collectives / probe / eval (2 GPUs);
4. packing (``PACK_RESERVE_S`` kept for it): ``runs-<n>gpu.tar.gz`` (the case directories:
   manifest, train.log, truth.json, run_info.json, traces, telemetry, cmd.txt, stderr.tail),
   ``longtrace.json.gz`` (each split into ``.partNN`` files of 15 MiB when larger),
   ``summary.json`` (per case: rc, seconds against the estimate, trace size, median/mean step
   from train.log, and each case's step ratio against its control) and ``driver.log``: at most 8
   files under 64 MiB, the device's return limits.

Each case runs ``workloads/lever_hooks.py`` (``train.py`` plus the environment levers) with the
case's arguments and environment, ``AI4S_PROFILE=1``, ``AI4S_TELEMETRY_HOST=1`` (host CPU beside
the GPU telemetry), its own torch.compile caches, and ``--truth`` (the case's truth by
construction).

``--plan`` prints each case with its estimated device seconds and the total, and exits;
``--verify runs-1gpu.tar.gz`` checks what came back (every file parses, the profiled steps are
there, ``ai4s-graph trace timeline --json`` reads each trace; needs the package).
``--cpu`` rehearses the whole driver on a CPU machine (gloo, tiny sizes, aot_eager for
torch.compile, no hog). ``--catalog-for JOBID --catalog-out FILE`` writes the optimizer
demonstration's lever catalog (``tools/levers/catalogs/workload.yaml`` with that case as the
baseline; needs pyyaml).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases as C  # type: ignore  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
PART_BYTES = 15 * 1024 * 1024
RETURN_FILES, RETURN_BYTES = 8, 64 * 1024 * 1024
"""The device's return limits: at most 8 files under $OUT, 64 MiB together (16 MiB each)."""
PACK_RESERVE_S = 30.0
"""Seconds kept at the end of ``--budget`` for packing the outputs."""
BATCH_LINE = re.compile(r"^Batch \d+: loss \S+ time ([0-9.]+) seconds")
_deadline = [float("inf")]
_by_id = {c["jobid"]: c for c in C.CASES}


def left() -> float:
    """Seconds left before the packing reserve of ``--budget``."""
    return _deadline[0] - PACK_RESERVE_S - time.time()


def log(out: Path, msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    with open(out / "driver.log", "a") as fh:
        fh.write(line + "\n")


def run_cmd(cmd: list[str], env: dict[str, str], cwd: Path, stdout: Path, stderr: Path, timeout: float) -> int:
    """Run ``cmd`` in its own process group; kill the group on timeout or at the budget's
    deadline (returns 124)."""
    timeout = max(1.0, min(timeout, left()))
    with open(stdout, "w") as so, open(stderr, "w") as se:
        p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=so, stderr=se, start_new_session=True)
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return 124


def base_env(cpu: bool) -> dict[str, str]:
    """The environment of every run: NVLink multicast off, profiler on, telemetry every 0.25 s
    with the host CPU, no inherited rank or SLURM variables."""
    env = {**os.environ, **NO_MULTICAST, "AI4S_PROFILE": "1", "AI4S_TELEMETRY_INTERVAL": "0.25",
           "AI4S_TELEMETRY_HOST": "1", "PYTHONUNBUFFERED": "1"}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID", "SLURMD_NODENAME",
              "AI4S_TSDB_URL", "AI4S_PROFILE_WITH_STACK", "AI4S_PROFILE_RECORD_SHAPES", "AI4S_PROFILE_MEMORY",
              "CUDA_LAUNCH_BLOCKING", "AI4S_MATMUL_PRECISION", "AI4S_CUDNN_BENCHMARK", "AI4S_TORCH_COMPILE"):
        env.pop(k, None)
    if cpu:
        env["OMP_NUM_THREADS"] = "1"
    return env


def cpu_args(args: list[str]) -> list[str]:
    """Shrink a case's arguments for the CPU rehearsal: the model sizes and batch go back to the
    workload's CPU defaults (batch 2), at most 8 steps an epoch, 2 straggler matmuls of 128^2,
    torch.compile through ``aot_eager``; every injected knob is kept."""
    out, skip = [], False
    drop = {"--hidden", "--depth", "--tokens", "--batch-size", "--straggler-dim"}
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a in drop:
            skip = True
            continue
        if a == "--steps-per-epoch":
            out += [a, str(min(8, int(args[i + 1])))]
            skip = True
            continue
        if a == "--straggler-matmuls":
            out += [a, "2" if int(args[i + 1]) > 0 else "0"]
            skip = True
            continue
        out.append(a)
    if "--compile" in out:
        out += ["--compile-backend", "aot_eager"]
    return out + ["--batch-size", "2", "--straggler-dim", "128"]


def step_stats(train_log: Path) -> dict:
    """Per-step seconds of a ``batch``-format log: n, first, median, mean, max (None if none)."""
    if not train_log.exists():
        return {"n": 0}
    dts = [float(m.group(1)) for ln in train_log.read_text(errors="replace").splitlines()
           if (m := BATCH_LINE.match(ln))]
    if not dts:
        return {"n": 0}
    steady = dts[1:] or dts
    return {"n": len(dts), "first_s": round(dts[0], 4), "median_s": round(statistics.median(steady), 5),
            "mean_s": round(statistics.fmean(steady), 5), "max_s": round(max(steady), 4)}


def warmup(out: Path, scratch: Path, cpu: bool) -> dict:
    """The first command on a fresh machine: torch imported, CUDA/cuBLAS/cuDNN initialized once
    (page cache warm for the cases), the device described. ``ok`` False when CUDA is not there
    (unless ``cpu``)."""
    code = ("import json, time, torch; t0=time.time()\n"
            "d={'torch': torch.__version__, 'cuda': torch.cuda.is_available()}\n"
            "if d['cuda']:\n"
            "    x=torch.randn(4096,4096,device='cuda',dtype=torch.bfloat16); (x@x).sum().item()\n"
            "    c=torch.nn.Conv2d(3,8,3).cuda(); c(torch.randn(2,3,32,32,device='cuda')).sum().item()\n"
            "    d.update(name=torch.cuda.get_device_name(0), count=torch.cuda.device_count(), "
            "cudnn=torch.backends.cudnn.version())\n"
            "d['init_s']=round(time.time()-t0,2); print(json.dumps(d))\n")
    d = scratch / "warmup"
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    rc = run_cmd([sys.executable, "-c", code], base_env(cpu), REPO, d / "out", d / "err", 120)
    res = {"rc": rc, "seconds": round(time.time() - t0, 1)}
    try:
        res.update(json.loads((d / "out").read_text().strip().splitlines()[-1]))
    except (ValueError, IndexError):
        res["error_tail"] = (d / "err").read_text(errors="replace").splitlines()[-10:]
    if not cpu and shutil.which("nvidia-smi"):
        cp = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm,"
                             "clocks.sm,temperature.gpu", "--format=csv,noheader"], capture_output=True, text=True,
                            timeout=30, check=False)
        res["nvidia_smi"] = cp.stdout.strip().splitlines()
    res["ok"] = rc == 0 and (cpu or bool(res.get("cuda")))
    log(out, f"warm-up: rc={rc} in {res['seconds']} s: {json.dumps({k: v for k, v in res.items() if k != 'ok'})}")
    return res


def run_case(c: dict, out: Path, scratch: Path, cpu: bool, port: int) -> dict:
    """One case: run it, then keep manifest/train.log/truth/run_info/traces/telemetry/cmd under
    ``out/runs/<jobid>``. Returns its summary row."""
    jid = c["jobid"]
    d = scratch / jid
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    env = {**base_env(cpu), **c["env"], "TORCHINDUCTOR_CACHE_DIR": str(d / "inductor-cache"),
           "TRITON_CACHE_DIR": str(d / "triton-cache")}
    args = cpu_args(c["args"]) if cpu else c["args"]
    truth = {**c["truth"], "jobid": jid, "name": c["name"], "gpus": c["gpus"], "env": c["env"]}
    common = ["--device", "cpu" if cpu else "cuda", "--out-dir", str(d), "--jobid", jid, "--write-manifest",
              "--log-format", "batch", "--truth", json.dumps(truth)]
    entry = str(REPO / "workloads" / "lever_hooks.py")
    if c["gpus"] > 1:
        env["MASTER_PORT"] = str(port)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(c["gpus"]),
               "--master-port", str(port), entry] + args + common
    else:
        if not cpu:
            env["CUDA_VISIBLE_DEVICES"] = "0"
            env["AI4S_TELEMETRY_GPUS"] = "0"
        cmd = [sys.executable, entry] + args + common
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
    res = {"jobid": jid, "name": c["name"], "cause": c["truth"]["cause"], "control": c["truth"]["control"],
           "rc": rc, "seconds": round(time.time() - t0, 1), "est_s": c["est_s"], "cmd": cmd[1:]}
    traces = sorted(p.name for p in (d / "traces").glob("*.json.gz"))
    res["traces"] = traces
    res["trace_bytes"] = sum((d / "traces" / t).stat().st_size for t in traces)
    res["steps"] = step_stats(d / "train.log")
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
    shutil.rmtree(d, ignore_errors=True)  # scratch: caches and the copies are not needed any more
    return res


def run_long(out: Path, scratch: Path, cpu: bool, steps: int) -> dict:
    """The long GNN profile for the trace benchmark (issues 12, 29): ``steps`` profiled steps."""
    d = scratch / "long"
    shutil.rmtree(d, ignore_errors=True)
    env = base_env(cpu)
    if not cpu:
        env["CUDA_VISIBLE_DEVICES"] = "0"
        env["AI4S_TELEMETRY_GPUS"] = "0"
    total = steps + max(20, steps // 5)
    cmd = [sys.executable, str(REPO / "workloads" / "train.py"), "--model", "gnn", "--precision", "fp32",
           "--batch-size", "16", "--epochs", "1", "--steps-per-epoch", str(total), "--profile-steps", str(steps),
           "--device", "cpu" if cpu else "cuda", "--out-dir", str(d), "--jobid", "93900", "--write-manifest"]
    d.mkdir(parents=True)
    t0 = time.time()
    rc = run_cmd(cmd, env, REPO, d / "train.log", d / "stderr.log", 420)
    res = {"name": "long-trace", "rc": rc, "seconds": round(time.time() - t0, 1), "est_s": C.LONG_EST_S,
           "profiled_steps": steps, "cmd": cmd[1:]}
    tr = d / "traces" / "trace_rank0.json.gz"
    if tr.exists():
        import gzip
        import hashlib

        raw = 0
        with gzip.open(tr, "rb") as fh:
            while chunk := fh.read(1 << 24):
                raw += len(chunk)
        data = tr.read_bytes()
        res.update(gz_bytes=len(data), json_bytes=raw, json_bytes_per_step=raw // max(1, steps),
                   sha256=hashlib.sha256(data).hexdigest())
        res["parts"] = split_file(out, "longtrace.json.gz", data)
        (out / "runs").mkdir(exist_ok=True)
        for f in ("manifest.json", "train.log"):
            if (d / f).exists():
                shutil.copy(d / f, out / "runs" / f"long-{f}")
    else:
        res["error_tail"] = (d / "stderr.log").read_text(errors="replace").splitlines()[-15:]
    shutil.rmtree(d, ignore_errors=True)
    return res


def run_bench(out: Path, cpu: bool) -> list[dict]:
    """``tools/cluster/gpu_bench.py`` collectives (and, on GPUs, probe and eval) into ``out/bench``."""
    bd = out / "bench"
    bd.mkdir(exist_ok=True)
    gb = str(REPO / "tools" / "cluster" / "gpu_bench.py")
    env = base_env(cpu)
    jobs = [("collectives", [gb, "collectives", "--json", str(bd / "collectives-2gpu.json"), "--coll-max",
                             "1MiB" if cpu else "1GiB", "--coll-iters", "3" if cpu else "20"]
             + (["--cpu-ranks", "2"] if cpu else []), 300)]
    if not cpu:
        jobs.append(("probe", [gb, "probe", "--json", str(bd / "node_health_probe-2gpu.json")], 240))
    res = []
    for name, cmd, tmo in jobs:
        if left() < 20:
            res.append({"name": name, "rc": None, "skipped": "no time left in --budget"})
            log(out, f"bench {name}: skipped, no time left")
            continue
        t0 = time.time()
        rc = run_cmd([sys.executable] + cmd, env, REPO, bd / f"{name}.out", bd / f"{name}.err", tmo)
        res.append({"name": name, "rc": rc, "seconds": round(time.time() - t0, 1)})
        log(out, f"bench {name}: rc={rc} in {res[-1]['seconds']} s")
    return res


def split_file(out: Path, name: str, data: bytes) -> list[str]:
    """Write ``data`` as ``out/name``, or as ``name.partNN`` files of at most PART_BYTES
    (``cat`` them back together in order); returns the file names."""
    if len(data) <= PART_BYTES:
        (out / name).write_bytes(data)
        return [name]
    names = []
    for i in range(0, len(data), PART_BYTES):
        names.append(f"{name}.part{i // PART_BYTES:02d}")
        (out / names[-1]).write_bytes(data[i:i + PART_BYTES])
    return names


def pack(out: Path, name: str, dirs: list[Path]) -> list[str]:
    """``<name>.tar.gz`` of ``dirs`` (as ``runs/<dir>`` inside the archive) and the long run's
    manifest/log, split by :func:`split_file`."""
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for d in sorted(dirs):
            tf.add(d, arcname=f"runs/{d.name}")
    return split_file(out, f"{name}.tar.gz", buf.getvalue())


def ratios(rows: list[dict]) -> list[dict]:
    """Each case's median step against its control's (both from train.log), where both ran."""
    by = {r["jobid"]: r for r in rows if r.get("rc") == 0 and r.get("steps", {}).get("n")}
    out = []
    for r in rows:
        ctl = r.get("control")
        if r["jobid"] in by and ctl in by:
            a, b = by[r["jobid"]]["steps"], by[ctl]["steps"]
            out.append({"case": r["jobid"], "name": r["name"], "control": ctl, "case_median_s": a["median_s"],
                        "control_median_s": b["median_s"], "median_ratio": round(a["median_s"] / b["median_s"], 3)
                        if b["median_s"] else None, "mean_ratio": round(a["mean_s"] / b["mean_s"], 3)
                        if b["mean_s"] else None})
    return out


def plan_rows(order: list[str], cpu: bool = False) -> list[dict]:
    """The run plan: warm-up, each case of ``order`` (``long`` included) with its estimate and the
    running total."""
    rows, total = [{"jobid": "warmup", "name": "warm-up (torch, CUDA, cuBLAS, cuDNN)", "est_s": C.WARMUP_EST_S}], 0.0
    total += C.WARMUP_EST_S
    rows[0]["total_s"] = total
    for jid in order:
        if jid == "long":
            row = {"jobid": "long", "name": "long GNN profile (issue 29)", "est_s": C.LONG_EST_S, "cause": "-"}
        else:
            c = _by_id[jid]
            t = c["truth"]
            row = {"jobid": jid, "name": c["name"], "est_s": c["est_s"], "cause": t["cause"], "class": t["class"],
                   "control": t["control"] or "-", "lever": t["lever"] or "-"}
        total += row["est_s"]
        row["total_s"] = round(total, 1)
        rows.append(row)
    return rows


def print_plan(order: list[str], budget: float) -> None:
    rows = plan_rows(order)
    print(f"{'#':>2} {'jobid':6} {'name':28} {'cause':28} {'class':19} {'control':7} {'lever':24} "
          f"{'est s':>6} {'total':>6}")
    for i, r in enumerate(rows):
        print(f"{i:>2} {r['jobid']:6} {r['name'][:28]:28} {r.get('cause', '-'):28} {str(r.get('class', '-')):19} "
              f"{r.get('control', '-'):7} {r.get('lever', '-'):24} {r['est_s']:>6.1f} {r['total_s']:>6.1f}")
    total = rows[-1]["total_s"]
    print(f"total {total:.1f} s of device run time for {len(rows) - 1} runs + warm-up; budget {budget:.0f} s "
          f"(packing keeps {PACK_RESERVE_S:.0f} s): "
          f"{'fits' if total <= budget - PACK_RESERVE_S else 'the tail is dropped'}")


def catalog_for(jobid: str, path: Path) -> Path:
    """Write the lever catalog of the optimizer demonstration: ``workload.yaml``'s levers with
    case ``jobid``'s configuration as the baseline (its arguments as script args, its
    environment plus ``AI4S_WORKLOAD_MODULE``). Raises KeyError for an unknown jobid; needs
    pyyaml (on the device image and in this package's dependencies)."""
    import yaml

    c = _by_id[jobid]
    cat = yaml.safe_load((REPO / "tools" / "levers" / "catalogs" / "workload.yaml").read_text())
    sa: dict = {"--device": "cuda", "--log-format": "batch"}
    args = list(c["args"])
    i = 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            v = args[i + 1]
            sa[args[i]] = int(v) if v.isdigit() else v
            i += 2
        else:
            sa[args[i]] = True
            i += 1
    cat["baseline"]["change"] = {"env": {"AI4S_WORKLOAD_MODULE": "ai4s_graph.workloads.lever_hooks", **c["env"]},
                                 "script_args": sa}
    cat["baseline"]["job_name"] = f"{c['name']}-loop"[:40]
    cat["baseline"]["global_batch_size"] = int(sa.get("--batch-size", 16))
    cat["description"] = f"{cat['description']} Baseline: case {jobid} ({c['name']}, cause {c['truth']['cause']})."
    path.write_text(yaml.safe_dump(cat, sort_keys=False, width=110))
    return path


def verify_case(d: Path) -> dict:
    """Check one returned case directory: its files parse, the truth's jobid is the manifest's,
    the log has ``Batch`` lines, the telemetry has ``rmsjob_info``, every rank's trace holds
    ``--profile-steps`` ProfilerStep events; and ``ai4s-graph trace timeline --json`` (through
    ``python3 -m ai4s_graph.cli``, when the package imports) reads rank 0's trace: its GPU busy and
    idle percent, or the reason it gave (a CPU rehearsal's trace has no GPU events)."""
    import gzip

    row: dict = {"jobid": d.name, "problems": []}
    try:
        man = json.loads((d / "manifest.json").read_text())
        truth = json.loads((d / "truth.json").read_text())
        info = json.loads((d / "run_info.json").read_text())
    except (OSError, ValueError) as e:
        return {**row, "problems": [f"manifest/truth/run_info: {e}"]}
    row.update(name=truth.get("name"), cause=truth.get("cause"), klass=truth.get("class"))
    if man.get("jobid") != truth.get("jobid") or (d.name.isdigit() and d.name != man.get("jobid")):
        row["problems"].append(f"jobid manifest {man.get('jobid')} truth {truth.get('jobid')} dir {d.name}")
    row["steps"] = step_stats(d / "train.log")
    if not row["steps"]["n"]:
        row["problems"].append("train.log has no Batch lines")
    try:
        lines = (d / "telemetry" / "export.jsonl").read_text().splitlines()
        names = {json.loads(ln)["metric"]["__name__"] for ln in lines if ln.strip()}
        row["telemetry"] = sorted(n for n in names if n.startswith(("DCGM_FI_DEV_GPU_UTIL", "node_cpu", "rmsjob")))
        if "rmsjob_info" not in names:
            row["problems"].append("telemetry without rmsjob_info")
    except (OSError, ValueError, KeyError) as e:
        row["problems"].append(f"telemetry: {e}")
    for r in range(int(man.get("ranks") or 1)):
        tr = d / "traces" / f"trace_rank{r}.json.gz"
        try:
            ev = json.loads(gzip.decompress(tr.read_bytes()))["traceEvents"]
        except (OSError, ValueError, KeyError) as e:
            row["problems"].append(f"{tr.name}: {e}")
            continue
        steps = {e.get("name") for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")}
        kernels = sum(1 for e in ev if e.get("cat") == "kernel")
        if r == 0:
            row.update(trace_kib=tr.stat().st_size // 1024, events=len(ev), kernels=kernels,
                       python_events=sum(1 for e in ev if e.get("cat") == "python_function"))
        if len(steps) != int(info.get("profile_steps") or 3):
            row["problems"].append(f"{tr.name}: {len(steps)} ProfilerStep events")
    cp = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "trace", "timeline",
                         str(d / "traces" / "trace_rank0.json.gz"), "--json"], capture_output=True, text=True,
                        cwd=REPO, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                            filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}, timeout=600, check=False)
    try:
        tl = json.loads(cp.stdout)
    except ValueError:
        tl = None
    if isinstance(tl, dict) and tl.get("outcome") == "fail":  # a refusal under --json: its reason, whole
        row["timeline"] = str(tl.get("reason"))
    else:
        try:
            row["timeline"] = {k: round(tl[k]["percent"], 1) for k in ("busy_time", "idle_time", "exposed_memcpy_time")}
        except (KeyError, TypeError):
            row["timeline"] = (cp.stdout.strip().splitlines() or cp.stderr.strip().splitlines() or ["?"])[-1][:160]
    if isinstance(row["timeline"], str):
        if "CPU-only" not in row["timeline"] or man.get("gpu"):
            row["problems"].append(f"trace timeline: {row['timeline']}")
    return row


def verify(src: Path) -> int:
    """``--verify``: unpack ``src`` (a ``runs-*.tar.gz``, its first ``.part00``, or a directory
    holding ``runs/``) and :func:`verify_case` each case; prints one line a case and
    ``STATUS=ok|fail``; returns 0 when every case passes."""
    import tempfile

    tmp = None
    if src.is_dir():
        root = src / "runs" if (src / "runs").is_dir() else src
    else:
        tmp = tempfile.TemporaryDirectory(prefix="ai4s-verify-")
        parts = sorted(src.parent.glob(src.name.removesuffix(".part00") + ".part*")) if src.name.endswith(".part00") \
            else [src]
        blob = Path(tmp.name) / "runs.tar.gz"
        with open(blob, "wb") as fh:
            for p in parts:
                fh.write(p.read_bytes())
        with tarfile.open(blob) as tf:
            tf.extractall(tmp.name, filter="data")
        root = Path(tmp.name) / "runs"
    rows = [verify_case(d) for d in sorted(root.iterdir()) if d.is_dir() and d.name != "long"]
    for r in rows:
        st = r.get("steps", {})
        print(f"{r['jobid']} {str(r.get('name'))[:24]:24} {str(r.get('cause'))[:26]:26} median {st.get('median_s')} s, "
              f"trace {r.get('trace_kib')} KiB, kernels {r.get('kernels')}, timeline {r.get('timeline')}"
              + (f"  PROBLEMS: {'; '.join(r['problems'])}" if r["problems"] else ""))
    bad = [r["jobid"] for r in rows if r["problems"]]
    print(f"STATUS={'ok' if not bad else 'fail'}; reason={len(rows)} cases, {len(bad)} with problems {bad}")
    if tmp:
        tmp.cleanup()
    return 0 if rows and not bad else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="where the packed results go ($OUT on the device)")
    ap.add_argument("--scratch", default="/tmp/ai4s-gen")
    ap.add_argument("--cpu", action="store_true", help="rehearse on the CPU (gloo, tiny sizes)")
    ap.add_argument("--gpus", type=int, choices=[1, 2], default=1, help="which set: ORDER_1GPU or ORDER_2GPU")
    ap.add_argument("--long-steps", type=int, default=130, help="profiled steps of the long GNN trace")
    ap.add_argument("--only", default="", help="comma-separated jobids (default: the whole order)")
    ap.add_argument("--skip", default="", help="comma-separated: warmup, long")
    ap.add_argument("--bench", action="store_true", help="also the gpu_bench collectives/probe (2 GPUs)")
    ap.add_argument("--budget", type=float, default=470.0, help="seconds for the whole run, packing included")
    ap.add_argument("--plan", action="store_true", help="print the plan with estimates and exit")
    ap.add_argument("--catalog-for", default=None, help="write the optimizer catalog for this case and exit")
    ap.add_argument("--catalog-out", default=None)
    ap.add_argument("--verify", default=None, help="check a returned runs-*.tar.gz (or .part00, or a directory)")
    a = ap.parse_args(argv)
    if a.verify:
        return verify(Path(a.verify))
    order = list(C.ORDER_1GPU if a.gpus == 1 else C.ORDER_2GPU)
    only = set(filter(None, a.only.split(",")))
    skip = set(filter(None, a.skip.split(",")))
    if only:
        order = [j for j in order if j in only] + [j for j in sorted(only) if j not in order and j in _by_id]
    if "long" in skip:
        order = [j for j in order if j != "long"]
    unknown = [j for j in only if j not in _by_id and j != "long"]
    if unknown:
        print(f"error: unknown jobid(s) {', '.join(sorted(unknown))}", file=sys.stderr)
        print("STATUS=fail; reason=unknown jobid")
        return 2
    if a.catalog_for:
        if a.catalog_for not in _by_id or not a.catalog_out:
            print("error: --catalog-for needs a known jobid and --catalog-out", file=sys.stderr)
            print("STATUS=fail; reason=bad --catalog-for")
            return 2
        print(catalog_for(a.catalog_for, Path(a.catalog_out)))
        return 0
    if a.plan:
        print_plan(order, a.budget)
        return 0
    if not a.out:
        ap.error("--out is required")
    _deadline[0] = time.time() + a.budget
    out, scratch = Path(a.out), Path(a.scratch)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    summary: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": a.cpu, "gpus": a.gpus,
                     "budget_s": a.budget, "plan_s": plan_rows(order)[-1]["total_s"], "cases": [], "skipped": []}
    t_all = time.time()
    log(out, f"generate: {len(order)} runs, gpus={a.gpus}, cpu={a.cpu}, budget {a.budget:.0f} s, "
             f"plan {summary['plan_s']} s")
    ok = True
    if "warmup" not in skip:
        summary["warmup"] = w = warmup(out, scratch, a.cpu)
        ok = w["ok"]
        if not ok:
            log(out, "warm-up failed: no usable GPU; no case is run")
    for i, jid in enumerate(order if ok else []):
        est_s = C.LONG_EST_S if jid == "long" else _by_id[jid]["est_s"]
        if est_s > left():
            summary["skipped"].append({"jobid": jid, "est_s": est_s, "left_s": round(left(), 1)})
            log(out, f"{jid}: skipped (est {est_s} s > {left():.0f} s left)")
            continue
        if jid == "long":
            try:
                r = run_long(out, scratch, a.cpu, 8 if a.cpu else a.long_steps)
            except Exception as e:  # noqa: BLE001 - log it, go on to packing
                r = {"name": "long-trace", "rc": -1, "seconds": 0, "error_tail": [f"{type(e).__name__}: {e}"]}
            summary["long_trace"] = r
            log(out, f"long trace: rc={r['rc']} in {r['seconds']} s (est {C.LONG_EST_S}), json {r.get('json_bytes')} B")
            continue
        c = _by_id[jid]
        try:
            r = run_case(c, out, scratch, a.cpu, 29600 + i)
        except Exception as e:  # noqa: BLE001 - log it, go on with the next case
            r = {"jobid": jid, "name": c["name"], "cause": c["truth"]["cause"], "control": c["truth"]["control"],
                 "rc": -1, "seconds": 0, "est_s": c["est_s"], "traces": [], "error_tail": [f"{type(e).__name__}: {e}"]}
        summary["cases"].append(r)
        st = r.get("steps", {})
        log(out, f"{jid} {c['name']}: rc={r['rc']} in {r['seconds']} s (est {c['est_s']}), "
                 f"trace {r.get('trace_bytes', 0) // 1024} KiB, steps {st.get('n', 0)}, median {st.get('median_s')} s")
    if a.bench:
        summary["bench"] = run_bench(out, a.cpu)
    summary["ratios"] = ratios(summary["cases"])
    dirs = [d for d in (out / "runs").iterdir() if d.is_dir()]
    files = [f for f in (out / "runs").iterdir() if f.is_file()]
    if files:  # the long run's manifest and log travel in the runs archive
        (out / "runs" / "long").mkdir(exist_ok=True)
        for f in files:
            f.replace(out / "runs" / "long" / f.name.removeprefix("long-"))
        dirs.append(out / "runs" / "long")
    summary["packed"] = pack(out, f"runs-{a.gpus}gpu", dirs) if dirs else []
    if (out / "bench").exists():
        summary["packed"] += pack(out, "bench", [out / "bench"])
        shutil.rmtree(out / "bench")
    shutil.rmtree(out / "runs")
    summary["packed"] += (summary.get("long_trace") or {}).get("parts", [])
    summary["seconds"] = round(time.time() - t_all, 1)
    summary["failed"] = [r["jobid"] for r in summary["cases"] if r["rc"] != 0]
    sizes = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file() and p.name != "driver.log"}
    if len(sizes) + 2 > RETURN_FILES or sum(sizes.values()) > RETURN_BYTES - (1 << 20):
        drop = [n for n in sorted(sizes) if n.startswith("longtrace")]
        for n in drop:
            (out / n).unlink()
        summary["dropped"] = drop
        log(out, f"over the return limits ({len(sizes)} files, {sum(sizes.values())} B): dropped {drop}")
    log(out, f"done in {summary['seconds']} s; failed: {summary['failed']}; skipped: "
             f"{[s['jobid'] for s in summary['skipped']]}; files: {sorted(os.listdir(out))}")
    status = "ok" if not summary["failed"] and not summary["skipped"] and ok else ("fail" if not ok else "partial")
    log(out, f"STATUS={status}; reason={len(summary['cases'])} cases run, {len(summary['failed'])} failed, "
             f"{len(summary['skipped'])} skipped")
    summary["log"] = (out / "driver.log").read_text().splitlines()
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
