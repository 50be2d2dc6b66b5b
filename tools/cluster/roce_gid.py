"""RoCE GID-table consistency across nodes (seed 000 lesson 26), for the node probe.

Lesson 26: 2-node ORBIT-2 on MI355X aborted with ``ionic_comp_msn: cqe with error 12`` /
``NET/IB ... RETRY_EXC`` because ``NCCL_IB_GID_INDEX=1`` assumed the fabric's ULA (RoCEv2) sat at
GID index 1 on every node, while some nodes carried a stray global IPv6 address at index 1, which
pushed the ULA to index 2: local and remote GIDs came from different subnets, no route, retry
exceeded. "Always verify GID-table consistency before blaming the model for a multi-node hang."
The GIDs are read from ``/sys/class/infiniband/<dev>/ports/<port>/gids/<idx>`` and their types
from ``.../gid_attrs/types/<idx>`` (the lesson's ``cat`` commands).

:func:`read_gid_tables` reads one node's tables; :func:`check` compares the nodes probed together:
for every device/port, the index NCCL will use (``NCCL_IB_GID_INDEX`` when the node's environment
sets it, else the index at which most nodes carry the fabric's RoCE v2 subnet) must hold a RoCE v2
GID of the same /64 subnet on every node.
"""

from __future__ import annotations

import ipaddress
import os
from collections import Counter
from pathlib import Path
from typing import Any

SYSFS = "/sys/class/infiniband"
MAX_GID_INDEX = 16
"""GID indexes read per port (0..15): the lesson's tables had the fabric ULA at 1 or 2."""
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def read_gid_tables(root: str | os.PathLike[str] = SYSFS) -> dict[str, dict[str, list[str]]]:
    """``{"<dev>/<port>": {"<idx>": [gid, type]}}`` of this node's non-empty GIDs under ``root``
    ({} when there is no RDMA device). Unreadable entries are left out."""
    out: dict[str, dict[str, list[str]]] = {}
    r = Path(root)
    if not r.is_dir():
        return out
    for dev in sorted(p for p in r.iterdir() if (p / "ports").is_dir()):
        for port in sorted((dev / "ports").iterdir(), key=lambda p: p.name):
            table: dict[str, list[str]] = {}
            for i in range(MAX_GID_INDEX):
                try:
                    gid = (port / "gids" / str(i)).read_text().strip()
                except OSError:
                    continue
                if not gid or gid == ZERO_GID:
                    continue
                try:
                    typ = (port / "gid_attrs" / "types" / str(i)).read_text().strip()
                except OSError:
                    typ = ""
                table[str(i)] = [gid, typ]
            if table:
                out[f"{dev.name}/{port.name}"] = table
    return out


def subnet(gid: str) -> str:
    """The /64 subnet of a GID (``fd93:16d3:59b6:14f::/64``); the text itself when not IPv6."""
    try:
        return str(ipaddress.IPv6Network(f"{gid}/64", strict=False))
    except ValueError:
        return gid


def _is_v2(t: str) -> bool:
    return "v2" in t.lower()


def check(parts: list[dict[str, Any]]) -> tuple[list[tuple[str, str, bool, str]], list[str]]:
    """Compare the GID tables of ``parts`` (probe parts with ``roce_gids`` and optional ``env``
    with ``NCCL_IB_GID_INDEX``). Returns ``(rows, not_checked)``: rows are ``(node, check, ok,
    detail)`` with ``check = "roce_gid:<dev>/<port>"``; ``not_checked`` says what could not be
    compared (a port on one node only)."""
    rows: list[tuple[str, str, bool, str]] = []
    notes: list[str] = []
    tables = {p["node"]: p.get("roce_gids") or {} for p in parts}
    ports = sorted({k for t in tables.values() for k in t})
    for port in ports:
        have = {n: t[port] for n, t in tables.items() if port in t}
        if len(have) < 2:
            notes.append(f"{next(iter(have))}: roce_gid:{port}: not checked: needs the GID table of another node probed with it")
            continue
        # the fabric subnet: the RoCE v2 subnet most nodes carry, and the index most of them carry it at
        fab = Counter(subnet(g) for t in have.values() for g, ty in t.values() if _is_v2(ty) and not g.lower().startswith("fe80"))
        if not fab:
            continue
        want_net = fab.most_common(1)[0][0]
        at = Counter(i for t in have.values() for i, (g, ty) in t.items() if _is_v2(ty) and subnet(g) == want_net)
        usual = at.most_common(1)[0][0]
        for node, t in have.items():
            env = next((p.get("env") or {} for p in parts if p["node"] == node), {})
            idx = str(env.get("NCCL_IB_GID_INDEX") or usual)
            g, ty = t.get(idx, ["", ""])
            ok = bool(g) and _is_v2(ty) and subnet(g) == want_net
            where = [i for i, (x, y) in t.items() if _is_v2(y) and subnet(x) == want_net]
            src = "NCCL_IB_GID_INDEX" if env.get("NCCL_IB_GID_INDEX") else "the index most nodes use"
            detail = (f"GID index {idx} ({src}) holds {g or 'nothing'} ({ty or 'no type'}); the fabric subnet {want_net} "
                      f"(RoCE v2) is at index {', '.join(where) or 'none'} on this node and at index {usual} on "
                      f"{at[usual]} of {len(have)} node(s)")
            if not ok:
                detail = ("GID-table asymmetry (lesson 26: local and remote GIDs from different subnets, RETRY_EXC): " + detail
                          + f"; exclude the node or set NCCL_IB_GID_INDEX per node")
            rows.append((node, f"roce_gid:{port}", ok, detail))
    return rows, notes
