"""The step accountant's feed (:class:`StepFeed`): what :class:`.host_timeline.StepAccountant` keeps
of each trace event while the trace is read, as columns, in a module that imports no numpy, so that
the parallel pass's workers can feed it pieces of a trace (:mod:`.scan_parallel`, kind ``steps``)
and the reading process join their columns (:meth:`StepFeed.absorb`) into the same columns one
feed over the whole trace keeps.

**What is kept** (per event, never the event dicts): GPU events (start, duration, name id, kind,
stream, device, correlation, bytes), host events (start, duration, name id, thread, kind,
correlation, Input Dims signature: cpu_ops, annotations, runtime/driver calls and the *user* Python
frames, :func:`.pystack.is_user_frame`), the device-memory events' totals, the ``ProfilerStep#N``
windows, the flow ids; one copy of each distinct name, thread and signature.

**Times are kept as the trace writes them** (µs, float); :meth:`StepFeed.base` is the first
timestamp the feed took, and the accountant subtracts it after the read (epoch-µs clocks keep
sub-ns precision that way: an end computed as start + dur at 5e12 µs would round to ~1 ns). The
subtraction and the end (``(ts - base) + dur``) are the same IEEE operations whether done per event
or over the columns, so a joined feed gives the very numbers of one feed.

**Joining** (:meth:`StepFeed.export`, :meth:`StepFeed.absorb`): a piece's tables (names, threads,
devices that are not ids, signatures) are in the order of first appearance in that piece; taken in
file order, the union in order is the order of first appearance in the whole trace, and each
piece's codes are re-coded to it.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

from .codes import GPU_CATS, KIND_MEMCPY
from .hygiene import STEP_NAME_RE, as_id
from .pystack import is_user_frame

#: Host event kinds (the ``kind`` column): a recorded op or annotation, a runtime/driver call, a
#: user Python frame.
KIND_OP, KIND_RUNTIME, KIND_PY = 0, 1, 2
_RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver"})
_CPU_SIDE = frozenset({"cpu_op", "user_annotation", "python_function", "gpu_user_annotation"})
_OP_CATS = frozenset({"cpu_op", "user_annotation"})
_I32 = 1 << 31
_INF = float("inf")
#: The event keys and ``args`` keys :meth:`StepFeed.feed` reads (``tests/test_lane_fields.py``
#: checks them against this module's source): a read that feeds only the accountant decodes only
#: these (:func:`.fastscan.decoders`; the step accountant's lane, :func:`.onepass.steps_part`, and the
#: parallel pass's workers, :mod:`.scan_parallel` kind ``steps``).
FIELDS = (("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args"),
          ("Device Type", "Total Allocated", "Input Dims", "correlation", "stream", "device", "bytes"))
#: Columns of a feed: (attribute, array typecode).
COLUMNS = (("g_ts", "d"), ("g_dur", "d"), ("g_name", "i"), ("g_stream", "i"), ("g_device", "i"), ("g_kind", "b"),
           ("g_corr", "q"), ("g_bytes", "q"), ("h_ts", "d"), ("h_dur", "d"), ("h_name", "i"), ("h_thr", "i"),
           ("h_sig", "i"), ("h_kind", "b"), ("h_corr", "q"), ("flow_ids", "q"), ("m_ts", "d"), ("m_alloc", "q"))
#: Event counters summed over pieces.
COUNTERS = ("n", "n_python", "n_memory", "bad")


def num(v: Any) -> float | None:
    """``float(v)`` when finite, else None (anything float() refuses too)."""
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


_I64 = float(1 << 63)


def count(v: Any) -> int | None:
    """A byte count (``bytes``, ``Total Allocated``) as an int of the int64 columns it goes to: a
    finite number (:func:`num`) within [-2**63, 2**63) after its conversion to float, else None (a
    value of 2**63 or more is no count the profiler writes; it raised OverflowError)."""
    x = num(v)
    return int(x) if x is not None and -_I64 <= x < _I64 else None


def batch1(dims) -> bool:
    """True when an op's ``Input Dims`` (a list of lists) has a first tensor input of leading dim 1."""
    if type(dims) is not list:
        return False
    for d in dims:
        if type(d) is list and d:
            return d[0] == 1
    return False


class Signatures:
    """Input Dims signatures of batch-1 cpu_ops (:func:`batch1`): ``(name id, dims text)`` -> id, with
    the dims text."""

    def __init__(self) -> None:
        self.ids: dict[tuple[int, str], int] = {}
        self.dims: list[str] = []

    def get(self, name_id: int, dims) -> int:
        """The signature id of an op named ``name_id`` with ``Input Dims`` ``dims`` (a list of lists)."""
        return self.key(name_id, repr(dims))

    def key(self, name_id: int, text: str) -> int:
        """The signature id of ``(name_id, text)`` (added when new)."""
        key = (name_id, text)
        i = self.ids.get(key)
        if i is None:
            i = self.ids[key] = len(self.dims)
            self.dims.append(text)
        return i


