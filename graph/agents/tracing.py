"""Trace every number an LLM writes to one specific tool-result field.

An LLM answer carries, next to its text, a list of :class:`NumberRef`: for each number it writes,
the number as written, its unit, and a reference ``<source>:<field path>``. Sources are the pass's
own tool results (``ev3``) and, for the synthesizer and the lever picker, the report's claims
(``claim:<claim id>``, fields ``value`` and ``rederived_value``: numbers the tools returned and
the code copied) and the report itself (``report``, field ``jobid``). Statements and prose are
never sources.

A reference traces when (:func:`trace_ref`):

- the field exists (dotted path; a dict key may itself contain dots, list items are indexed
  ``kernels.0.mean_us``) and holds a number;
- the written unit is the field's unit, or converts to it (µs/ms/s only). A field's unit is its
  container's ``unit`` key, or follows from its name (``*percent*`` %, ``*_ms`` ms, ``*_us`` µs,
  ``*_s`` s, counts unitless), else unitless (:func:`field_unit`);
- the written number is the field's value exactly, or rounded to the written precision (``90.8``
  for 90.8316, ``1135`` for 1134.75, ``91`` for 90.83): ``|written - value| <= half a unit in the
  last written digit``. There is no relative tolerance.

:func:`check_text` then requires every number in a text (:func:`numbers_in_prose`) to have a
reference written the same way that traces, and a unit written right after the number (``92%``,
``0.91 s``) to agree with the reference's unit. A random value passes only by landing within half
a last-digit unit of the one field it names (about 1 in 1000 for one-decimal values in [0, 100]),
where the old rule (within 1 % of any number in the cited results) passed about one in four.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, Field

from ...state.claimkit import as_float

__all__ = ["NumberRef", "numbers_in_prose", "lookup", "field_unit", "canon_unit", "convert",
           "trace_ref", "trace_value", "check_text", "claim_sources", "report_sources"]


class NumberRef(BaseModel):
    """Where one written number comes from."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, description="the number exactly as written in the text, e.g. 90.8")
    unit: str = Field("", description="its unit as written (%, ms, µs, s, MHz, W, ...; empty for a count)")
    ref: str = Field(min_length=3, description="<source>:<field path>, e.g. ev2:gpu_timeline.idle_time.percent "
                                               "or claim:tl.r0.idle_time:value")


_NUM = re.compile(r"(?<![A-Za-z0-9_.\-])(-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?)")
_UNIT_AFTER = re.compile(r"\s?(%|µs|us|ms|s|sec|seconds|MHz|GHz|W|GB/s|GiB|GB|TFLOP/s)(?![A-Za-z0-9/])")


def numbers_in_prose(text: str) -> list[tuple[str, float]]:
    """Numbers stated in prose: ``[(as written, value)]``. Digits glued to a preceding letter,
    digit, underscore, dot or hyphen are part of a name (``bf16``, ``H200``, ``num_workers_8``,
    ``v1.2``, ``tl.r0``) and are skipped; a unit may follow (``92%``, ``0.91s``)."""
    return [(w, f) for w, f, _ in _numbers_with_units(text)]


def _numbers_with_units(text: str) -> list[tuple[str, float, str | None]]:
    out = []
    for m in _NUM.finditer(text or ""):
        s = m.group(1)
        if "," in s and not re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
            s = s.split(",")[0]
        f = as_float(s)
        if f is None:
            continue
        u = _UNIT_AFTER.match(text, m.start(1) + len(s))
        out.append((s, f, u.group(1) if u else None))
    return out


# --------------------------------------------------------------------------------------------
# units
# --------------------------------------------------------------------------------------------

_ALIASES = {
    "%": "%", "percent": "%", "pct": "%", "pp": "%", "percentage points": "%",
    "µs": "us", "us": "us", "usec": "us", "microseconds": "us",
    "ms": "ms", "msec": "ms", "milliseconds": "ms",
    "s": "s", "sec": "s", "secs": "s", "seconds": "s",
    "mhz": "MHz", "ghz": "GHz", "w": "W", "watts": "W",
    "": "", "count": "", "1": "", "n": "", "kernels": "", "calls": "", "steps": "", "ops": "",
    "samples": "", "epochs": "", "batches": "", "rank": "", "ranks": "", "launches": "", "gpus": "",
    "step": "", "kernel": "", "call": "", "batch": "", "epoch": "", "sample": "",
}
#: Factors between convertible units: value_in_to = value_in_from * factor.
_SCALE = {("us", "ms"): 1e-3, ("ms", "us"): 1e3, ("us", "s"): 1e-6, ("s", "us"): 1e6,
          ("ms", "s"): 1e-3, ("s", "ms"): 1e3, ("MHz", "GHz"): 1e-3, ("GHz", "MHz"): 1e3}
