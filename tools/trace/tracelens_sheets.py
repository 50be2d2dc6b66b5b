"""The rest of TraceLens's PyTorch perf report, in its current layout, from the engine's one read:
``ops_summary``, ``ops_unique_args`` (op + input shapes), ``unified_perf_summary``, the per-category
roofline sheets (``GEMM``, ``SDPA_fwd``, ``SDPA_bwd``, ``CONV_fwd``, ``CONV_bwd``,
``UnaryElementwise``, ``BinaryElementwise``) and ``short_kernels_summary`` grouped by input shapes,
so that ``TraceLens_compare_perf_reports_pytorch --sheets all`` reads a folder of our CSVs beside
TraceLens's own (``gpu_timeline``, ``ops_summary_by_category`` and ``kernel_summary`` are
:mod:`.tables`).

Read in AMD-AGI/TraceLens (commit 171dd747, ``TraceLens/TreePerf/tree_perf.py``,
``TraceLens/Reporting/generate_perf_report_pytorch.py``, ``TraceLens/PerfModel/perf_model.py``) and
re-written over the scan's arrays:

- a kernel launcher is the innermost ``cpu_op`` around the launch call (the engine's
  :func:`~.engine.launchers`), or the runtime call itself when no ``cpu_op`` encloses it;
  communication kernels are not launched by anything here (``get_kernel_launchers``);
- ``total_direct_kernel_time``: the busy time (interval union) of a launcher's own GPU events;
  ``total_subtree_kernel_time``: of every GPU event launched inside the op, on its thread and within
  its time span (its subtree in TraceLens's call tree);
- ``ops_summary`` groups launchers by name; ``ops_unique_args`` by name, category, process, thread
  and the four argument columns (``Input Dims``, ``Input type``, ``Input Strides``,
  ``Concrete Inputs``) as TraceLens writes them (nested tuples); statistics are pandas' (``std``
  with ddof 1, empty for one value);
- roofline sheets: every op of the sheet's names (launcher or not), its kernel time the busy time
  of its subtree, its FLOPs and bytes from TraceLens's perf model for that op (``aten::mm``,
  ``addmm``, ``bmm``, ``baddbmm``: 2MNK (+MN bias), (MK + KN + MN (+N)) x bytes per element;
  ``aten::_scaled_dot_product_{flash,efficient,cudnn}_attention``: 4·B·H·N_Q·N_KV·d (halved when
  causal), Q + K + V + O x 2 bytes; unary elementwise n FLOPs, n·(in + out) bytes; binary: the
  broadcast output's n FLOPs, in1 + in2 + out bytes); grouped by name and the ``param:`` columns;
  ``SDPA_bwd`` and the CONV sheets carry the layout and no rows (their models are not re-written);
- ``short_kernels_summary``: ``kernel`` events under 10 µs grouped by parent ``cpu_op``, its
  ``Input Dims`` / ``Input Strides`` / ``Concrete Inputs`` and the kernel name; like pandas'
  ``groupby`` (dropna), a kernel whose op has no recorded shapes, or no op, is left out.

The argument columns are not in the scan: :class:`OpArgsCollector` (a ``feed(event)`` consumer of
the same read) keeps one interned signature per ``cpu_op`` and joins the scan's ops on their event
ordinal (``op_order``), checked against their start times.
"""

from __future__ import annotations

import statistics
from array import array
from typing import Any, Iterator

import numpy as np

from .categories import categorize_op
from .engine import SHORT_KERNEL_US, launch_index
from .scan import sorted_unique
from .stream import CLS_COMM, KIND_KERNEL, TraceScan, tracelens_classes, union_length
from .tracelens_models import MODELS, ROOFLINE_PARAMS, ROOFLINE_SHEETS, sheet_present

from .op_args import ARG_KEYS, OpArgsCollector, _tup  # noqa: F401 - the collector of the engine's read


OPS_SUMMARY_COLUMNS = ("name", "total_direct_kernel_time_sum", "total_subtree_kernel_time_sum",
                       "total_direct_kernel_time_ms", "total_subtree_kernel_time_ms", "Count", "Categories",
                       "Percentage (%)", "Cumulative Percentage (%)")
