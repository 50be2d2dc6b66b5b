"""Training-log formats: a log's lines read into steps and epochs (:func:`read_steps`).

Three log formats are recognised (auto-detected, see :func:`detect_format`):

``batch_time``
    ``Batch N: loss L time T seconds`` per step, optionally followed by ``samples S`` (the
    realized number of samples of that step, all ranks together), and ``Epoch N completed``
    after each epoch (the mlip-gnn workload of jobs 91001/91002).
``edm_tic``
    The ORBIT-2 / Bayes-CAST EDM pair ``epoch: N batch_idx M world_size W loss tensor(L, ...)``
    followed by ``my rank R. tic4-tic1 in X seconds``; each tic line is paired to the step line
    before it and per-epoch losses are synthesised from per-step losses (seed 000 lesson 21).
    Optional ``y.shape torch.Size([B, ...])`` lines give the realized per-rank batch ``B`` of a
    step (lesson 31); it is multiplied by ``W`` to give the step's global sample count.
``hydragnn_tqdm``
    HydraGNN's progress bars: ``hydragnn.utils.print_utils.iterate_tqdm`` wraps the training
    loader in ``tqdm(..., desc="Train", total=nbatch)`` (``hydragnn/train/train_validate_test.py``),
    so each epoch prints ``Train: 100%|██████████| 20/20 [00:25<00:00,  1.25s/it]`` on stderr, its
    updates separated by carriage returns. With verbosity 4 every rank prints its own bar and
    ``srun --label`` prefixes each line with ``<rank>: ``. Only rank 0's bars are read (lesson 3:
    counting every rank's 100% line over-counts epochs by N_ranks); epoch wall time is rank 0's
    s/it x number of batches (lesson 3). Epoch losses come from HydraGNN's
    ``Epoch: NN, Train Loss: L, Val Loss: ..., Test Loss: ...`` lines.

The figures of merit computed from these steps are in :mod:`.fom`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .models import LogFormat
from ..errors import InputError

_FORMATS_TRIED = (
    "batch_time ('Batch N: loss L time T seconds'), "
    "edm_tic ('epoch: N batch_idx M ... loss tensor(L)' + 'my rank R. tic4-tic1 in X seconds'), "
    "hydragnn_tqdm ('Train: 100%|...| n/N [..., X s/it]')"
)

# ----------------------------------------------------------------------------------------------
# line patterns. Each runs in time linear in the line's length: no lazy ``.*?`` under a search
# (a 1 MB line took > 5 min, issue 26), possessive runs where a backtrack cannot help, and the
# tqdm bar and the EDM step found from a fixed anchor first (``%|``, ``epoch:``).
_NUM = r"[-+]?(?:\d++\.?+\d*+|\.\d++)(?:[eE][-+]?\d++)?+|[-+]?nan|[-+]?inf"
_LABEL = re.compile(r"^\s*(\d+): ")  # srun --label prefix ("0: ", " 3: ", "12: ")
_BATCH = re.compile(
    rf"Batch\s+(\d+):\s+loss\s+({_NUM})\s+time\s+({_NUM})\s+seconds(?:\s+samples\s+(\d+))?",
    re.IGNORECASE,
)
_EPOCH_DONE = re.compile(r"\bEpoch\s+(\d+)\s+completed\b")
# an EDM step line: its head, then the first ``loss <number>`` after it (two linear searches
# instead of the head, a lazy ``.*?`` and the loss under one search)
_EDM_HEAD = re.compile(r"epoch:\s*+(\d+)\s++batch_idx\s++(\d+)(?:\s++world_size\s++(\d+))?+")
_EDM_LOSS = re.compile(rf"\bloss\s++(?:tensor\(\s*+)?+({_NUM})")
_EDM_TIC = re.compile(rf"my rank\s+(\d+)\.?\s+tic4-tic1 in\s+({_NUM})\s+seconds")
_YSHAPE = re.compile(r"y\.shape\W*+torch\.Size\(\[\s*+(\d+)")
# tqdm's default bar: "{desc}: {pct:3.0f}%|{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}]"
# (tqdm.std.tqdm.format_meter; rate is "{:5.2f}it/s", or "{:5.2f}s/it" when slower than 1 it/s,
# with an SI prefix when unit_scale is on, "?it/s" before the first update).
# The bar is found from its ``NN%|`` anchor; its desc is the text before it up to a ``:`` (see
# :func:`_tqdm_bars`), never searched for with a lazy class (quadratic under ``re.search``).
_TQDM = re.compile(
    r"(?P<pct>\d{1,3})%\|[^|\r\n]*+\|\s*+(?P<n>\d+)/(?P<total>\d+)\s*+"
    r"\[(?P<elapsed>[\d:]++)<(?P<remaining>[\d:?]++),\s*+(?P<rate>\?|[\d.]++\s*+[kMGT]?)\s*+"
    r"(?P<unit>it/s|s/it)"
)
#: Terminal escape sequences (ECMA-48): CSI (colours, cursor moves, erase: ``ESC [ ... final``, or
#: the 8-bit ``\x9b``), OSC (window titles, hyperlinks: ``ESC ] ... BEL`` or ``ESC ] ... ESC \``),
#: and the other two-byte escapes (``ESC 7``, ``ESC ( B``). Display only: ``rich`` with forced colour
#: and tqdm write them around numbers (lora-scripts-next PR#94, omnia-protocol PR#233).
_ESCAPE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*+[ -/]*+[@-~]"
    r"|\x1b\][^\x07\x1b]*+(?:\x07|\x1b\\)?+"
    r"|\x1b[ -/]*+[0-~]"
    r"|\x1b"
)
#: Longest record (one line, or one carriage-return update of a progress bar) read, in characters:
#: 110x the longest step line in the shared logs and bundled examples (74 characters, measured);
#: a longer record is cut to this many and the log's notes say so.
MAX_RECORD_CHARS = 8192
_HYDRA_EPOCH = re.compile(rf"Epoch:\s*(\d+),\s*Train Loss:\s*({_NUM})")


@dataclass
class Step:
    """One training step of one rank: epoch, index in the epoch, loss, wall time (s), realized
    samples of the step over all ranks, world size."""

    epoch: int
    index: int
    loss: float | None = None
    time_s: float | None = None
    samples: float | None = None  # realized samples of the step, all ranks together
    world_size: int = 1


@dataclass
class ParsedLog:
    """A log read into steps (:class:`Step`), the epochs it completed, the ranks whose lines it saw,
    and notes on what it could not read."""

    fmt: LogFormat
    steps: list[Step]
    complete_epochs: list[int]
    ranks_seen: list[int]
    notes: list[str]
    # tqdm only: per-epoch (epoch, n_batches, s_per_it, elapsed_s) and epoch losses from log lines
    tqdm_epochs: list[tuple[int, int, float, float | None]] | None = None
    logged_epoch_losses: dict[int, float] | None = None


def _float(s: str) -> float:
    return float(s)


def _read(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"training log not found: {path}") from None
    except OSError as exc:
        raise InputError(f"cannot read training log {path}: {exc.strerror or exc}") from None
    text = raw.decode("utf-8", errors="replace")
    if not text.strip():
        raise InputError(f"training log {path} is empty (tried formats: {_FORMATS_TRIED})")
    return text


def strip_escapes(text: str) -> tuple[str, int]:
    """``text`` without terminal escape sequences (:data:`_ESCAPE`), and how many were removed.
    Carriage returns are kept (they separate a progress bar's updates: :func:`_records`)."""
    n = 0

    def cut(_m: re.Match[str]) -> str:
        nonlocal n
        n += 1
        return ""

    return (_ESCAPE.sub(cut, text), n) if ("\x1b" in text or "\x9b" in text) else (text, 0)


def _tqdm_bars(seg: str):
    """Every tqdm bar in ``seg``: ``(groups, desc)`` with the bar's groups (:data:`_TQDM`) and its
    desc, the text before the bar up to a ``:`` (after the previous bar, or the last ``|``);
    '' when the bar has none. Linear in ``len(seg)``."""
    prev = 0
    for m in _TQDM.finditer(seg):
        pre = seg[prev:m.start()].rstrip()
        desc = ""
        if pre.endswith(":"):
            desc = pre[:-1].rsplit("|", 1)[-1]
        prev = m.end()
        yield m.groupdict(), desc


def _records(text: str, notes: list[str] | None = None) -> list[tuple[int | None, str]]:
    """Split a log into ``(srun_label, segment)`` records: lines on ``\\n``, then tqdm's
    carriage-return updates on ``\\r``; a segment inherits its line's ``srun --label`` rank. A
    segment longer than :data:`MAX_RECORD_CHARS` is cut to that length (counted in ``notes``)."""
    out: list[tuple[int | None, str]] = []
    cut, longest = 0, 0
    for line in text.split("\n"):
        label: int | None = None
        m = _LABEL.match(line)
        if m:
            label = int(m.group(1))
            line = line[m.end():]
        for seg in line.split("\r"):
            m2 = _LABEL.match(seg) if label is not None else None
            if m2:  # a label repeated after a carriage return (unbuffered srun output)
                seg = seg[m2.end():]
            if len(seg) > MAX_RECORD_CHARS:
                cut, longest = cut + 1, max(longest, len(seg))
                seg = seg[:MAX_RECORD_CHARS]
            if seg.strip():
                out.append((label, seg))
    if cut and notes is not None:
        notes.append(f"{cut} line(s) longer than {MAX_RECORD_CHARS} characters (the longest {longest}) were cut to "
                     f"their first {MAX_RECORD_CHARS}")
    return out


def _edm_step(seg: str) -> tuple[re.Match[str], re.Match[str]] | None:
    """An EDM step line's head match and its ``loss`` match, or None."""
    h = _EDM_HEAD.search(seg)
    if not h:
        return None
    lm = _EDM_LOSS.search(seg, h.end())
    return (h, lm) if lm else None


def _counts(recs: list[tuple[int | None, str]]) -> dict[LogFormat, int]:
    return {
        "batch_time": sum(len(_BATCH.findall(seg)) for _, seg in recs),
        "edm_tic": sum(1 for _, seg in recs if _edm_step(seg)),
        "hydragnn_tqdm": sum(1 for _, seg in recs for _, d in _tqdm_bars(seg) if d.strip().endswith("Train")),
    }


def detect_format(text: str) -> LogFormat | None:
    """The log format with the most step lines in ``text``, or ``None`` when no step line of any
    known format is present."""
    return _detect(_records(strip_escapes(text)[0]))


def _detect(recs: list[tuple[int | None, str]]) -> LogFormat | None:
    counts = _counts(recs)
    best = max(counts, key=lambda k: counts[k])
    return best if counts[best] > 0 else None


def _filter_rank(recs: list[tuple[int | None, str]], rank: int, is_step):
    """Keep the records of ``rank`` when step lines (``is_step(segment)``) carry srun labels; all
    records otherwise."""
    labels = sorted({lab for lab, seg in recs if lab is not None and is_step(seg)})
    if not labels:
        return recs, []
    if rank not in labels:
        raise InputError(f"no step lines of rank {rank} in the labelled log (ranks seen: {labels})")
    return [(lab, seg) for lab, seg in recs if lab == rank], labels


def _close_epochs(steps: list[Step], marked: set[int]) -> list[int]:
    """Complete epochs: those closed by an ``Epoch N completed`` line or followed by a later
    epoch's steps; a trailing unmarked epoch is complete only when it holds as many steps as the
    largest earlier epoch."""
    order: list[int] = []
    counts: dict[int, int] = {}
    for s in steps:
        if s.epoch not in counts:
            order.append(s.epoch)
            counts[s.epoch] = 0
        counts[s.epoch] += 1
    complete = []
    for i, ep in enumerate(order):
        if ep in marked or i < len(order) - 1:
            complete.append(ep)
        elif i > 0 and counts[ep] >= max(counts[e] for e in order[:i]):
            complete.append(ep)
    return complete


def _parse_batch_time(recs, rank: int) -> ParsedLog:
    recs, labels = _filter_rank(recs, rank, _BATCH.search)
    steps: list[Step] = []
    marked: set[int] = set()
    epoch = 0
    last_idx: int | None = None
    notes: list[str] = []
    for _, seg in recs:
        m = _BATCH.search(seg)
        if m:
            idx = int(m.group(1))
            if last_idx is not None and idx <= last_idx and steps and steps[-1].epoch == epoch:
                # batch index went back without an "Epoch N completed" line: a new epoch began
                epoch += 1
            samples = float(m.group(4)) if m.group(4) else None
            steps.append(Step(epoch, idx, _float(m.group(2)), _float(m.group(3)), samples))
            last_idx = idx
            continue
        m = _EPOCH_DONE.search(seg)
        if m:
            n = int(m.group(1))
            cur = [s for s in steps if s.epoch == epoch]
            if cur and n != epoch:
                for s in cur:  # trust the log's own epoch number
                    s.epoch = n
            marked.add(n)
            epoch = n + 1
            last_idx = None
    return ParsedLog("batch_time", steps, _close_epochs(steps, marked), labels, notes)


def _parse_edm(recs, rank: int) -> ParsedLog:
    recs, labels = _filter_rank(recs, rank, _edm_step)
    steps: list[Step] = []
    marked: set[int] = set()
    tic_ranks: set[int] = set()
    cur: Step | None = None
    cur_has_tic = True
    pending_batch: int | None = None
    cur_batch: int | None = None
    orphan_tics = 0
    for _, seg in recs:
        hit = _edm_step(seg)
        if hit:
            m, lm = hit
            ws = int(m.group(3)) if m.group(3) else 1
            cur = Step(int(m.group(1)), int(m.group(2)), _float(lm.group(1)), None, None, ws)
            steps.append(cur)
            cur_has_tic = False
            cur_batch = pending_batch
            pending_batch = None
            if cur_batch is not None:
                cur.samples = float(cur_batch * ws)
            continue
        m = _EDM_TIC.search(seg)
        if m:
            r = int(m.group(1))
            tic_ranks.add(r)
            if r != rank:
                continue
            if cur is None or cur_has_tic:
                orphan_tics += 1
                continue
            cur.time_s = _float(m.group(2))
            cur_has_tic = True
            continue
        m = _YSHAPE.search(seg)
        if m:
            b = int(m.group(1))
            if cur is not None and not cur_has_tic and cur.samples is None:
                cur.samples = float(b * cur.world_size)  # printed inside the step
            else:
                pending_batch = b  # printed before the next step line
            continue
        m = _EPOCH_DONE.search(seg)
        if m:
            marked.add(int(m.group(1)))
    notes = []
    if orphan_tics:
        notes.append(f"{orphan_tics} tic4-tic1 lines had no preceding step line and were ignored")
    if tic_ranks and rank not in tic_ranks:
        raise InputError(f"no 'my rank {rank}. tic4-tic1' lines in the log (ranks seen: {sorted(tic_ranks)})")
    ranks = labels or sorted(tic_ranks)
    return ParsedLog("edm_tic", steps, _close_epochs(steps, marked), ranks, notes)


def _hms(s: str) -> float | None:
    try:
        parts = [int(p) for p in s.split(":")]
    except ValueError:
        return None
    t = 0
    for p in parts:
        t = t * 60 + p
    return float(t)


def _rate_s_per_it(rate: str, unit: str) -> float | None:
    rate = rate.strip()
    if rate == "?":
        return None
    scale = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    mult = 1.0
    if rate and rate[-1] in scale:
        mult = scale[rate[-1]]
        rate = rate[:-1]
    v = float(rate) * mult
    if v <= 0:
        return None
    return v if unit == "s/it" else 1.0 / v


def _parse_tqdm(recs, rank: int, desc: str = "Train") -> ParsedLog:
    notes: list[str] = []
    bars: list[tuple[int | None, int, dict[str, str]]] = []  # (label, record index, groups)
    epoch_lines: list[tuple[int, int, float]] = []  # (record index, epoch, train loss)
    for i, (lab, seg) in enumerate(recs):
        for g, d in _tqdm_bars(seg):
            d = _LABEL.sub("", d.strip())
            if d == desc or d.endswith(" " + desc):
                bars.append((lab, i, g))
        m = _HYDRA_EPOCH.search(seg)
        if m:
            epoch_lines.append((i, int(m.group(1)), _float(m.group(2))))
    labels = sorted({lab for lab, _, _ in bars if lab is not None})
    if labels:
        if rank not in labels:
            raise InputError(f"no '{desc}' progress bars of rank {rank} in the log (ranks seen: {labels})")
        bars = [b for b in bars if b[0] == rank]
    # one completion per bar instance: a 100% update closes the bar; repeated 100% updates (tqdm
    # prints the final state again on close) refine it; an update below 100% opens a new bar.
    completions: list[tuple[int, dict[str, str]]] = []
    open_bar = True
    for _, idx, g in bars:
        done = int(g["n"]) >= int(g["total"]) > 0
        if done:
            if open_bar:
                completions.append((idx, g))
                open_bar = False
            else:
                completions[-1] = (completions[-1][0], g)
        else:
            open_bar = True
    if not labels and epoch_lines and len(completions) > len(epoch_lines):
        # unlabelled log with every rank's bars: keep the first completion before each epoch line
        kept: list[tuple[int, dict[str, str]]] = []
        start = -1
        for rec_idx, _, _ in epoch_lines:
            inside = [c for c in completions if start < c[0] < rec_idx]
            if inside:
                kept.append(inside[0])
            start = rec_idx
        tail = [c for c in completions if c[0] > start]
        notes.append(
            f"unlabelled log with {len(completions)} '{desc}' completions for {len(epoch_lines)} epoch "
            "lines: kept the first completion per epoch (rank unknown; lesson 3)"
        )
        completions = kept + tail[:1]
    epochs: list[tuple[int, int, float, float | None]] = []
    for e, (_, g) in enumerate(completions):
        spi = _rate_s_per_it(g["rate"], g["unit"])
        if spi is None:
            continue
        epochs.append((e, int(g["total"]), spi, _hms(g["elapsed"])))
    steps = [Step(e, i, None, spi) for e, n, spi, _ in epochs for i in range(n)]
    losses: dict[int, float] = {}
    for _, ep, loss in epoch_lines:
        losses.setdefault(ep, loss)
    return ParsedLog(
        "hydragnn_tqdm", steps, [e for e, *_ in epochs], labels, notes,
        tqdm_epochs=epochs, logged_epoch_losses=losses,
    )


def read_steps(p: Path, rank: int = 0, fmt: LogFormat | None = None, text: str | None = None) -> ParsedLog:
    """Read the log at ``p`` into steps and epochs of ``rank`` (format auto-detected unless ``fmt``
    is given); ``text``: the log's text when the caller already read it (an empty one is read again,
    for the error). Raises :class:`InputError` (one line) for a missing or empty log, a log with no
    recognisable step line, or a HydraGNN log with no completed rank-``rank`` ``Train`` bar."""
    text, n_esc = strip_escapes(text if text and text.strip() else _read(p))
    notes: list[str] = []
    if n_esc:
        notes.append(f"{n_esc} terminal escape sequence(s) stripped (colour, cursor and title codes: display only)")
    recs = _records(text, notes)
    fmt = fmt or _detect(recs)
    if fmt is None:
        raise InputError(f"no recognizable step line in {p} (tried formats: {_FORMATS_TRIED})")
    if fmt == "batch_time":
        parsed = _parse_batch_time(recs, rank)
    elif fmt == "edm_tic":
        parsed = _parse_edm(recs, rank)
    else:
        parsed = _parse_tqdm(recs, rank)
    parsed.notes[:0] = notes
    if not parsed.steps and fmt != "hydragnn_tqdm":
        raise InputError(f"no recognizable step line in {p} (tried formats: {_FORMATS_TRIED})")
    if fmt == "hydragnn_tqdm" and not parsed.tqdm_epochs:
        raise InputError(f"no completed rank-{rank} 'Train' progress bar in {p} (format hydragnn_tqdm)")
    return parsed