_COUNT_FIELDS = {"count", "kernels", "matched_kernels", "launch_calls", "kernel_count", "n_steps", "n_timed_steps",
                 "n_epochs", "rank", "n", "iters", "sample_count", "global_batch_size", "warmup_steps_skipped",
                 "batches_per_epoch", "realized_batch", "steps", "jobid", "nodes", "num_workers"}


def canon_unit(u: str | None) -> str:
    """A unit's canonical spelling (``µs``/``us`` -> ``us``, ``percent`` -> ``%``, count words ->
    ``""``); an unknown unit is returned stripped, as written."""
    s = (u or "").strip()
    if "/" in s and s.lower() not in _ALIASES:  # kernels/step, launches/step: a ratio of counts is a count
        num, _, den = s.partition("/")
        if canon_unit(num) == "" and canon_unit(den) == "":
            return ""
    return _ALIASES.get(s.lower(), _ALIASES.get(s, s))


def convert(value: float, from_unit: str | None, to_unit: str | None) -> float | None:
    """``value`` (in ``from_unit``) expressed in ``to_unit``; None when they do not convert."""
    a, b = canon_unit(from_unit), canon_unit(to_unit)
    if a == b:
        return value
    f = _SCALE.get((a, b))
    return None if f is None else value * f


def field_unit(key: str, container: Any) -> str:
    """The unit of field ``key`` inside ``container``: the container's ``unit`` string when it
    has one, else from the key's name (see the module docstring), else unitless ``""``."""
    if isinstance(container, dict) and isinstance(container.get("unit"), str):
        return canon_unit(container["unit"])
    k = key.lower().rsplit(".", 1)[-1] if "." in key else key.lower()
    full = key.lower()
    if "percent" in k or k.endswith("_pct") or k == "pct" or full.endswith(".percent"):
        return "%"
    if k.endswith("samples_per_s"):
        return "samples/s"
    if k.endswith("_ms") or k == "ms" or "_ms_per_" in k:
        return "ms"
    if k.endswith("_us") or k == "us" or "_us_per_" in k:
        return "us"
    if k.endswith("_s") or k == "seconds":
        return "s"
    if k.endswith("_mhz"):
        return "MHz"
    if k.endswith("_w"):
        return "W"
    if k.endswith("gbps"):
        return "GB/s"
    if k == "tflops":
        return "TFLOP/s"
    if k.endswith("_bytes"):
        return "B"
    return ""


# --------------------------------------------------------------------------------------------
# lookup
# --------------------------------------------------------------------------------------------


def lookup(obj: Any, path: str) -> tuple[bool, Any, Any, str]:
    """Follow ``path`` into ``obj``: ``(found, value, container, key)``. At a dict the longest key
    that is a prefix of the rest of the path (up to a dot) wins, so flat keys with dots
    (``gpu_timeline.idle_time.percent``) resolve; at a list the next part is an index."""
    cur, rest, container, key = obj, path, None, ""
    while rest:
        if isinstance(cur, dict):
            hit = None
            for k in sorted((str(k) for k in cur), key=len, reverse=True):
                if rest == k or rest.startswith(k + "."):
                    hit = k
                    break
            if hit is None:
                return False, None, None, ""
            container, key, cur = cur, hit, cur[hit]
            rest = rest[len(hit) + 1:]
        elif isinstance(cur, list):
            head, _, tail = rest.partition(".")
            if not head.isdigit() or int(head) >= len(cur):
                return False, None, None, ""
            container, cur = cur, cur[int(head)]  # a list item keeps the list's key (its unit)
            rest = tail
        else:
            return False, None, None, ""
    return True, cur, container, key