"""``get_df_kernel_launchers_summary`` (TreePerfAnalyzer), with its direct/subtree column pairing."""

_STATS = ("mean", "median", "std", "min", "max")
OPS_UNIQUE_ARGS_COLUMNS = (("name", "op category", "process_name", "process_label", "thread_name", "Input Dims",
                            "Input type", "Input Strides", "Concrete Inputs", "operation_count") +
                           tuple(f"total_{w}_kernel_time_{s}" for s in (*_STATS, "sum") for w in ("direct", "subtree")) +
                           ("ex_UID", "kernel_details_summary", "trunc_kernel_details", "Percentage (%)",
                            "Cumulative Percentage (%)"))
"""``get_df_kernel_launchers_unique_args(agg_metrics=[mean, median, std, min, max], include_pct=True)``
plus ``trunc_kernel_details`` (generate_perf_report_pytorch)."""

UNIFIED_COLUMNS = ("name", "op category", "process_name", "process_label", "thread_name", "Input Dims", "Input type",
                   "Input Strides", "Concrete Inputs", "ex_UID", "operation_count", "total_duration_us",
                   "mean_duration_us", "std_duration_us", "GFLOPS", "Data Moved (MB)", "FLOPS/Byte", "Compute Spec",
                   "TB/s_mean", "TB/s_std", "TFLOPS/s_mean", "TFLOPS/s_std", "Kernel Time (µs)_mean",
                   "Kernel Time (µs)_std", "Kernel Time (µs)_sum", "duration_us_median", "duration_us_min",
                   "duration_us_max", "TB/s_median", "TB/s_min", "TB/s_max", "TFLOPS/s_median", "TFLOPS/s_min",
                   "TFLOPS/s_max", "Kernel Time (µs)_median", "Kernel Time (µs)_min", "Kernel Time (µs)_max",
                   "kernel_details_summary", "trunc_kernel_details", "perf_params", "has_perf_model",
                   "Percentage (%)", "Cumulative Percentage (%)")
"""``summarize_df_unified_perf_table`` over the kernel launchers (TraceLens also lists modelled
non-leaf ops there; ours are in the roofline sheets)."""

ROOFLINE_TAIL = (("GFLOPS_first", "Data Moved (MB)_first", "FLOPS/Byte_first") +
                 tuple(f"{m}_{s}" for m in ("TB/s", "TFLOPS/s") for s in _STATS) +
                 ("process_name_first", "process_label_first", "thread_name_first", "Compute Spec",
                  "kernel_details__summarize_kernel_stats", "trunc_kernel_details", "Input Dims_first",
                  "Input type_first", "Input Strides_first", "Concrete Inputs_first") +
                 tuple(f"Kernel Time (µs)_{s}" for s in (*_STATS, "sum")) + ("name_count", "UID_first"))
"""``summarize_df_perf_metrics`` columns after ``name`` and the params."""

SHORT_COLUMNS = ("Parent cpu_op", "Input dims", "Input strides", "Concrete Inputs", "Kernel name",
                 "Short Kernel duration (µs) sum", "Short Kernel count", "Short Kernel duration (µs) mean",
                 "Short Kernel duration (µs) percent of total time")
"""``get_dfs_short_kernels`` (generate_perf_report_pytorch)."""

def _stat(vals: list[float], s: str) -> float | None:
    """pandas' aggregate ``s`` of ``vals`` (``std``: ddof 1, None for one value)."""
    if not vals:
        return None
    if s == "mean":
        return statistics.fmean(vals)
    if s == "median":
        return float(statistics.median(vals))
    if s == "std":
        return statistics.stdev(vals) if len(vals) > 1 else None
    if s == "min":
        return min(vals)
    if s == "max":
        return max(vals)
    return float(sum(vals))


def _kernel_summary(lists: list[list[dict]]) -> tuple[str, str]:
    """TraceLens's ``_summarize_kernel_stats`` (agg mean, median, std, min, max) of the per-instance
    kernel lists, and its 64-character ``trunc_kernel_details``, as the strings its CSVs hold."""
    template = next((k for k in lists if k), None)
    if template is None:
        return "[]", ""
    durs: list[list[float]] = [[] for _ in template]
    for ks in lists:
        if len(ks) == len(template):
            for i, k in enumerate(ks):
                durs[i].append(k["dur"])
    return _kernel_rows([k["name"] for k in template], [k["stream"] for k in template],
                        [np.asarray(d, dtype=float) for d in durs])