class StepFeed:
    """Per-event consumer keeping the step accounting's columns (see the module docstring):
    :meth:`feed` one event (O(1): a few dict lookups and array appends), :meth:`feed_batch` a list."""

    def __init__(self) -> None:
        for col, code in COLUMNS:
            setattr(self, col, array(code))
        for k in COUNTERS:
            setattr(self, k, 0)
        self.base: float | None = None  # the first timestamp taken (µs as written)
        self.steps: list[tuple[int, float, float, int]] = []  # (number, start as written, dur, thread)
        self.gnames: list[str] = []
        self._gix: dict[str, int] = {}
        self.hnames: list[str] = []
        self._hix: dict[str, int] = {}
        self._user: dict[str, bool] = {}
        self._dev: dict = {}  # device values that are not ids -> -2, -3, ... in order of appearance
        self.threads: dict[tuple, int] = {}
        self.sigs = Signatures()
        self.has_shapes = False

    # ------------------------------------------------------------------ feeding

    def _ts(self, v: Any) -> float | None:
        """A usable timestamp as written (the first one taken is :attr:`base`), or None."""
        t = num(v)
        if t is not None and self.base is None:
            self.base = t
        return t

    def _hid(self, name: str) -> int:
        i = self._hix.get(name)
        if i is None:
            i = self._hix[name] = len(self.hnames)
            self.hnames.append(name)
        return i

    def _thread(self, ev: dict) -> int:
        key = (ev.get("pid"), ev.get("tid"))
        try:
            t = self.threads.get(key)
        except TypeError:  # an unhashable pid/tid
            key = (repr(key[0]), repr(key[1]))
            t = self.threads.get(key)
        if t is None:
            t = self.threads[key] = len(self.threads)
        return t

    def feed_batch(self, evs: list) -> None:
        """:meth:`feed` each event of ``evs`` (a decoded piece of the trace), in order."""
        feed = self.feed
        for ev in evs:
            feed(ev)

    def feed(self, ev: Any) -> None:
        """Take one trace event (a dict of ``traceEvents``); anything else is skipped. O(1). A field
        of the wrong JSON type is read as the engine's loop reads it (:class:`.scan_loop.ScanColumns`),
        never raised on: an unhashable category is none, a name that is not a string its text, ``args``
        that is not an object no args, a byte count outside int64 none (:func:`count`)."""
        if type(ev) is not dict:
            return
        self.n += 1
        cat = ev.get("cat")
        if type(cat) is not str and cat is not None:
            try:
                hash(cat)
            except TypeError:  # a list or an object: no category (the engine's rule)
                cat = None
        kind = GPU_CATS.get(cat) if type(cat) is str else None
        if kind is not None:
            self._feed_gpu(ev, kind)
            return
        if cat == "python_function":
            self.n_python += 1
            name = ev.get("name")
            if type(name) is not str:
                return
            user = self._user.get(name)
            if user is None:
                user = self._user[name] = is_user_frame(name)
            if user:
                self._feed_host(ev, name, KIND_PY, -1)
            return
        ph = ev.get("ph")
        if cat == "ac2g":
            if ph == "s":
                fid = as_id(ev.get("id"))
                if fid is not None:
                    self.flow_ids.append(fid)
            return
        if ph in ("i", "I"):
            if ev.get("name") == "[memory]":
                self.n_memory += 1
                args = ev.get("args")
                if type(args) is dict and args.get("Device Type") == 1:  # c10::DeviceType::CUDA (ROCm: HIP too)
                    t, a = self._ts(ev.get("ts")), count(args.get("Total Allocated"))
                    if t is not None and a is not None:
                        self.m_ts.append(t)
                        self.m_alloc.append(a)
            return
        if ph not in ("X", None) or cat == "gpu_user_annotation":
            return
        name = ev.get("name")
        if type(name) is not str:
            name = "" if name is None else str(name)
        if name.startswith("ProfilerStep") and cat in ("user_annotation", "cpu_op", None):
            m = STEP_NAME_RE.match(name)
            t, d = self._ts(ev.get("ts")), num(ev.get("dur"))
            if m and t is not None and d is not None and d >= 0:
                self.steps.append((int(m.group(1)), t, d, self._thread(ev)))
            return
        if cat in _OP_CATS:
            sig = -1
            if cat == "cpu_op":
                args = ev.get("args")
                dims = args.get("Input Dims") if type(args) is dict else None
                if dims is not None:
                    self.has_shapes = True
                    if batch1(dims):  # only batch-1 ops take part in the repetition figure
                        sig = self.sigs.get(self._hid(name), dims)
            self._feed_host(ev, name, KIND_OP, -1, sig)
            return
        args = ev.get("args")
        corr = as_id(args.get("correlation")) if type(args) is dict else None
        if cat in _RUNTIME_CATS or (corr is not None and cat not in _CPU_SIDE):
            self._feed_host(ev, name, KIND_RUNTIME, -1 if corr is None else corr)

    def _feed_host(self, ev: dict, name: str, kind: int, corr: int, sig: int = -1) -> None:
        try:
            t, d = float(ev["ts"]), float(ev.get("dur", 0.0))
        except (KeyError, TypeError, ValueError, OverflowError):
            self.bad += 1
            return
        if not (-_INF < t < _INF and 0.0 <= d < _INF):  # NaN fails both
            self.bad += 1
            return
        if self.base is None:
            self.base = t
        key = (ev.get("pid"), ev.get("tid"))
        try:
            th = self.threads.get(key)
        except TypeError:  # an unhashable pid/tid
            th = None
        if th is None:
            th = self._thread(ev)
        nid = self._hix.get(name)
        if nid is None:
            nid = self._hid(name)
        self.h_ts.append(t)
        self.h_dur.append(d)
        self.h_name.append(nid)
        self.h_thr.append(th)
        self.h_kind.append(kind)
        self.h_corr.append(corr)
        self.h_sig.append(sig)

    def _feed_gpu(self, ev: dict, kind: int) -> None:
        t, d = self._ts(ev.get("ts")), num(ev.get("dur"))
        if t is None or d is None or d < 0:
            self.bad += 1
            return
        name = ev.get("name")
        if type(name) is not str:
            name = "" if name is None else str(name)
        i = self._gix.get(name)
        if i is None:
            i = self._gix[name] = len(self.gnames)
            self.gnames.append(name)
        args = ev.get("args")
        if type(args) is not dict:
            args = {}
        s = as_id(args.get("stream"), _I32)
        dv = args.get("device", ev.get("pid"))
        dev = as_id(dv, _I32)
        if dev is None:
            try:
                dev = self._dev.setdefault(dv, -2 - len(self._dev))
            except TypeError:
                dev = -1
        c = as_id(args.get("correlation"))
        b = count(args.get("bytes")) if kind == KIND_MEMCPY else None
        self.g_ts.append(t)
        self.g_dur.append(d)
        self.g_name.append(i)
        self.g_kind.append(kind)
        self.g_stream.append(-1 if s is None else s)
        self.g_device.append(dev)
        self.g_corr.append(-1 if c is None else c)
        self.g_bytes.append(-1 if b is None else b)

    # ------------------------------------------------------------------ joining

    def export(self) -> dict[str, Any]:
        """The feed as picklable parts (columns as bytes, tables as lists), for :meth:`absorb`."""
        out: dict[str, Any] = {col: getattr(self, col).tobytes() for col, _ in COLUMNS}
        out.update({k: getattr(self, k) for k in COUNTERS})
        out.update(base=self.base, steps=self.steps, gnames=self.gnames, hnames=self.hnames, user=self._user,
                   dev=list(self._dev), threads=list(self.threads), sigs=list(self.sigs.ids),
                   has_shapes=self.has_shapes)
        return out

    def absorb(self, part: dict[str, Any]) -> None:
        """Join a feed of the next piece of the trace (:meth:`export`) after what was fed so far:
        afterwards this feed's columns and tables are those of one feed over both, in order."""
        import numpy as np  # the joining process only (the workers import no numpy)

        from .join_codes import codes_of, recoded

        gmap = codes_of(part["gnames"], self._gix, self.gnames)
        hmap = codes_of(part["hnames"], self._hix, self.hnames)
        tmap = codes_of(part["threads"], self.threads)
        dmap = np.empty(len(part["dev"]), dtype=np.int64)
        for j, v in enumerate(part["dev"]):
            dmap[j] = self._dev.setdefault(v, -2 - len(self._dev))
        smap = np.empty(len(part["sigs"]), dtype=np.int64)
        for j, (nid, text) in enumerate(part["sigs"]):
            smap[j] = self.sigs.key(int(hmap[nid]), text)
        for col, code in COLUMNS:
            if col in ("g_name", "h_name", "h_thr", "h_sig", "g_device"):
                continue
            getattr(self, col).frombytes(part[col])
        self.g_name.frombytes(recoded(part["g_name"], gmap))
        self.h_name.frombytes(recoded(part["h_name"], hmap))
        self.h_thr.frombytes(recoded(part["h_thr"], tmap))
        self.h_sig.frombytes(recoded(part["h_sig"], smap, keep_negative=True))
        dev = np.frombuffer(part["g_device"], dtype=np.int32)
        if dmap.size:  # codes -2, -3, ... of the piece -> this feed's
            dev = np.where(dev >= -1, dev, dmap[np.maximum(-2 - dev.astype(np.int64), 0)]).astype(np.int32)
        self.g_device.frombytes(dev.tobytes())
        self.steps.extend((n, t, d, int(tmap[th])) for n, t, d, th in part["steps"])
        for k in COUNTERS:
            setattr(self, k, getattr(self, k) + part[k])
        if self.base is None:
            self.base = part["base"]
        self._user.update(part["user"])
        self.has_shapes = self.has_shapes or part["has_shapes"]


#: The parallel pass's consumer of kind ``steps`` (:data:`.scan_parallel.KINDS`).
PIECE_CONSUMER = (StepFeed, "feed_batch", FIELDS)