def _last_digit(written: str) -> float:
    """The place value of the last written digit: ``90.8`` -> 0.1, ``1135`` -> 1, ``1.2e-05`` -> 1e-06."""
    s = written.replace(",", "").lower()
    mant, _, exp = s.partition("e")
    dec = len(mant.split(".")[1]) if "." in mant else 0
    return 10.0 ** (int(exp or 0) - dec)


def _rounds_to(written: str, value: float) -> bool:
    w = as_float(written)
    if w is None:
        return False
    half = 0.5 * _last_digit(written)
    return abs(w - value) <= half * (1 + 1e-9) + 1e-12 * max(1.0, abs(value))


def trace_ref(text: str, unit: str, ref: str, sources: dict[str, Any]) -> str | None:
    """None when the number ``text`` (written with ``unit``) traces to field ``ref``
    (``<source>:<path>``) of ``sources`` (source id -> JSON object); else the reason."""
    if ":" not in ref:
        return f"{text}: reference {ref!r} is not <source>:<field>"
    src, path = ref.rsplit(":", 1)
    if src not in sources:
        return f"{text}: unknown source {src!r}"
    found, val, container, key = lookup(sources[src], path)
    if not found:
        return f"{text}: {src} has no field {path!r}"
    v = as_float(val) if not isinstance(val, str) else None
    if v is None:
        return f"{text}: {ref} is not a number ({val!r})"
    fu = field_unit(key, container)
    conv = convert(v, fu, unit)
    if conv is None:
        return f"{text}: unit {unit!r} is not the unit of {ref} ({fu or 'unitless'!r})"
    if not _rounds_to(text, conv):
        return f"{text}: {ref} is {conv:.6g} {canon_unit(unit)}".rstrip() + ", not this number at the written precision"
    return None


def trace_value(value: Any, unit: str, ref: str, sources: dict[str, Any]) -> str | None:
    """Like :func:`trace_ref` for a claim's value (written as ``repr``); a boolean or string value
    must equal the field exactly."""
    if isinstance(value, (bool, str)):
        if ":" not in ref:
            return f"reference {ref!r} is not <source>:<field>"
        src, path = ref.rsplit(":", 1)
        found, val, _, _ = lookup(sources.get(src), path) if src in sources else (False, None, None, "")
        if not found:
            return f"{ref}: no such field"
        return None if val == value else f"{ref} is {val!r}, not {value!r}"
    return trace_ref(repr(value) if isinstance(value, float) else str(value), unit, ref, sources)


def check_text(text: str, refs: Iterable[NumberRef], sources: dict[str, Any]) -> list[str]:
    """Every number in ``text`` with a reference that traces (see the module docstring).
    Returns the problems, one per untraced number (empty when all trace)."""
    refs = list(refs)
    bad: list[str] = []
    for written, _, after in _numbers_with_units(text):
        norm = written.replace(",", "")
        cands = [r for r in refs if r.text.replace(",", "").strip() == norm]
        if not cands:
            bad.append(f"{written}: no entry in numbers")
            continue
        errs = [trace_ref(norm, r.unit, r.ref, sources) for r in cands]
        ok = [r for r, e in zip(cands, errs) if e is None]
        if not ok:
            bad.append(next(e for e in errs if e))
            continue
        if after is not None and not any(convert(1.0, canon_unit(after), r.unit) == 1.0 for r in ok):
            bad.append(f"{written}: written as {after!r}, but its reference is in {ok[0].unit!r}")
    return bad


def claim_sources(claims: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """``claim:<id>`` sources from Claim or VerifiedClaim dicts: fields ``value`` and
    ``rederived_value`` with the claim's ``unit``."""
    out: dict[str, Any] = {}
    for vc in claims:
        cl = vc.get("claim", vc)
        out[f"claim:{cl['id']}"] = {"value": cl.get("value"), "rederived_value": vc.get("rederived_value"),
                                    "unit": cl.get("unit", "")}
    return out


def report_sources(report: dict[str, Any]) -> dict[str, Any]:
    """Sources for text about a report: its claims (:func:`claim_sources`) and ``report``
    (``jobid``)."""
    out = claim_sources(report.get("claims") or [])
    jid = as_float(report.get("jobid"))
    out["report"] = {"jobid": int(jid) if jid is not None and jid.is_integer() else report.get("jobid")}
    return out