def _kernel_rows(names: list[str], streams: list[int], durs: list[np.ndarray]) -> tuple[str, str]:
    """:func:`_kernel_summary`'s strings from the template's kernel names and streams and, per
    kernel, its durations over the instances (µs, float64)."""
    out = []
    for name, stream, arr in zip(names, streams, durs):
        out.append({"name": name, "stream": stream, "count": len(arr), "total_duration_us": float(arr.sum()),
                    "mean_duration_us": float(arr.mean()), "median_duration_us": float(np.median(arr)),
                    "std_dev_duration_us": float(arr.std()), "min_duration_us": float(arr.min()),
                    "max_duration_us": float(arr.max())})
    out.sort(key=lambda k: (k["total_duration_us"], k["name"]))
    trunc = [{"name": k["name"][:64] + "..." if len(k["name"]) > 64 else k["name"], "stream": k["stream"],
              "mean_duration_us": round(k["mean_duration_us"], 2)} for k in out]
    return str(out), str(trunc)


# --------------------------------------------------------------------------- the call tree, by time


class _Tree:
    """Which GPU events each ``cpu_op`` launched, directly (the engine's launcher) and in its
    subtree (launch calls on its thread inside its span), and their busy times."""

    def __init__(self, scan: TraceScan, keep: dict[str, Any]) -> None:
        self.scan = scan
        self.li = launch_index(scan)
        self.launcher = np.asarray(keep["launcher"])
        self.comm = tracelens_classes(scan) == CLS_COMM
        self.start = scan.ts
        self.end = scan.ts + scan.dur
        has = np.flatnonzero(self.li >= 0)
        order = has[np.argsort(self.li[has], kind="stable")]
        self._ev_by_launch = order
        self._launch_keys = self.li[order]
        self._per_thread: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._lo: np.ndarray | None = None
        self._hi: np.ndarray | None = None
        if scan.launch_ts is not None and scan.launch_ts.size:
            lorder = np.lexsort((scan.launch_ts, scan.launch_thread))
            thr = scan.launch_thread[lorder]
            cuts = np.flatnonzero(np.diff(thr)) + 1
            for part in np.split(lorder, cuts):
                self._per_thread[int(scan.launch_thread[part[0]])] = (scan.launch_ts[part], part)

    def events_of_launches(self, launches: np.ndarray) -> np.ndarray:
        """The GPU events (indices) of the launch calls ``launches``, launch by launch."""
        if self._lo is None:  # every launch call's run in the events sorted by launch, found once
            n = int(self._launch_keys[-1]) + 1 if self._launch_keys.size else 0
            ids = np.arange(n)
            self._lo = np.searchsorted(self._launch_keys, ids, "left")
            self._hi = np.searchsorted(self._launch_keys, ids, "right")
        ok = launches < self._lo.size
        lo, hi = self._lo[launches[ok]], self._hi[launches[ok]]
        if lo.size == 1:
            return self._ev_by_launch[lo[0]:hi[0]]
        ev = self._ev_by_launch
        return np.concatenate([ev[a:b] for a, b in zip(lo.tolist(), hi.tolist())]) if lo.size else \
            np.zeros(0, np.int64)

    def subtree(self, op: int) -> np.ndarray:
        """The GPU events launched on ``op``'s thread inside its span (its subtree)."""
        sc = self.scan
        got = self._per_thread.get(int(sc.op_thread[op]))
        if got is None:
            return np.zeros(0, np.int64)
        ts, ids = got
        a, b = np.searchsorted(ts, sc.op_ts[op], "left"), np.searchsorted(ts, sc.op_end[op], "right")
        return self.events_of_launches(ids[a:b])

    def subtrees(self, ops: np.ndarray) -> Iterator[np.ndarray]:
        """:meth:`subtree` of each of ``ops`` (cpu_op indices), in turn (one in memory at a time), the
        binary searches thread by thread over all of them at once."""
        sc = self.scan
        th = sc.op_thread[ops]
        a = np.zeros(ops.size, dtype=np.int64)
        b = np.zeros(ops.size, dtype=np.int64)
        ids_of: list[np.ndarray | None] = [None] * ops.size
        for t in sorted_unique(th).tolist():
            got = self._per_thread.get(int(t))
            if got is None:
                continue
            m = np.flatnonzero(th == t)
            ts, ids = got
            a[m] = np.searchsorted(ts, sc.op_ts[ops[m]], "left")
            b[m] = np.searchsorted(ts, sc.op_end[ops[m]], "right")
            for j in m.tolist():
                ids_of[j] = ids
        for ids, x, y in zip(ids_of, a.tolist(), b.tolist()):
            yield np.zeros(0, np.int64) if ids is None else self.events_of_launches(ids[x:y])

    def busy(self, ev: np.ndarray) -> float:
        if ev.size == 0:
            return 0.0
        if ev.size == 1:
            return float(self.end[ev[0]] - self.start[ev[0]])
        return union_length(self.start[ev], self.end[ev])

    def summary(self, groups: list[np.ndarray]) -> tuple[str, str]:
        """:func:`_kernel_summary` of GPU-event index arrays (each in start order), one per instance."""
        sc = self.scan
        template = next((ev for ev in groups if ev.size), None)
        if template is None:
            return _kernel_summary([])
        # the instances as long as the first (the others are left out), durations by position: one
        # row per kernel of the template, one column per instance (no dict per event)
        same = [ev for ev in groups if ev.size == template.size]
        durs = np.stack([np.asarray(sc.dur[ev], dtype=np.float64) for ev in same], axis=1)
        names = [sc.names[i] for i in sc.name_id[template].tolist()]
        return _kernel_rows(names, sc.stream[template].tolist(), list(durs))


