"""Which GPUs of a node belong to the job: ``rmsjob_info``'s ``card`` label.

Several jobs can share a node, each on its own GPUs. Omnistat then labels ``rmsjob_info`` with
the job's GPU ``card`` (ROCm/omnistat PR#111, "added support for GPU id that is being used in
each job": one series per card, ``rmsjob_info{jobid="300",card="0"}``); a site collector may write
SLURM's index list instead (``scontrol show job -d``: ``GRES=gpu:4(IDX:0-1,3)``), so a card value
is read as a list of indices and ranges (:func:`parse_cards`). A GPU series names its index in
Omnistat's ``card`` label or dcgm-exporter's ``gpu`` label (else its ``device``, ``nvidia<N>``):
:func:`gpu_index`.

A job whose ``rmsjob_info`` on a host carries cards gets the statistics of those GPUs only; a
host whose ``rmsjob_info`` has no ``card`` label is joined by host alone (every GPU of the host),
which the report says, and names any other job seen on that host in the window
(:class:`JobGpus`). The PromQL path (:mod:`.promql`) and the raw-sample path (:mod:`.rawstats`)
each apply this with their own code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..errors import InputError
from .export import Series

#: ``rmsjob_info``'s label naming the job's GPUs (Omnistat PR#111).
CARD_LABEL = "card"
#: Labels that carry a GPU series' index, in the order they are read: Omnistat ``card``,
#: dcgm-exporter ``gpu``; then dcgm-exporter's ``device`` (``nvidia0``) through :data:`DEVICE_RE`.
INDEX_LABELS = ("card", "gpu")
DEVICE_RE = re.compile(r"nvidia(\d+)")
#: Most GPUs one node can hold that a card list may name (a range past it is a typo, refused).
MAX_CARDS = 1024
_ITEM = re.compile(r"(\d+)(?:-(\d+))?")


def parse_cards(text: str) -> frozenset[str]:
    """The GPU indices named by a ``card`` label value, as normalised decimal strings:
    ``"3"`` -> {3}; lists and ranges as SLURM writes them, ``"0,1"``, ``"0-3"``, ``"0-1,4"``,
    ``"[0-1,4]"``, ``"IDX:0-3"``, ``"0 1"``. Raises ``InputError`` for anything else (a reversed
    or oversized range, letters)."""
    s = str(text).strip()
    s = s.removeprefix("IDX:").strip("[]() ")
    out: set[int] = set()
    for item in (x for x in re.split(r"[,\s]+", s) if x):
        m = _ITEM.fullmatch(item)
        if not m:
            raise InputError(f"rmsjob_info card label {text!r} is not a list of GPU indices (e.g. '0,1' or '0-3')")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo or hi - lo >= MAX_CARDS:
            raise InputError(f"rmsjob_info card label {text!r}: range {item} is not a range of GPU indices")
        out.update(range(lo, hi + 1))
    if not out:
        raise InputError(f"rmsjob_info card label {text!r} names no GPU")
    return frozenset(str(i) for i in out)


def gpu_index(labels: dict[str, str]) -> str | None:
    """The GPU index of a GPU series (normalised decimal string), or None when it names none."""
    for k in INDEX_LABELS:
        v = labels.get(k)
        if v is not None and v.strip().isdigit():
            return str(int(v))
    m = DEVICE_RE.fullmatch(labels.get("device", ""))
    return str(int(m.group(1))) if m else None


def card_text(cards: Iterable[str]) -> str:
    """``0,1,4`` in numeric order."""
    return ",".join(sorted(cards, key=int))


@dataclass
class JobGpus:
    """The job's GPUs, per host: ``cards`` {host: GPU indices} for hosts whose ``rmsjob_info``
    carries a ``card`` label, ``host_only`` the job's other hosts (joined by host alone), and
    ``others`` {host: other job ids with ``rmsjob_info`` on that host in the window}."""

    cards: dict[str, frozenset[str]] = field(default_factory=dict)
    host_only: list[str] = field(default_factory=list)
    others: dict[str, list[str]] = field(default_factory=dict)

    @property
    def by_card(self) -> bool:
        """Whether any host is joined by card."""
        return bool(self.cards)

    def allows(self, host: str, labels: dict[str, str]) -> bool:
        """Whether a GPU series on ``host`` with ``labels`` is one of the job's GPUs."""
        if host in self.cards:
            return gpu_index(labels) in self.cards[host]
        return host in self.host_only

    def describe(self) -> str:
        """In words, for the claims: ``GPUs of this job only (node1: cards 0,1)`` or ``all GPUs
        of node1 (rmsjob_info has no card label)``; '' when there is nothing to say."""
        parts = []
        if self.cards:
            parts.append("GPUs of this job only (" + "; ".join(f"{h}: cards {card_text(c)}"
                                                              for h, c in sorted(self.cards.items())) + ")")
        if self.host_only and (self.cards or self.others):
            parts.append(f"all GPUs of {', '.join(self.host_only)} (rmsjob_info has no card label there)")
        shared = {h: j for h, j in self.others.items() if j}
        if shared:
            parts.append("node shared with " + "; ".join(f"job {', '.join(j)} on {h}" for h, j in sorted(shared.items())))
        return "; ".join(parts)

    def problems(self) -> list[str]:
        """Caveats for the report: a host shared with another job but joined by host alone (its
        statistics mix both jobs' GPUs)."""
        mixed = [h for h in self.host_only if self.others.get(h)]
        return [f"{h} also ran job {', '.join(self.others[h])} in the window and rmsjob_info carries no card label "
                "there: its statistics cover every GPU of the node, the other job's included" for h in mixed]


def job_gpus(rms: Sequence[Series], jobid: str, lo: float, hi: float, host_of) -> JobGpus:
    """:class:`JobGpus` from ``rmsjob_info`` series (any job) with samples > 0 in ``[lo, hi]``
    (unix s); ``host_of(series)`` names a series' host. Raises ``InputError`` for a card label that
    is not a list of indices."""
    out = JobGpus()
    hosts_plain: set[str] = set()
    others: dict[str, set[str]] = {}
    mine: dict[str, set[str]] = {}
    for s in rms:
        if s.name != "rmsjob_info" or not any(v > 0 and lo <= t <= hi for t, v in zip(s.timestamps, s.values)):
            continue
        jid, h = s.metric.get("jobid", ""), host_of(s)
        if jid != jobid:
            if jid:
                others.setdefault(h, set()).add(jid)
            continue
        card = s.metric.get(CARD_LABEL)
        if card is None:
            hosts_plain.add(h)
        else:
            mine.setdefault(h, set()).update(parse_cards(card))
    out.cards = {h: frozenset(c) for h, c in mine.items()}
    out.host_only = sorted(h for h in hosts_plain if h not in mine)
    out.others = {h: sorted(j) for h, j in others.items() if h in mine or h in hosts_plain}
    return out
