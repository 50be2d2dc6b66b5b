"""The cluster-evaluation report (seed 003, "Report template"): the figures and sentences computed
from ``gpu_bench`` eval results, rendered by the jinja2 template ``templates/eval_report.md.j2``.

:func:`build_report` is the entry point; :func:`report_context` gives the template's variables
(useful to test a value without parsing markdown). Peaks come from
:mod:`ai4s_graph.tools.perfmodel.datasheet`.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

import jinja2

from . import gpu_bench
from ..errors import InputError
from ..perfmodel.datasheet import find_gpu, official_bf16
from .mdparse import slug
from .report_findings import _size, findings, gpu_label, peak_of

ML_ENG = "https://github.com/stas00/ml-engineering/blob/master"
TFLOPS_TABLE = f"{ML_ENG}/compute/accelerator/README.md#tflops-comparison-table"
TEMPLATES = Path(__file__).resolve().parent / "templates"
COLLECTIVE_NAMES = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter"}


def official_tflops(name: str) -> tuple[float | None, str]:
    """(dense BF16 TFLOPS, source) for a GPU name like ``NVIDIA H200``; (None, "") if unknown
    (PCIe/NVL variants have other peaks). Table: :data:`ai4s_graph.tools.perfmodel.datasheet.GPUS`."""
    return official_bf16(name)


def _gib(nbytes: float) -> str:
    return f"{nbytes / (1 << 30):.1f} GiB"


def _pct(v: float, ref: float) -> str:
    return f"{100 * v / ref:.1f}%"


def _shape(s: list[int]) -> str:
    return "×".join(str(x) for x in s)


def _shared_heading(r: dict[str, Any]) -> str:
    t = (r.get("fs") or {}).get("type") or ""
    return f"Shared {t} IO benchmark" if t else "Shared IO benchmark"


def _saturated_mhz(msmf: dict[str, Any] | None) -> str:
    if not msmf:
        return ""
    vals = [c.get("sm_mhz") for c in msmf.get("gpu0_candidates", []) if c.get("sm_mhz") and not c.get("suspect")]
    vals += [g.get("sm_mhz") for g in msmf.get("per_gpu", []) if g.get("sm_mhz")]
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    return f"{lo:.0f}" if lo == hi else f"{lo:.0f}–{hi:.0f}"


def _fio_rows(rows: list[dict[str, Any]], local_rows: list[dict[str, Any]] | None) -> list[list[str]]:
    grouped = local_rows is None
    lk = {(r["size"], r["rw"]): r for r in (local_rows or [])}
    out = []
    for r in rows:
        cells = [r["size"], r["rw"], f"{r['latency_msec']:.3f}", f"{r['bw_mibps']:_.1f}" if grouped else f"{r['bw_mibps']:.1f}",
                 f"{r['iops_m']:.3f}"]
        if local_rows is not None:
            lr = lk.get((r["size"], r["rw"]))
            cells.append(f"{lr['bw_mibps'] / r['bw_mibps']:.1f}" if lr and r["bw_mibps"] else "")
        out.append(cells)
    return out


def _ar_section(heading: str, sweep: dict[str, Any], plot: str | None, link_spec: float | None, link: str) -> dict[str, Any]:
    rows = sweep["rows"]
    pk = max(rows, key=lambda r: r["busbw_gbps"])
    peak = f"Peak busbw {pk['busbw_gbps']:.1f} GB/s at {gpu_bench.format_iec(pk['bytes'])}"
    if link_spec:
        peak += f", {_pct(pk['busbw_gbps'], link_spec)} of the {link} spec of {link_spec:.0f} GB/s per direction"
    return {"heading": heading, "anchor": slug(heading), "ranks": sweep.get("ranks"),
            "header": ["payload", "time (µs)", "algbw (GB/s)", "busbw (GB/s)"],
            "rows": [[gpu_bench.format_iec(r["bytes"]), f"{r['time_us']:.1f}", f"{r['algbw_gbps']:.1f}", f"{r['busbw_gbps']:.1f}"]
                     for r in rows],
            "peak": peak + ".", "plot": plot,
            "peaks": [dict(peak_of(rows), label="NVLink" if link_spec else "default", disabled=False)]}


def _inter_notes(inter: dict[str, Any], intra: dict[str, Any], env: dict[str, Any], gaps: dict[str, list[str]]) -> str:
    """Seed 003's inter-node content beside the table: the transport and NIC inventory (never a
    busbw denominator), the NCCL path (IB or Socket, NVLS yes/no; a Network gap when the run did
    not record it) and the 1-node all-reduce at the same payload (the scale-out cost)."""
    out = []
    nics = env.get("ib_devices") or []
    if nics:
        out.append("Transport: " + ", ".join(f"{d['name']} {d['rate']}" for d in nics) + " per node (inventory, not a busbw "
                   "denominator).")
    else:
        gaps["network"].append("Inter-node all-reduce benchmark: the inter-node adapters are not checked: needs `ibstat` or "
                               "`rdma link` on every node")
    if inter.get("nccl_path"):
        out.append(f"NCCL path: {inter['nccl_path']}.")
    else:
        gaps["network"].append("Inter-node all-reduce benchmark: the NCCL path (IB or Socket, NVLS yes or no) is not checked: "
                               "needs the run's `NCCL_DEBUG=INFO` lines")
    pk = max(inter["rows"], key=lambda r: r["busbw_gbps"])
    same = next((r for r in intra.get("rows") or [] if r["bytes"] == pk["bytes"]), None)
    if same:
        out.append(f"At the same payload ({gpu_bench.format_iec(pk['bytes'])}) the 1-node all-reduce over {intra.get('ranks')} "
                   f"ranks reached {same['busbw_gbps']:.1f} GB/s.")
    return " ".join(out)


def has_nvlink(topo: str | None) -> bool:
    """Whether ``nvidia-smi topo -m`` shows an NVLink bond (an ``NV<n>`` cell) between GPUs."""
    return any(t.startswith("NV") and t[2:].isdigit() for t in (topo or "").split())


VARIANT_LABELS = {"p2p": "peer-to-peer", "p2p_disabled": "P2P disabled"}


def collective_sweeps(network: dict[str, Any], nvlink: bool = False) -> list[dict[str, Any]]:
    """The per-collective sweeps of ``network.collectives`` as ``gpu_bench.collectives_contrast``
    writes it (``{"p2p": {ranks, env, rows: [{op, bytes, time_us, algbw_gbps, busbw_gbps}]},
    "p2p_disabled": {...}}``), grouped by collective in the order all-reduce, all-gather,
    reduce-scatter: ``[{collective, variants: [{variant, ranks, env, rows}]}]``. ``variant`` is
    ``NVLink`` for ``p2p`` when ``nvlink`` (the topology shows NV links), else ``peer-to-peer``;
    ``env`` keeps only the variables that differ from the first variant's. A variant that
    failed or was skipped (``error`` / ``skipped``, already a Gap) is left out. Raises
    InputError when a variant has neither rows nor an error/skip reason."""
    raw = network.get("collectives") or {}
    if not isinstance(raw, dict):
        raise InputError("network.collectives is not a mapping of variant -> sweep")
    base_env: dict[str, str] | None = None
    by: dict[str, list[dict[str, Any]]] = {}
    for label, sw in raw.items():
        if not isinstance(sw, dict) or sw.get("error") or sw.get("skipped"):
            continue
        if not sw.get("rows"):
            raise InputError(f"collective sweep {label!r} has no rows")
        env = dict(sw.get("env") or {})
        base_env = env if base_env is None else base_env
        diff = {k: v for k, v in env.items() if base_env.get(k) != v}
        name = "NVLink" if (label == "p2p" and nvlink) else VARIANT_LABELS.get(label, label.replace("_", " "))
        ops: dict[str, list[dict[str, Any]]] = {}
        for r in sw["rows"]:
            ops.setdefault(r.get("op", "all_reduce"), []).append(r)
        for op, rows in ops.items():
            by.setdefault(op, []).append({"variant": name, "ranks": sw.get("ranks"), "env": diff, "rows": rows})
    order = [c for c in COLLECTIVE_NAMES if c in by] + [c for c in by if c not in COLLECTIVE_NAMES]
    return [{"collective": c, "variants": by[c]} for c in order]


def _collective_section(c: dict[str, Any], raw_dir: str, link_spec: float | None, link: str) -> dict[str, Any]:
    name = COLLECTIVE_NAMES.get(c["collective"], c["collective"].replace("_", "-"))
    heading = f"Intra-node {name} benchmark"
    variants = c["variants"]
    sizes = sorted({r["bytes"] for v in variants for r in v["rows"]})
    header = ["payload"] + [f"{v.get('variant', 'default')} busbw (GB/s)" for v in variants]
    rows = []
    for b in sizes:
        cells = [gpu_bench.format_iec(b)]
        for v in variants:
            r = next((x for x in v["rows"] if x["bytes"] == b), None)
            cells.append(f"{r['busbw_gbps']:.1f}" if r else "")
        rows.append(cells)
    peaks = []
    for v in variants:
        pk = max(v["rows"], key=lambda r: r["busbw_gbps"])
        env = ", ".join(f"`{k}={val}`" for k, val in (v.get("env") or {}).items())
        txt = f"{v.get('variant', 'default')}{' (' + env + ')' if env else ''}: peak busbw {pk['busbw_gbps']:.1f} GB/s at {gpu_bench.format_iec(pk['bytes'])}"
        if link_spec and "disable" not in str(v.get("variant", "")).lower():
            txt += f", {_pct(pk['busbw_gbps'], link_spec)} of the {link} spec of {link_spec:.0f} GB/s per direction"
        peaks.append(txt)
    pk = [dict(peak_of(v["rows"]), label=v.get("variant", "default")
               + (" (" + ", ".join(f"`{k}={val}`" for k, val in (v.get("env") or {}).items()) + ")" if v.get("env") else ""),
               disabled="disable" in str(v.get("variant", "")).lower()) for v in variants]
    return {"heading": heading, "anchor": slug(heading), "ranks": variants[0].get("ranks"), "header": header, "rows": rows,
            "peak": "; ".join(peaks) + ".", "plot": f"{raw_dir}/busbw-{c['collective']}.png", "collective": c["collective"],
            "peaks": pk}


def report_context(nodes: list[dict[str, Any]], *, raw_dir: str, access: str, inter: dict[str, Any] | None = None,
                   extra_gaps: list[str] | None = None, nccl_env_source: str = "the environment the benchmarks ran in") -> dict[str, Any]:
    """The template variables for the eval results ``nodes`` (``gpu_bench.run_eval`` dicts in
    hostfile order) and the optional inter-node all-reduce ``inter``. See :func:`build_report`."""
    if not nodes or any(n.get("kind") != "eval" for n in nodes):
        raise InputError("build_report needs at least one gpu_bench eval result (kind 'eval')")
    n0 = nodes[0]
    env = n0["env"]
    gpus = env.get("gpus") or []
    ngpu = len(gpus)
    gname = gpus[0]["name"] if gpus else "CPU-only"
    short = gname.replace("NVIDIA ", "").replace("AMD ", "")
    spec, _src = official_tflops(gname) if gpus else (None, "")
    gspec = find_gpu(gname) if gpus else None
    link_spec = gspec.link_gbps_uni if gspec and ngpu > 1 else None
    link = gspec.link if gspec else ""
    gaps: dict[str, list[str]] = {"compute": [], "network": [], "storage": []}
    for n in nodes:
        for g in n.get("gaps", []):
            sec, _, msg = g.partition(": ")
            gaps.setdefault(sec, []).append(msg if len(nodes) == 1 else f"{n['node']}: {msg}")
    net0 = n0.get("network") or {}
    intra = net0.get("intra") or {}
    colls = collective_sweeps(net0, nvlink=has_nvlink(env.get("topo")))
    if intra.get("skipped") and not colls:
        gaps["network"].append(f"Intra-node all-reduce benchmark: {intra['skipped']}, so it did not run")
    comp = n0.get("compute") or {}
    dcgm = comp.get("dcgm") or {}
    if gpus and not dcgm.get("ran"):
        gaps["compute"].insert(0, "Hardware health: `dcgmi diag -r 2` (DCGM, NVIDIA Data Center GPU Manager, which checks GPU "
                               f"memory, memory bandwidth and PCIe) did not run: {dcgm.get('reason', 'it was not part of this run')}")
    for g in extra_gaps or []:
        sec, _, msg = g.partition(": ")
        gaps.setdefault(sec, []).append(msg)
    torch_ver = env.get("torch") or "?"
    if env.get("torch_newest") is not True and not any(f"torch {torch_ver}" in g for sec in gaps.values() for g in sec):
        gaps["compute"].append(f"torch {torch_ver}: whether it was the newest release on its package index at eval time is not "
                               "checked: needs `pip index versions torch --index-url <the CUDA/ROCm index>` run where that index "
                               "is reachable")
    hosts = [n["node"] for n in nodes]
    mamf, msmf, lemon = comp.get("mamf"), comp.get("msmf"), comp.get("lemon")
    st = n0.get("storage") or {}
    local = [r for r in st.get("local", []) if r.get("rows")]
    shared = [r for r in st.get("shared", []) if r.get("rows")]
    if not st.get("shared"):
        gaps["storage"].append("no shared network filesystem was given for this eval, so only the local disk was scanned")
    for r in st.get("local", []) + st.get("shared", []):
        if r.get("scratch_left"):
            gaps["storage"].append(f"fio left scratch behind, moved to {r['scratch_left']}; delete it once checked")
    nccl_env = {k: v for k, v in (env.get("nccl_env") or {}).items() if k.startswith(("NCCL_", "FI_", "AWS_OFI")) and k != "NCCL_VERSION"}

    # ---- network sections (intra all-reduce, per-collective sweeps, inter)
    net_sections: list[dict[str, Any]] = []
    if colls:
        net_sections += [_collective_section(c, raw_dir, link_spec, link) for c in colls]
    elif intra.get("rows"):
        net_sections.append(_ar_section("Intra-node all-reduce benchmark", intra, f"{raw_dir}/busbw-intra.png", link_spec, link))
    inter_ran = bool(inter and inter.get("rows")) and len(nodes) > 1
    if inter_ran:
        sec = _ar_section("Inter-node all-reduce benchmark", inter, f"{raw_dir}/busbw-inter.png", None, "")
        sec["peak"] += " " + _inter_notes(inter, intra, env, gaps)
        net_sections.append(sec)
    nvls = nccl_env.get("NCCL_NVLS_ENABLE")
    nvls_sentence = (f"`NCCL_NVLS_ENABLE={nvls}` was set by {nccl_env_source}." if nvls is not None else
                     "`NCCL_NVLS_ENABLE` was unset, so NCCL chose (auto).")

    # ---- storage
    fs_local = local[0]["fs"] if local else (env.get("filesystems") or [{}])[0]
    partitions, seen = [], set()
    for fs in [fs_local] + [r["fs"] for r in shared]:
        if fs and fs.get("source") not in seen:
            seen.add(fs.get("source"))
            partitions.append([f"`{fs.get('mount')}`", _size(fs.get("size_bytes", 0)), str(fs.get("type")), f"`{fs.get('source')}`"])
    storage_passes = []
    if local or shared:
        first = (local or shared)[0]
        sizes = ", ".join(dict.fromkeys(r["size"] for r in first["rows"]))
        for r in local:
            storage_passes.append(
                f"`fio` (the Debian package, {r.get('fio_version', 'fio')}) on `{r['path']}` (on the `{r['fs'].get('mount')}` disk) — "
                f"{len(r['rows'])} runs of `fio` against one scratch directory: file sizes {sizes}, each read and write; "
                f"{first['numjobs']} parallel jobs, 4 KiB blocks, `{first['engine']}`, `O_DIRECT` (bypasses the page cache, so the "
                f"numbers are the filesystem's, not RAM's), {first['runtime_s']} s of timed IO each."
                + (" This is the baseline of the shared tables' `local/shared ×` column, which divides this disk's bandwidth by "
                   "the shared filesystem's on the same row: how many times slower the shared filesystem is (1 would mean as "
                   "fast)." if shared else ""))
        for r in shared:
            storage_passes.append(f"`fio` on `{r['path']}` — the same runs on the shared filesystem.")

    healthy, under, operator = findings(nodes, spec, local, shared, inter if inter_ran else None, net_sections, link_spec, link)
    ctx: dict[str, Any] = {
        "title": f"Cluster eval: {len(nodes)} node{'s' if len(nodes) > 1 else ''} of " + (f"{ngpu}× {short}" if ngpu else "CPU-only"),
        "datetime": env["datetime_utc"], "access": access, "raw_dir": raw_dir,
        "nodes_line": ", ".join(f"`{h}` (node{i})" for i, h in enumerate(hosts)) + f"; {ngpu} GPU{'s' if ngpu != 1 else ''} per node",
        "hosts": hosts, "gpus": gpus, "ngpu": ngpu, "gname": gname, "spec": spec, "gaps": gaps,
        "dcgm": dcgm, "mamf": mamf, "msmf": msmf, "lemon": lemon,
        "net_sections": net_sections, "nvls_sentence": nvls_sentence, "collectives": bool(colls),
        "partitions": partitions, "storage_passes": storage_passes,
        "local": [{"rows": _fio_rows(local[0]["rows"], None)}] if local else [],
        "shared": [{"heading": _shared_heading(r), "anchor": slug(_shared_heading(r)), "path": r["path"],
                    "rows": _fio_rows(r["rows"], local[0]["rows"] if local else None), "ratio": bool(local)} for r in shared],
        "local_path": local[0]["path"] if local else "",
        "findings": [(name, slug(name), items) for name, items in (("Healthy subsystems", healthy),
                     ("Underperforming subsystems", under), ("Needs operator input", operator)) if items],
    }
    ctx["env_tables"] = _environment(env, gpus, gname, msmf, hosts, local, shared, fs_local, nccl_env, nccl_env_source)
    ctx["compute_intro"] = _compute_intro(gpus, gname, spec, msmf) if gpus else None
    ctx["perf"] = _perf(nodes, spec, gname) if mamf else None
    ctx["lemon_view"] = _lemon_view(nodes) if lemon else None
    ctx["toc"] = _toc(ctx)
    return ctx


def _environment(env, gpus, gname, msmf, hosts, local, shared, fs_local, nccl_env, nccl_env_source) -> list[dict[str, Any]]:
    host = [("OS", env.get("os", "")), ("hostname", ", ".join(f"`{h}`" for h in hosts)), ("kernel", env.get("kernel", "")),
            ("CPU cores / NUMA (non-uniform memory access) domains",
             f"{env.get('nproc')} cores ({env.get('cpu_model', '')}) / {env.get('numa_nodes')}")]
    if env.get("mem_total_bytes"):
        host.append(("host RAM", _gib(env["mem_total_bytes"])))
    if gpus and gpus[0].get("pcie_gen_max"):
        host.append(("PCIe to each GPU", f"Gen{gpus[0]['pcie_gen_max']} ×{gpus[0].get('pcie_width_max', '?')}"))
    gpu: list[tuple[str, str]] = []
    if gpus:
        g0 = gpus[0]
        sat = _saturated_mhz(msmf)
        clocks = [f"boost {g0['max_sm_mhz']:.0f} MHz" if g0.get("max_sm_mhz") else None,
                  f"saturated {sat} MHz (dense matmul at the power limit)" if sat else None,
                  f"parked idle {g0['idle_sm_mhz']:.0f} MHz" if g0.get("idle_sm_mhz") else None]
        gpu = [("GPU × count per node", f"{gname} × {len(gpus)}"),
               ("compute capability / SM (streaming multiprocessor) count", f"{g0.get('capability')} / {g0.get('sm_count')}"),
               ("HBM (high-bandwidth memory)", _gib(g0["memory_total_bytes"])),
               ("driver / CUDA", f"{g0.get('driver', '')} / {env.get('cuda') or env.get('hip')}"),
               ("SM clocks", ", ".join(c for c in clocks if c))]
        if g0.get("power_limit_w"):
            gpu.append(("power limit (TDP, thermal design power) / idle draw", f"{g0['power_limit_w']:.0f} W / {g0.get('idle_power_w', 0):.0f} W"))
    topo = env.get("topo") or ""
    nv = sorted({t for t in topo.split() if t.startswith("NV") and t[2:].isdigit()})
    if len(gpus) > 1:
        fabric = [("intra-node", "NVLink (" + ", ".join(nv) + " in `nvidia-smi topo -m`)" if nv else "PCIe (`nvidia-smi topo -m` shows no NVLink)")]
        gs = find_gpu(gname)
        if gs and nv:
            fabric[0] = ("intra-node", fabric[0][1] + f", {gs.link} spec {gs.link_gbps_uni:.0f} GB/s per direction per GPU")
    elif gpus:
        fabric = [("intra-node", "one GPU per node, so no GPU-to-GPU link")]
    else:
        fabric = [("intra-node", "no GPU on this node, so no GPU-to-GPU link")]
    if env.get("ib_devices"):
        fabric.append(("inter-node adapters", ", ".join(f"{d['name']} {d['rate']}" for d in env["ib_devices"])))
    fss = []
    if fs_local:
        fss.append(("Local", f"`{fs_local.get('mount')}`, {_size(fs_local.get('size_bytes', 0))} ({fs_local.get('type')})"))
    for r in shared:
        fss.append(("Shared network FS", f"`{r['fs'].get('mount')}`, {_size(r['fs'].get('size_bytes', 0))} ({r['fs'].get('type')})"))
    sw = [("Python", env.get("python")),
          ("torch", str(env.get("torch")) + (" (the newest release on its package index at eval time)"
                                             if env.get("torch_newest") is True else ""))]
    if env.get("nccl"):
        sw.append(("NCCL (NVIDIA Collective Communications Library)", env["nccl"]))
    if nccl_env:
        sw.append(("NCCL environment", ", ".join(f"`{k}={v}`" for k, v in nccl_env.items()) + f", set by {nccl_env_source}"))
    out = [{"name": "Host", "header": ["field", "value"], "rows": host}]
    out.append({"name": "GPU", "header": ["field", "value"], "rows": gpu, "empty": "This node has no GPU visible to torch."})
    out.append({"name": "Fabric", "header": ["link", "inventory"], "rows": fabric})
    out.append({"name": "Filesystems", "header": ["filesystem", "value"], "rows": fss})
    out.append({"name": "Software", "header": ["component", "version"], "rows": sw})
    return out


def _compute_intro(gpus, gname, spec, msmf) -> dict[str, Any]:
    g0 = gpus[0]
    gs = find_gpu(gname)
    spec_txt = (f", official dense BF16 peak {spec:.0f} TFLOPS ({gs.name} datasheet; see the [TFLOPS comparison table]({TFLOPS_TABLE}))"
                if spec else "")
    line = (f"Each node has {len(gpus)}× {gname}: {g0.get('sm_count')} SMs, {_gib(g0['memory_total_bytes'])} of HBM"
            + (f", TDP {g0['power_limit_w']:.0f} W" if g0.get("power_limit_w") else "") + spec_txt + ".")
    return {"line": line, "msmf_seconds": f"{msmf['seconds']:.0f}" if msmf else "10"}


def _perf(nodes, spec, gname) -> dict[str, Any]:
    n0 = nodes[0]["compute"]
    mamf, msmf = n0["mamf"], n0.get("msmf")
    ngpu = len(nodes[0]["env"].get("gpus") or [])
    dims = ", ".join(str(d) for d in mamf["dims"])
    method = ("Compute is measured by timing matrix multiplication. How fast a `matmul` runs depends on its matmul shape (the "
              f"M×N×K dimensions), so the script searches: GPU0 timed {mamf['tried']} matmul shapes, every combination of M, N and K "
              f"from {{{dims}}}, each for at least 10 back-to-back calls and 20 ms. ")
    if msmf:
        method += (f"It then ran {len(msmf['gpu0_candidates'])} candidate shapes (the fastest large ones, plus 8192³ and 16384³) back "
                   f"to back for {msmf['seconds']:.0f} s each and selected the fastest that held the board within 10% of its power limit"
                   + (", while every other GPU of the node ran a continuous matmul; every other GPU then measured that winning shape "
                      "the same way." if msmf.get("siblings_busy") else
                      "; this node's only GPU had no siblings to keep busy during that run."))
    best = mamf["best"]
    wm = f", {best['power_w']:.0f} W / {best['sm_mhz']:.0f} MHz" if best.get("power_w") and best.get("sm_mhz") else ""
    mamf_b = (f"**MAMF** — highest TFLOPS reached by any matmul shape on GPU0: **{best['tflops']:.0f} TFLOPS** at {_shape(best['shape'])}"
              + wm + (f", {_pct(round(best['tflops']), spec)} of spec" if spec else "")
              + ". A short burst at boost clock with the board under its power limit: a ceiling, not a rate any sustained workload holds.")
    out: dict[str, Any] = {"method": method.strip(), "vs": f"Two numbers vs official BF16 TFLOPS on {gname}" + (f" ({spec:.0f} TFLOPS)" if spec else "") + ":",
                           "bullets": [mamf_b], "table": None, "after": []}
    if msmf:
        allv = [g["tflops"] for n in nodes for g in n["compute"]["msmf"]["per_gpu"]]
        node_msmf = min(allv)
        win = next(c for c in msmf["gpu0_candidates"] if c["shape"] == msmf["shape"])
        out["bullets"].append(
            "**MSMF** — best rate that survives once the shape pins the board at its power limit and the clock settles: "
            f"**{round(node_msmf)} TFLOPS**" + (f" ({_pct(round(node_msmf), spec)} of spec)" if spec else "")
            + f" at {_shape(msmf['shape'])}, {win['power_w']:.0f} W / {win['sm_mhz']:.0f} MHz on GPU0. "
            + ("The node figure is the slowest GPU, since synchronous work runs at its pace. " if ngpu > 1 else
               "This is the node's only GPU, so there is no median or spread. ") + "Compare a sustained workload to this number.")
        header = ["node", "GPU", "MSMF (TFLOPS)", "MSMF shape", "W / MHz"] + (["MSMF % spec"] if spec else [])
        align = ["---", "---:", "---:", "---", "---"] + (["---:"] if spec else [])
        rows = []
        for n in nodes:
            for g in n["compute"]["msmf"]["per_gpu"]:
                t = round(g["tflops"])
                wmh = f"{g['power_w']:.0f} / {g['sm_mhz']:.0f}" if g.get("power_w") and g.get("sm_mhz") else "unread"
                rows.append([f"`{n['node']}`", str(g["gpu"]), str(t), _shape(n["compute"]["msmf"]["shape"]), wmh]
                            + ([_pct(t, spec)] if spec else []))
        out["table"] = {"header": header, "align": align, "rows": rows}
        if len(allv) > 1:
            out["after"].append(f"Node MSMF (slowest GPU) {round(min(allv))} TFLOPS; median {round(statistics.median(allv))} TFLOPS; "
                                f"spread {round(max(allv) - min(allv))} TFLOPS.")
        for i, n in enumerate(nodes):
            for g in n["compute"]["msmf"]["per_gpu"]:
                if g.get("idle_siblings"):
                    out["after"].append(f"{gpu_label(n['node'], i, g['gpu'])} saw idle siblings during its sustained run, so its MSMF reads high.")
        out["after"].append("The shape column is the M×N×K that won the sustained regime; W / MHz is the board power and SM clock "
                            "NVML read while it ran.")
    return out


def _lemon_view(nodes) -> dict[str, Any]:
    lem0 = nodes[0]["compute"]["lemon"]
    slow = [(i, n["node"], g) for i, n in enumerate(nodes) for g in n["compute"].get("lemon", {}).get("slow", [])]
    dead = [(i, n["node"], g) for i, n in enumerate(nodes) for g in n["compute"].get("lemon", {}).get("dead", [])]
    if not slow and not dead:
        tldr = "**TLDR: no under-performing or dead GPUs**"
    else:
        parts = []
        if slow:
            parts.append("under-performing: " + ", ".join(gpu_label(h, i, g) for i, h, g in slow))
        if dead:
            parts.append("dead: " + ", ".join(gpu_label(h, i, g) for i, h, g in dead))
        tldr = "**TLDR: " + "; ".join(parts) + "**"
    ng = len(lem0["passes"][0])
    rows, notes = [], []
    for n in nodes:
        for p, row in enumerate((n["compute"].get("lemon") or {}).get("passes", []), 1):
            vals = [v for v in row if v is not None]
            if not vals:
                continue
            mn = min(vals)
            rows.append([f"`{n['node']}`", str(p)] + [f"{v:.0f}" if v is not None else "failed" for v in row]
                        + [f"{mn:.0f} (gpu{row.index(mn)})", f"{max(vals):.0f}"])
    for i, n in enumerate(nodes):
        lem = n["compute"].get("lemon") or {}
        meds = lem.get("medians") or []
        for g in range(ng):
            dips = [p for p, row in enumerate(lem.get("passes", [])) if row[g] is not None and meds[p] and row[g] < 0.98 * meds[p]]
            if dips and g not in lem.get("slow", []):
                nums = " / ".join(f"{row[g]:.0f}" for row in lem["passes"])
                notes.append(f"{gpu_label(n['node'], i, g)} dipped more than 2% below the node median in {len(dips)} of 3 passes "
                             f"({nums} TFLOPS), which did not repeat in all three, so it is not flagged.")
    return {"tldr": tldr, "dim": lem0["dim"], "iters": lem0["iters"], "sms": lem0["sms"], "ctas": lem0["ctas"],
            "waves": lem0["waves"], "tail": lem0["tail"], "eff": f"{100 * lem0['wave_efficiency']:.1f}",
            "header": ["node", "pass"] + [f"gpu{g} (TFLOPS)" for g in range(ng)] + ["min (gpu)", "max (TFLOPS)"],
            "align": ["---", "---:"] + ["---:"] * ng + ["---", "---:"], "rows": rows, "notes": notes}


def _toc(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """Numbered TOC items ``{label, anchor, note, children}``: only what ran, plus inventory."""
    toc = [{"label": "Environment", "anchor": "environment", "note": "host, GPU, fabric, filesystems, software (inventory, not a bench)",
            "children": []}]
    comp = []
    if ctx["dcgm"].get("ran"):
        comp.append({"label": "Hardware health", "anchor": "hardware-health", "note": "`dcgmi diag -r 2`"})
    if ctx["perf"]:
        comp.append({"label": "GPU performance benchmarks", "anchor": "gpu-performance-benchmarks",
                     "note": "`gpu_bench.py` matmul shape search on GPU0, then a sustained matmul on every GPU"})
    if ctx["lemon_view"]:
        comp.append({"label": "Find underperforming GPUs", "anchor": "find-underperforming-gpus",
                     "note": f"fixed {ctx['lemon_view']['dim']}³ `matmul` on every GPU"})
    if comp:
        toc.append({"label": "Compute", "anchor": "compute", "note": "", "children": comp})
    net = [{"label": s["heading"], "anchor": s["anchor"], "note": f"`gpu_bench.py`, {s['ranks']} ranks"} for s in ctx["net_sections"]]
    if net:
        toc.append({"label": "Network", "anchor": "network", "note": "", "children": net})
    sto = [{"label": "Existing Partitions", "anchor": "existing-partitions", "note": "mount inventory"}]
    if ctx["local"]:
        sto.append({"label": "Local disk IO benchmark", "anchor": "local-disk-io-benchmark", "note": f"`fio` on `{ctx['local_path']}`"})
    for s in ctx["shared"]:
        sto.append({"label": s["heading"], "anchor": s["anchor"], "note": f"`fio` on `{s['path']}`"})
    toc.append({"label": "Storage", "anchor": "storage", "note": "", "children": sto})
    toc.append({"label": "Findings", "anchor": "findings", "note": "",
                "children": [{"label": name, "anchor": a, "note": ""} for name, a, _ in ctx["findings"]]})
    return toc


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)


def build_report(nodes: list[dict[str, Any]], *, raw_dir: str, access: str, inter: dict[str, Any] | None = None,
                 extra_gaps: list[str] | None = None, nccl_env_source: str = "the environment the benchmarks ran in") -> str:
    """The markdown report for the per-node eval results ``nodes`` (``gpu_bench.run_eval``
    dicts, in the order the nodes were given) and the optional inter-node all-reduce ``inter``.

    ``raw_dir`` is the relative raw-artifact directory (``raw-<datetime>``); ``access`` says how
    commands reached the nodes; ``extra_gaps`` are ``"compute: ..."`` / ``"network: ..."`` /
    ``"storage: ..."`` lines the caller knows about; ``nccl_env_source`` names who set the NCCL
    variables (the container image, the cluster's module). ``network.collectives`` (2-GPU
    all-reduce / all-gather / reduce-scatter sweeps, NVLink and P2P-disabled) replaces the single
    intra-node all-reduce when present. Raises InputError when ``nodes`` is empty or not eval
    results."""
    ctx = report_context(nodes, raw_dir=raw_dir, access=access, inter=inter, extra_gaps=extra_gaps, nccl_env_source=nccl_env_source)
    text = _env().get_template("eval_report.md.j2").render(**ctx)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.rstrip() + "\n"