# --------------------------------------------------------------------------- the sheets


class _Args:
    """Parsed argument columns per signature id (the collector keeps their TraceLens strings)."""

    def __init__(self, col: OpArgsCollector) -> None:
        self.col, self._parsed = col, {}

    def strings(self, sid: int) -> tuple:
        return self.col.sigs[sid]

    def parsed(self, sid: int) -> tuple:
        got = self._parsed.get(sid)
        if got is None:
            import ast

            vals = []
            for s in self.col.sigs[sid]:
                try:
                    vals.append(ast.literal_eval(s) if s is not None else None)
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    vals.append(None)
            got = self._parsed[sid] = tuple(vals)
        return got


def _lists(v: Any) -> Any:
    return [_lists(x) for x in v] if isinstance(v, tuple) else v


class _Launcher:
    """One kernel launcher's record, read by key like a dict (``r["direct"]``): the fields of
    :func:`_launcher_rows`' docstring in slots (a 10^5-10^6 launcher trace holds one per launcher:
    ~100 bytes each instead of a dict's ~650)."""

    __slots__ = ("name", "category", "thread", "sig", "direct", "subtree", "_ev", "_a", "_b", "uid", "ts", "cpu_dur")

    def __init__(self, name: str, category: str, thread: int, sig: int, direct: float, subtree: float,
                 ev: np.ndarray, a: int, b: int, uid: int, ts: float, cpu_dur: float) -> None:
        self.name, self.category, self.thread, self.sig = name, category, thread, sig
        self.direct, self.subtree = direct, subtree
        self._ev, self._a, self._b = ev, a, b  # its GPU events: ``ev[a:b]`` (one array shared by all)
        self.uid, self.ts, self.cpu_dur = uid, ts, cpu_dur

    @property
    def kernels(self) -> np.ndarray:
        """The launcher's GPU events (indices into the scan), in start order."""
        return self._ev[self._a:self._b]

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


def _launcher_rows(tree: _Tree, linked: np.ndarray, sig: np.ndarray, thr: np.ndarray,
                   lthr: np.ndarray) -> list[_Launcher]:
    """One record per kernel launcher (see the module docstring), in order of CPU start."""
    sc = tree.scan
    sel = np.flatnonzero(linked & ~tree.comm & (tree.li >= 0))
    rows = []
    for key_arr, is_op in ((tree.launcher[sel], True), (tree.li[sel], False)):  # a cpu_op, else the launch call
        mask = (tree.launcher[sel] >= 0) if is_op else (tree.launcher[sel] < 0)
        ev, keys = sel[mask], key_arr[mask]
        order = np.lexsort((sc.ts[ev], keys))
        ev, keys = ev[order], keys[order]
        cuts = np.flatnonzero(np.diff(keys)) + 1
        bounds = np.concatenate([[0], cuts, [ev.size]]).astype(np.int64) if ev.size else np.zeros(1, np.int64)
        subs = tree.subtrees(keys[bounds[:-1]]) if is_op else None
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            part = ev[a:b]  # one launcher's events, already in start order (the lexsort's second key)
            k = int(keys[a])
            if is_op:
                name = sc.cpu_names[int(sc.op_name[k])]
                sub = tree.busy(next(subs))  # type: ignore[arg-type]
                t0, t1, uid, th, sid = float(sc.op_ts[k]), float(sc.op_end[k]), int(sc.op_order[k]), int(thr[k]), int(sig[k])
            else:
                name = sc.cpu_names[int(sc.launch_name[k])]
                sub = None
                t0, t1, uid, th, sid = (float(sc.launch_ts[k]), float(sc.launch_end[k]), int(sc.launch_order[k]),
                                        int(lthr[k]), -1)
            direct = tree.busy(part)
            first = sc.names[int(sc.name_id[part[0]])]
            rows.append(_Launcher(name, categorize_op(name, first), th, sid, direct, direct if sub is None else sub,
                                  ev, a, b, uid, t0, t1 - t0))
    rows.sort(key=lambda r: (r.ts, r.uid))
    return rows


def _pct(rows: list[dict[str, Any]], col: str) -> None:
    total = sum(r[col] or 0.0 for r in rows)
    cum = 0.0
    for r in rows:
        r["Percentage (%)"] = (r[col] or 0.0) / total * 100.0 if total else float("nan")
        cum += r["Percentage (%)"]
        r["Cumulative Percentage (%)"] = cum


def ops_summary(launchers: list[_Launcher]) -> list[dict[str, Any]]:
    """``ops_summary.csv`` rows (:data:`OPS_SUMMARY_COLUMNS`), largest direct kernel time first."""
    g: dict[str, dict[str, Any]] = {}
    for r in launchers:
        x = g.setdefault(r.name, {"name": r.name, "d": 0.0, "s": 0.0, "n": 0, "cats": set()})
        x["d"] += r.direct
        x["s"] += r.subtree
        x["n"] += 1
        x["cats"].add(r.category)
    rows = [{"name": x["name"], "total_direct_kernel_time_sum": x["d"], "total_subtree_kernel_time_sum": x["s"],
             "total_direct_kernel_time_ms": x["d"] / 1e3, "total_subtree_kernel_time_ms": x["s"] / 1e3,
             "Count": x["n"], "Categories": str(sorted(x["cats"]))}
            for x in sorted(g.values(), key=lambda x: (-x["d"], x["name"]))]
    _pct(rows, "total_direct_kernel_time_sum")
    return rows


def _by_unique_args(launchers: list[_Launcher], col: OpArgsCollector,
                    args: _Args) -> dict[tuple, list[_Launcher]]:
    """Launchers grouped by (name, category, process, label, thread, the four argument strings), in
    order of first appearance (pandas ``groupby(sort=False)``)."""
    groups: dict[tuple, list[_Launcher]] = {}
    none4 = (None,) * 4
    names: dict[int, tuple] = {}  # thread -> its (process, label, thread) names, asked once per thread
    for r in launchers:
        strs = args.strings(r.sig) if r.sig >= 0 else none4
        who = names.get(r.thread)
        if who is None:
            who = names[r.thread] = tuple(col.names(r.thread))
        groups.setdefault((r.name, r.category, *who, *strs), []).append(r)
    return groups


class _Groups:
    """The launchers grouped by unique arguments (:func:`_by_unique_args`) and each group's kernel
    summary (:meth:`_Tree.summary`), made once for the two sheets that read them
    (``ops_unique_args`` and ``unified_perf_summary``)."""

    def __init__(self, tree: _Tree, launchers: list[_Launcher], col: OpArgsCollector, args: _Args) -> None:
        self.by_args = _by_unique_args(launchers, col, args)
        self._tree = tree
        self._summary: dict[tuple, tuple[str, str]] = {}

    def summary(self, key: tuple) -> tuple[str, str]:
        got = self._summary.get(key)
        if got is None:
            got = self._summary[key] = self._tree.summary([x.kernels for x in self.by_args[key]])
        return got


def ops_unique_args(tree: _Tree, launchers: list[_Launcher], col: OpArgsCollector,
                    args: _Args, groups: _Groups | None = None) -> list[dict[str, Any]]:
    """``ops_unique_args.csv`` rows (:data:`OPS_UNIQUE_ARGS_COLUMNS`); ``groups``: the launchers'
    groups when already made (:class:`_Groups`)."""
    groups = groups or _Groups(tree, launchers, col, args)
    rows = []
    for key, rs in groups.by_args.items():
        row = dict(zip(OPS_UNIQUE_ARGS_COLUMNS[:9], key))
        row["operation_count"] = len(rs)
        for w, vals in (("direct", [x.direct for x in rs]), ("subtree", [x.subtree for x in rs])):
            for s in (*_STATS, "sum"):
                row[f"total_{w}_kernel_time_{s}"] = _stat(vals, s)
        row["ex_UID"] = rs[0].uid
        row["kernel_details_summary"], row["trunc_kernel_details"] = groups.summary(key)
        rows.append(row)
    rows.sort(key=lambda r: (-r["total_direct_kernel_time_sum"], r["ex_UID"]))
    _pct(rows, "total_direct_kernel_time_sum")
    return rows


def _model(name: str, sid: int, args: _Args) -> tuple | None:
    m = MODELS.get(name)
    if m is None or sid < 0:
        return None
    dims, types, strides, conc = args.parsed(sid)
    if not isinstance(dims, tuple) or not isinstance(types, tuple):
        return None
    try:
        got = m[1](name, dims, types, strides if isinstance(strides, tuple) else None,
                   conc if isinstance(conc, tuple) else None)
    except (IndexError, TypeError, ValueError):
        return None
    return None if got is None else (m[0], *got)


def _rates(flops: float, nbytes: float | None, t_us: float) -> tuple[float, float]:
    tf = (flops / 1e12) / (t_us / 1e6) if t_us > 0 else float("nan")
    tb = (nbytes / 1e12) / (t_us / 1e6) if (t_us > 0 and nbytes is not None) else float("nan")
    return tf, tb


def _nanstat(vals: list[float], s: str) -> float | None:
    return _stat([v for v in vals if v == v], s)


def roofline_sheets(tree: _Tree, sig: np.ndarray, thr: np.ndarray, col: OpArgsCollector,
                    args: _Args) -> dict[str, dict[str, Any]]:
    """``{sheet: {"columns": [...], "rows": [...]}}`` for each of :data:`ROOFLINE_SHEETS` that
    TraceLens writes for this trace (:func:`~.tracelens_models.sheet_present`; module docstring)."""
    sc = tree.scan
    present = {sc.cpu_names[i] for i in sorted_unique(sc.op_name).tolist()} if sc.op_name is not None else set()
    names = {i for i, nm in enumerate(sc.cpu_names) if nm in MODELS}
    groups: dict[str, dict[tuple, list[dict[str, Any]]]] = {s: {} for s in ROOFLINE_SHEETS}
    for o in np.flatnonzero(np.isin(sc.op_name, list(names))).tolist() if names else []:
        name = sc.cpu_names[int(sc.op_name[o])]
        got = _model(name, int(sig[o]), args)
        if got is None:
            continue
        sheet, params, flops, nbytes, spec = got
        ev = tree.subtree(o)
        t = tree.busy(ev)
        tf, tb = _rates(flops, nbytes, t)
        key = (name, *(str(params.get(p)) for p in ROOFLINE_PARAMS[sheet]))
        groups[sheet].setdefault(key, []).append(
            {"uid": int(sc.op_order[o]), "thread": int(thr[o]), "sig": int(sig[o]), "t": t, "tf": tf, "tb": tb,
             "gflops": flops / 1e9, "mb": nbytes / (1024 * 1024) if nbytes is not None else float("nan"),
             "fpb": (flops / nbytes) if nbytes else float("nan"), "spec": spec,
             "kernels": ev[np.argsort(sc.ts[ev], kind="stable")]})
    out = {}
    for sheet in ROOFLINE_SHEETS:
        if not sheet_present(sheet, present):
            continue
        cols = ["name", *(f"param: {p}" for p in ROOFLINE_PARAMS[sheet]), *ROOFLINE_TAIL]
        rows = []
        for key, rs in groups[sheet].items():
            rs.sort(key=lambda r: r["uid"])
            f = rs[0]
            row: dict[str, Any] = dict(zip(cols, key))
            row.update({"GFLOPS_first": f["gflops"], "Data Moved (MB)_first": f["mb"], "FLOPS/Byte_first": f["fpb"]})
            for m, k in (("TB/s", "tb"), ("TFLOPS/s", "tf")):
                for s in _STATS:
                    row[f"{m}_{s}"] = _nanstat([r[k] for r in rs], s)
            pn, pl, tn = col.names(f["thread"])
            row.update({"process_name_first": pn, "process_label_first": pl, "thread_name_first": tn,
                        "Compute Spec": f["spec"]})
            row["kernel_details__summarize_kernel_stats"], row["trunc_kernel_details"] = \
                tree.summary([r["kernels"] for r in rs])
            for k, v in zip(("Input Dims_first", "Input type_first", "Input Strides_first", "Concrete Inputs_first"),
                            args.parsed(f["sig"])):
                row[k] = str(_lists(v)) if v is not None else None
            for s in (*_STATS, "sum"):
                row[f"Kernel Time (µs)_{s}"] = _stat([r["t"] for r in rs], s)
            row["name_count"], row["UID_first"] = len(rs), f["uid"]
            rows.append(row)
        rows.sort(key=lambda r: (-r["Kernel Time (µs)_sum"], r["UID_first"]))
        out[sheet] = {"columns": cols, "rows": rows}
    return out


def unified_perf_summary(tree: _Tree, launchers: list[_Launcher], col: OpArgsCollector,
                         args: _Args, groups: _Groups | None = None) -> list[dict[str, Any]]:
    """``unified_perf_summary.csv`` rows (:data:`UNIFIED_COLUMNS`) over the kernel launchers: CPU
    duration and kernel time statistics, and the perf model's FLOPs and bytes where one is known;
    ``groups`` as :func:`ops_unique_args`'s."""
    groups = groups or _Groups(tree, launchers, col, args)
    rows = []
    for key, rs in groups.by_args.items():
        row = dict(zip(UNIFIED_COLUMNS[:9], key))
        f = rs[0]
        got = _model(f.name, f.sig, args)
        row.update({"ex_UID": f.uid, "operation_count": len(rs)})
        durs, kt = [r.cpu_dur for r in rs], [r.direct for r in rs]
        row.update({"total_duration_us": sum(durs), "mean_duration_us": _stat(durs, "mean"),
                    "std_duration_us": _stat(durs, "std"), "duration_us_median": _stat(durs, "median"),
                    "duration_us_min": min(durs), "duration_us_max": max(durs)})
        tf, tb = [], []
        if got is not None:
            _, params, flops, nbytes, spec = got
            row.update({"GFLOPS": flops / 1e9, "Data Moved (MB)": nbytes / (1024 * 1024) if nbytes is not None else None,
                        "FLOPS/Byte": flops / nbytes if nbytes else None, "Compute Spec": spec,
                        "perf_params": str(params), "has_perf_model": True})
            for t in kt:
                a, b = _rates(flops, nbytes, t)
                tf.append(a)
                tb.append(b)
        else:
            row["has_perf_model"] = False
        for m, vals in (("TB/s", tb), ("TFLOPS/s", tf)):
            for s in _STATS:
                row[f"{m}_{s}"] = _nanstat(vals, s)
        for s in (*_STATS, "sum"):
            row[f"Kernel Time (µs)_{s}"] = _stat(kt, s)
        row["kernel_details_summary"], row["trunc_kernel_details"] = groups.summary(key)
        rows.append(row)
    rows.sort(key=lambda r: (-r["Kernel Time (µs)_sum"], r["ex_UID"]))
    _pct(rows, "Kernel Time (µs)_sum")
    return rows


def short_kernels(tree: _Tree, sig: np.ndarray, args: _Args, total_us: float,
                  short_kernel_us: float = SHORT_KERNEL_US) -> list[dict[str, Any]]:
    """``short_kernels_summary.csv`` rows (:data:`SHORT_COLUMNS`), largest summed time first."""
    sc = tree.scan
    ki = np.flatnonzero((sc.kind == KIND_KERNEL) & (sc.dur < short_kernel_us) & (tree.launcher >= 0))
    g: dict[tuple, list[float]] = {}
    for i in ki.tolist():
        op = int(tree.launcher[i])
        dims, _, strides, conc = args.strings(int(sig[op]))
        if dims is None or strides is None or conc is None:  # pandas groupby drops a key with NaN
            continue
        x = g.setdefault((sc.cpu_names[int(sc.op_name[op])], dims, strides, conc, sc.names[int(sc.name_id[i])]),
                         [0.0, 0])
        x[0] += float(sc.dur[i])
        x[1] += 1
    rows = [dict(zip(SHORT_COLUMNS, (*k, tot, n, tot / n, tot / total_us * 100.0 if total_us else float("nan"))))
            for k, (tot, n) in g.items()]
    rows.sort(key=lambda r: (-r[SHORT_COLUMNS[5]], *(str(r[c]) for c in SHORT_COLUMNS[:5])))
    return rows


def build_sheets(scan: TraceScan, keep: dict[str, Any], col: OpArgsCollector, *,
                 short_kernel_us: float = SHORT_KERNEL_US) -> dict[str, Any]:
    """Every sheet of this module from a scan, the engine's ``keep`` (``linked``, ``launcher``,
    ``timeline_us``: :func:`~.engine.analyze_scan`) and the collector fed during the same read.

    Returns ``{"sheets": {name: {"columns": [...], "rows": [...]}}, "short_kernels_summary": rows}``
    (JSON-able), or ``{"sheets_error": why}`` when the collector does not match the scan."""
    joined = col.join(scan)
    if joined is None:
        return {"sheets_error": "the argument collector saw other cpu_ops than the scan (not fed by the same read)"}
    sig, thr, lthr = joined
    tree = _Tree(scan, keep)
    args = _Args(col)
    launchers = _launcher_rows(tree, np.asarray(keep["linked"]), sig, thr, lthr)
    groups = _Groups(tree, launchers, col, args)  # grouped once for the two sheets by unique arguments
    sheets = {"ops_summary": {"columns": list(OPS_SUMMARY_COLUMNS), "rows": ops_summary(launchers)},
              "ops_unique_args": {"columns": list(OPS_UNIQUE_ARGS_COLUMNS),
                                  "rows": ops_unique_args(tree, launchers, col, args, groups)},
              "unified_perf_summary": {"columns": list(UNIFIED_COLUMNS),
                                       "rows": unified_perf_summary(tree, launchers, col, args, groups)}}
    sheets.update(roofline_sheets(tree, sig, thr, col, args))
    total = float(keep["timeline_us"]["total_time"])
    return {"sheets": sheets, "short_kernels_summary": short_kernels(tree, sig, args, total, short_kernel_us)}


def analyze_with_sheets(path, *, short_kernel_us: float = SHORT_KERNEL_US, progress=None):
    """:func:`~.engine.analyze_with_tables` plus :func:`build_sheets`, all from one read of the
    trace at ``path``: ``(TraceAnalysis, kernel_rows)`` where ``kernel_rows`` is what
    :func:`~.tables.write_tables` writes (every TraceLens sheet). Raises what
    :func:`~.stream.scan_trace` raises."""
    from .engine import analyze_scan
    from .stream import scan_trace
    from .tables import kernel_tables

    col = OpArgsCollector()
    scan = scan_trace(path, progress, (col.feed,))
    keep: dict[str, Any] = {}
    analysis = analyze_scan(scan, short_kernel_us=short_kernel_us, keep=keep)
    rows = kernel_tables(scan, keep, keep["timeline_us"]["total_time"], short_kernel_us)
    rows.update(build_sheets(scan, keep, col, short_kernel_us=short_kernel_us))
    return analysis, rows
