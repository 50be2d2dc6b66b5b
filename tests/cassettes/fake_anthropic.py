#!/usr/bin/env python3
"""A scripted stand-in for the Anthropic Messages API, used ONLY to synthesize the test cassettes.

There is no API key and no network route to api.anthropic.com where this project is built, so the
cassettes under ``tests/cassettes/`` were not recorded from Claude: they were SYNTHESIZED in the
exact Messages API wire format (``POST /v1/messages``; request JSON with ``model``, ``max_tokens``,
``system``, ``messages``, ``tools``, ``tool_choice``; response JSON with ``id``, ``type=message``,
``role``, ``content`` blocks of type ``text`` / ``tool_use``, ``stop_reason`` ``tool_use`` /
``end_turn``, ``usage {input_tokens, output_tokens}``; ``tool_result`` blocks in the follow-up
request; the 529 ``overloaded_error`` body) by running the real client code (langchain-anthropic ->
anthropic SDK -> httpx) against this server and recording with vcrpy on the client side.

The scripted "model" holds no conclusion of its own. Each answer is DERIVED BY RULES from what the
request carries (the agent from the system prompt's first line, the task data from the user message,
the tool results from the ``tool_result`` blocks, ``tool_choice``), so a changed input changes the
answer (``tests/test_llm_fake.py`` checks this):

- analysts choose their queries from the findings (the dominant op category, half the job window),
  read the class from the timeline they fetched (``_trace_reading``), endorse a given claim when their
  own tool result agrees with it and dispute it otherwise;
- verifiers plan one re-derivation per verdict with the tools offered (a telemetry claim over its
  own window), judge each by comparing the field they re-derived with the claim, and stop when
  ``tool_choice`` forces the final tool;
- the synthesizer reads the class from the confirmed claims' values (``_claims_reading``), never
  from the report's class, and explains a difference;
- the lever picker picks among the candidates by the verified class it is given.

Every number it writes carries a ``numbers`` entry pointing at the tool-result field it came from,
written at 3 significant digits (whole numbers from 1000 up).

Faults (``--fault``), applied the same way whether this server answers itself or forwards:

- ``overload-once``: the first request gets HTTP 529 ``{"type":"error","error":{"type":
  "overloaded_error",...}}`` (the client must retry with backoff);
- ``malformed-once``: the first final answer (a ``submit_*`` tool_use) gets its input replaced by
  one that fails the answer schema (the client must send it back and get a valid one);
- ``text-once``: the first answer is replaced by a text-only turn without a tool call
  (``stop_reason: end_turn``; the client must ask again for the tool).
- ``unknown-tool-always``: every answer is replaced by a call of a tool the agent does not have
  (``no_such_tool``): the client must stop the pass after its bound on invalid turns.

``--upstream https://api.anthropic.com`` turns it into a fault-injecting proxy in front of the real
API (headers, including ``x-api-key``, are passed through and never logged or written): that is how
``pytest --record-mode=rewrite`` with a real ``ANTHROPIC_API_KEY`` re-records the fault cassettes.

Run: ``python tests/cassettes/fake_anthropic.py --port-file F [--fault ...] [--upstream URL]``;
it writes its port to ``F`` and serves until killed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STATE = {"overloaded": False, "malformed": False, "text": False}
LOCK = threading.Lock()


# ------------------------------------------------------------------------------------------
# reading a request
# ------------------------------------------------------------------------------------------


def _system_text(req: dict) -> str:
    s = req.get("system") or ""
    if isinstance(s, list):
        return "\n".join(b.get("text", "") for b in s if isinstance(b, dict))
    return str(s)


def _agent(req: dict) -> str:
    first = _system_text(req).strip().splitlines()[0] if _system_text(req).strip() else ""
    return first.lstrip("# ").strip()


def _blocks(msg: dict) -> list[dict]:
    c = msg.get("content")
    if isinstance(c, str):
        return [{"type": "text", "text": c}]
    return [b for b in c or [] if isinstance(b, dict)]


def _user_payload(req: dict) -> dict:
    for b in _blocks(req["messages"][0]):
        if b.get("type") == "text":
            try:
                return json.loads(b["text"])
            except ValueError:
                return {}
    return {}


def _results(req: dict) -> list[dict]:
    """Successful tool results so far, oldest first: ``{evidence_id, tool, query, result}``."""
    out = []
    for m in req["messages"]:
        if m.get("role") != "user":
            continue
        for b in _blocks(m):
            if b.get("type") != "tool_result" or b.get("is_error"):
                continue
            c = b.get("content")
            if isinstance(c, list):
                c = "".join(x.get("text", "") for x in c if isinstance(x, dict))
            try:
                r = json.loads(c) if isinstance(c, str) else c
            except ValueError:
                continue
            if isinstance(r, dict) and "evidence_id" in r:
                out.append(r)
    return out


def _asked(req: dict) -> list[dict]:
    """Every tool_use this model already issued: ``{name, input}``."""
    return [b for m in req["messages"] if m.get("role") == "assistant" for b in _blocks(m) if b.get("type") == "tool_use"]


def _forced(req: dict) -> str | None:
    tc = req.get("tool_choice") or {}
    return tc.get("name") if tc.get("type") == "tool" else None


def _tools(req: dict) -> set[str]:
    return {t.get("name") for t in req.get("tools") or []}


def _get(obj: Any, path: str) -> Any:
    """The field at ``path`` (dict keys may contain dots; list items by index), or None."""
    cur, rest = obj, path
    while rest:
        if isinstance(cur, dict):
            hit = next((k for k in sorted(cur, key=len, reverse=True) if rest == k or rest.startswith(k + ".")), None)
            if hit is None:
                return None
            cur, rest = cur[hit], rest[len(hit) + 1:]
        elif isinstance(cur, list):
            head, _, rest = rest.partition(".")
            if not head.isdigit() or int(head) >= len(cur):
                return None
            cur = cur[int(head)]
        else:
            return None
    return cur


def _fmt(v: float) -> str:
    """A number as a careful writer rounds it (3 significant digits below 1000, whole above)."""
    if isinstance(v, int) or abs(v) >= 1000:
        return f"{round(v):d}"
    s = f"{v:.3g}"
    return s if "e" not in s else f"{v:.6f}".rstrip("0")


class Numbers:
    """Collects the ``numbers`` entries of one answer while its text is written."""

    def __init__(self) -> None:
        self.refs: list[dict] = []

    def say(self, value: float, unit: str, ref: str) -> str:
        text = _fmt(value)
        entry = {"text": text, "unit": unit, "ref": ref}
        if entry not in self.refs:
            self.refs.append(entry)
        return text


def _close(a: float, b: float) -> bool:
    """The model's own sense of "the same number": within 1 unit or 2 %."""
    return abs(a - b) <= max(1.0, 0.02 * max(abs(a), abs(b)))


def _call(name: str, args: dict) -> dict:
    return {"type": "tool_use", "name": name, "input": args}


def _text(s: str) -> dict:
    return {"type": "text", "text": s}


# ------------------------------------------------------------------------------------------
# readings: the model's rules (from the prompts' guidance), applied to the numbers it was given
# ------------------------------------------------------------------------------------------


def _trace_reading(f: dict) -> tuple[str, str]:
    """(class, which numbers decided it) from one rank's trace figures ``f`` (metric -> value)."""
    comm, dl = f.get("exposed_comm"), f.get("dataloader_share")
    idle, mean_k, comp = f.get("idle"), f.get("mean_kernel_us"), f.get("computation")
    if comm is not None and comm >= 20:
        return "communication-bound", "exposed_comm"
    if dl is not None and dl >= 30:
        return "data-loader-bound", "dataloader_share"
    if idle is not None and mean_k is not None and idle >= 50 and mean_k < 10:
        return "dispatch-bound", "idle+mean_kernel_us"
    if comp is not None and comp >= 75:
        return "compute-bound", "computation"
    return "unknown", ""


_METRIC_KEY = {"gpu_timeline.idle_time.percent": "idle", "gpu_timeline.computation_time.percent": "computation",
               "gpu_timeline.exposed_comm_time.percent": "exposed_comm", "kernels.mean_kernel_us": "mean_kernel_us",
               "cpu.dataloader_step_share_pct": "dataloader_share"}


# ------------------------------------------------------------------------------------------
# the scripted agents: each returns a list of content blocks
# ------------------------------------------------------------------------------------------


def _first(res: list[dict], tool: str) -> dict | None:
    return next((r for r in res if r["tool"] == tool), None)


def _endorse(claims: list[dict], got: dict[str, tuple[float, str]], nums: Numbers) -> tuple[list[str], dict[str, str]]:
    """Endorse a given claim when the model's own result for its metric agrees, dispute it when not."""
    endorsed, disputed = [], {}
    for c in claims:
        if c["metric"] not in got or isinstance(c["value"], (bool, str)):
            continue
        v, ref = got[c["metric"]]
        if v is None:
            continue
        if _close(float(c["value"]), float(v)):
            endorsed.append(c["id"])
        else:
            disputed[c["id"]] = (f"my tool returns {nums.say(v, c['unit'], ref)} {c['unit']}, the claim says "
                                 f"{nums.say(c['value'], c['unit'], c['cite_as'])} {c['unit']}")
    return endorsed, disputed


def trace_analyst(req: dict) -> list[dict]:
    data, res, asked, forced = _user_payload(req), _results(req), _asked(req), _forced(req)
    findings = data.get("findings") or {}
    ranks = (findings.get("trace") or findings).get("ranks") or []
    if not asked and not forced:
        cats = (ranks[0].get("ops_by_category") if ranks else None) or []
        top = max(cats, key=lambda c: c.get("percent", 0))["category"] if cats else None
        args = {"category": top, "n": 3} if top else {"n": 3}
        return [_text(f"The largest op category in the findings is {top or 'unknown'}; reading the timeline and "
                      "its top kernels."), _call("trace_timeline", {}), _call("trace_top_kernels", args)]
    tk = _first(res, "kineto.kernel_stats")
    if not forced and tk and tk["result"]["kernels"] and not any(a["name"] == "trace_ops_for_kernel" for a in asked):
        k = tk["result"]["kernels"][0]["name"]
        return [_text("Which op launches the hottest kernel?"),
                _call("trace_ops_for_kernel", {"kernel_substring": k[:40], "n": 3})]
    nums = Numbers()
    tl = _first(res, "tracelens.analyze_trace")
    ops = _first(res, "kineto.ops_for_kernel")
    claims, prose = [], []
    got: dict[str, tuple[float, str]] = {}
    if tl:
        r, e = tl["result"], tl["evidence_id"]
        for k, v in r.items():
            if k.startswith("gpu_timeline.") and k.endswith(".percent"):
                got[k] = (v, f"{e}:{k}")
        if "launch.mean_kernel_us" in r:
            got["kernels.mean_kernel_us"] = (r["launch.mean_kernel_us"], f"{e}:launch.mean_kernel_us")
        f = {_METRIC_KEY[m]: v for m, (v, _) in got.items() if m in _METRIC_KEY}
        if r.get("step_time_ms") and r.get("dataloader_ms_per_step") is not None:
            f["dataloader_share"] = 100.0 * r["dataloader_ms_per_step"] / r["step_time_ms"]
        klass, why = _trace_reading(f)
        busy, idle = r.get("gpu_timeline.busy_time.percent"), r.get("gpu_timeline.idle_time.percent")
        if busy is not None and idle is not None:
            prose.append(f"The GPU is busy {nums.say(busy, '%', e + ':gpu_timeline.busy_time.percent')}% of the "
                         f"profiled window and idle {nums.say(idle, '%', e + ':gpu_timeline.idle_time.percent')}%.")
        if klass == "compute-bound":
            prose.append(f"Computation covers {nums.say(f['computation'], '%', got['gpu_timeline.computation_time.percent'][1])}% "
                         "of the window, so the time goes to the kernels themselves: a compute-bound timeline.")
        elif klass == "dispatch-bound":
            prose.append(f"Kernels average {nums.say(f['mean_kernel_us'], 'µs', got['kernels.mean_kernel_us'][1])} µs "
                         "with the GPU mostly idle between them: it waits on kernel launches (dispatch-bound).")
        elif klass == "data-loader-bound":
            prose.append(f"The DataLoader takes {nums.say(r['dataloader_ms_per_step'], 'ms', e + ':dataloader_ms_per_step')} ms "
                         f"of each {nums.say(r['step_time_ms'], 'ms', e + ':step_time_ms')} ms step: data-loader-bound.")
        elif klass == "communication-bound":
            prose.append(f"Exposed communication takes {nums.say(f['exposed_comm'], '%', got['gpu_timeline.exposed_comm_time.percent'][1])}% "
                         "of the window: communication-bound.")
        else:
            prose.append("The timeline alone does not settle the class.")
    if tk:
        r, e = tk["result"], tk["evidence_id"]
        cat = r["category"]
        share = r["category_percent_of_kernel_time"]
        claims.append({"name": f"{cat.lower()}_kernel_share",
                       "statement": f"Kernels launched by {cat} ops take {nums.say(share, '%', e + ':category_percent_of_kernel_time')}% "
                                    "of all kernel time.",
                       "metric": f"kernels.category.{cat}.percent_of_kernel_time", "value": share, "unit": "%",
                       "value_ref": f"{e}:category_percent_of_kernel_time", "confidence": 0.8})
        if r["kernels"]:
            k0 = r["kernels"][0]
            claims.append({"name": f"top_{cat.lower()}_kernel_mean_us",
                           "statement": f"The hottest {cat} kernel runs {nums.say(k0['count'], '', e + ':kernels.0.count')} "
                                        f"times at {nums.say(k0['mean_us'], 'µs', e + ':kernels.0.mean_us')} µs each.",
                           "metric": f"kernels.top_{cat.lower()}.mean_us", "value": k0["mean_us"], "unit": "µs",
                           "value_ref": f"{e}:kernels.0.mean_us", "confidence": 0.8})
    if ops and ops["result"]["ops"]:
        o, e = ops["result"]["ops"][0], ops["evidence_id"]
        claims.append({"name": "hot_kernel_launcher",
                       "statement": f"{o['op']} launches {nums.say(o['kernels'], '', e + ':ops.0.kernels')} of the "
                                    f"{nums.say(ops['result']['matched_kernels'], '', e + ':matched_kernels')} kernels "
                                    "matching the hottest kernel's name.",
                       "metric": "kernels.hot_kernel.launcher_kernels", "value": o["kernels"], "unit": "kernels",
                       "value_ref": f"{e}:ops.0.kernels", "confidence": 0.8})
        prose.append(f"The hottest kernel comes from {o['op']}.")
    endorsed, disputed = _endorse(data.get("claims") or [], got, nums)
    return [_call("submit_analysis", {"endorsed": endorsed, "disputed": disputed, "new_claims": claims,
                                      "prose": " ".join(prose) or "No timeline was read.", "numbers": nums.refs})]


def telemetry_analyst(req: dict) -> list[dict]:
    data, res, asked, forced = _user_payload(req), _results(req), _asked(req), _forced(req)
    if not asked and not forced:
        win = ((data.get("findings") or {}).get("telemetry") or {}).get("window") or [0, 40]
        half = max(1.0, float(round((float(win[1]) - float(win[0])) / 2)))
        return [_text("Does the SM clock hold across the job? Both halves, power max, and the FOM."),
                _call("telemetry_stat", {"metric": "sm_clock", "stat": "avg", "start_offset_s": 0, "end_offset_s": half}),
                _call("telemetry_stat", {"metric": "sm_clock", "stat": "avg", "start_offset_s": half}),
                _call("telemetry_stat", {"metric": "power", "stat": "max"}),
                _call("fom_read", {})]
    nums = Numbers()
    claims, got, halves = [], {}, []
    for a, r in zip(asked, _results_for(req)):
        if a["name"] != "telemetry_stat" or not r.get("evidence_id"):
            continue
        e, out = r["evidence_id"], r["result"]
        key = next(k for k in out if k.startswith("telemetry."))
        v, unit = out[key], out["unit"]
        if v is None:
            continue
        w = out["window_s"]
        sub = a["input"].get("start_offset_s") is not None or a["input"].get("end_offset_s") is not None
        part = "" if not sub else ("_first_half" if not a["input"].get("start_offset_s") else "_second_half")
        m, s = key.split(".")[1:3]
        if part:
            halves.append((w[0], v, f"{e}:{key}", unit))
        else:
            got[key] = (v, f"{e}:{key}")
        claims.append({"name": f"{m}_{s}{part}",
                       "statement": f"{m} {s} over seconds {nums.say(w[0], 's', e + ':window_s.0')}-"
                                    f"{nums.say(w[1], 's', e + ':window_s.1')} of the job is "
                                    f"{nums.say(v, unit, e + ':' + key)} {unit} (a time average of samples, not a burst rate).",
                       "metric": key + (part.replace("_", ".", 1) if part else ""), "value": v, "unit": unit,
                       "value_ref": f"{e}:{key}", "confidence": 0.75})
    prose = []
    if len(halves) == 2:
        (_, a, ra, u), (_, b, rb, _) = sorted(halves)
        trend = "holds steady" if _close(a, b) else ("drops in the second half" if b < a else "rises in the second half")
        prose.append(f"The SM clock {trend}: {nums.say(a, u, ra)} {u} then {nums.say(b, u, rb)} {u}.")
    fom = _first(res, "fom.parse_log")
    if fom and fom["result"].get("fom.steady_step_time_s") is not None:
        v, e = fom["result"]["fom.steady_step_time_s"], fom["evidence_id"]
        got["fom.steady_step_time_s"] = (v, f"{e}:fom.steady_step_time_s")
        claims.append({"name": "steady_step_time_reread",
                       "statement": f"Re-reading the log, the steady step takes {nums.say(v, 's', e + ':fom.steady_step_time_s')} s.",
                       "metric": "fom.steady_step_time_s.reread", "value": v, "unit": "s",
                       "value_ref": f"{e}:fom.steady_step_time_s", "confidence": 0.85})
        prose.append(f"The steady step takes {nums.say(v, 's', e + ':fom.steady_step_time_s')} s.")
    endorsed, disputed = _endorse(data.get("claims") or [], got, nums)
    return [_call("submit_analysis", {"endorsed": endorsed, "disputed": disputed, "new_claims": claims,
                                      "prose": " ".join(prose) or "No telemetry answered.", "numbers": nums.refs})]


_TRACE_FIELD = {"kernels.mean_kernel_us": "launch.mean_kernel_us", "kernels.kernels_per_step": "kernels_per_step",
                "kernels.short_kernel_count_pct": "short_kernels.count_pct",
                "cpu.dataloader_step_share_pct": "dataloader_step_share_pct"}
_FOM_FIELD = {"fom.steady_step_time_s": "steady_step_time_s", "fom.throughput_samples_per_s": "throughput_samples_per_s"}


def _window(v: dict) -> dict:
    for e in v.get("evidence") or []:
        a = e.get("args") or {}
        if a.get("start_offset_s") is not None or a.get("end_offset_s") is not None:
            return {k: a[k] for k in ("start_offset_s", "end_offset_s") if a.get(k) is not None}
    return {}


def _need(v: dict, domain: str, tools: set[str]) -> tuple[str, dict, str] | None:
    """(tool, args, field) that re-derives verdict ``v`` with the tools offered, or None."""
    m = v["metric"]
    # a claim read with the kineto reader needs another reader: trace_rederive is kineto too
    kineto_claim = any(str(e.get("tool", "")).startswith("kineto.") for e in v.get("evidence") or [])
    if domain == "trace" and "trace_rederive" in tools and not kineto_claim:
        if m.startswith(("gpu_timeline.", "ops_by_category.")):
            return "trace_rederive", {}, m
        if m in _TRACE_FIELD:
            return "trace_rederive", {}, _TRACE_FIELD[m]
        if m.startswith("kernels.category."):
            return "trace_rederive", {}, "kernels_by_category." + m.split(".", 2)[2]
    if domain == "telemetry":
        parts = m.split(".")
        if parts[0] == "telemetry" and len(parts) >= 3 and "telemetry_raw_stat" in tools:
            return "telemetry_raw_stat", {"metric": parts[1], "stat": parts[2], **_window(v)}, f"raw.{parts[1]}.{parts[2]}"
        if m in _FOM_FIELD and "log_reread" in tools:
            return "log_reread", {}, _FOM_FIELD[m]
    return None


def _verifier(req: dict, domain: str) -> list[dict]:
    data, res, asked, forced = _user_payload(req), _results(req), _asked(req), _forced(req)
    tools = _tools(req)
    verdicts = [v for v in data.get("verdicts") or [] if not isinstance(v["value"], (bool, str))]
    plan: list[tuple[str, dict]] = []
    for v in sorted(verdicts, key=lambda v: v["verdict"] != "inconclusive"):
        if v["verdict"] in ("refuted", "unsupported"):
            continue
        n = _need(v, domain, tools)
        if n and (n[0], n[1]) not in plan:
            plan.append((n[0], n[1]))
    if "node_probe" in tools:
        if domain == "trace" and any(v["metric"] == "gpu_timeline.computation_time.percent" for v in verdicts):
            plan.append(("node_probe", {"check": "matmul"}))
        if domain == "telemetry" and any(v["metric"].startswith(("telemetry.sm_clock", "telemetry.power")) for v in verdicts):
            plan.append(("node_probe", {"check": "gpu_clocks"}))
    done = [(a["name"], a["input"]) for a in asked]
    todo = [c for c in plan if c not in done]
    if todo and not forced:
        return [_text("Re-deriving the claims with my own tools."), *[_call(n, a) for n, a in todo[:4]]]
    nums = Numbers()
    reviews, refuted = [], []
    for v in verdicts:
        n = _need(v, domain, tools)
        if n is None:
            continue
        tool, args, fieldname = n
        r = next((x for x, (an, ai) in zip(_results_for(req), done) if an == tool and ai == args), None)
        if r is None or not r.get("evidence_id"):
            continue
        got = _get(r["result"], fieldname)
        if got is None or isinstance(got, (bool, str)):
            continue
        ref = f"{r['evidence_id']}:{fieldname}"
        ok = _close(float(v["value"]), float(got))
        reviews.append({"claim_id": v["claim_id"], "verdict": "confirmed" if ok else "refuted", "rederived_ref": ref,
                        "note": f"{r['tool']} re-derives {nums.say(got, v['unit'], ref)} {v['unit']}".rstrip()})
        if not ok:
            refuted.append(v["claim_id"])
    tools_used = sorted({r["tool"] for r in res})
    prose = [f"Re-derived with {', '.join(tools_used) or 'no tool'}; "
             + (f"refuted {', '.join(refuted)}." if refuted else "the re-derived values agree with the claims.")]
    probe = _first(res, "slurm.srun_probe")
    if probe:
        p, e = probe["result"], probe["evidence_id"]
        if not p.get("ran"):
            prose.append(f"The node probe ({p.get('check')}) was {p.get('reason')}.")
        elif "tflops" in (p.get("result") or {}):
            prose.append(f"The {p['check']} probe on {p['node']} measures "
                         f"{nums.say(p['result']['tflops'], 'TFLOP/s', e + ':result.tflops')} TFLOP/s.")
        else:
            prose.append(f"The {p['check']} probe ran on {p['node']}.")
    return [_call("submit_review", {"reviews": reviews, "prose": " ".join(prose), "numbers": nums.refs})]


def _results_for(req: dict) -> list[dict | None]:
    """The result of each tool_use in issue order (None for an error), aligned with :func:`_asked`."""
    by_id: dict[str, dict | None] = {}
    for m in req["messages"]:
        if m.get("role") != "user":
            continue
        for b in _blocks(m):
            if b.get("type") != "tool_result":
                continue
            c = b.get("content")
            if isinstance(c, list):
                c = "".join(x.get("text", "") for x in c if isinstance(x, dict))
            try:
                r = json.loads(c) if isinstance(c, str) else c
            except ValueError:
                r = None
            by_id[b.get("tool_use_id")] = r if isinstance(r, dict) and "evidence_id" in r and not b.get("is_error") else None
    return [by_id.get(a.get("id")) or {"tool": None, "result": {}, "evidence_id": None} for a in _asked(req)]


def _claims_reading(claims: list[dict]) -> tuple[str, list[dict]]:
    """(class, the claims that decided it) from the confirmed claims' values only."""
    conf = [c for c in claims if c.get("verdict") == "confirmed" and c["metric"] in _METRIC_KEY
            and isinstance(c["value"], (int, float)) and not isinstance(c["value"], bool)]
    f = {_METRIC_KEY[c["metric"]]: c["value"] for c in conf}
    klass, why = _trace_reading(f)
    keys = {"exposed_comm": ["exposed_comm"], "dataloader_share": ["dataloader_share"],
            "idle+mean_kernel_us": ["idle", "mean_kernel_us"], "computation": ["computation"]}.get(why, [])
    return klass, [c for c in conf if _METRIC_KEY[c["metric"]] in keys]


def synthesizer(req: dict) -> list[dict]:
    rep = _user_payload(req).get("report") or {}
    claims = [c for c in rep.get("claims") or [] if isinstance(c, dict)]
    mine, deciding = _claims_reading(claims)
    nums = Numbers()
    det = (rep.get("bottleneck") or {}).get("klass")
    cite = lambda c: f"`{c['id']}` ({nums.say(c['value'], c['unit'], c['cite_as'])} {c['unit']})"  # noqa: E731
    lines = [f"Job {nums.say(int(rep['jobid']), '', 'report:jobid') if str(rep.get('jobid', '')).isdigit() else rep.get('jobid')} "
             f"ran on {', '.join(rep.get('nodes_list') or ['unknown nodes'])}; its confirmed claims read as **{mine}**."]
    if deciding:
        lines.append("Deciding: " + ", ".join(cite(c) for c in deciding) + ".")
    bad = [c for c in claims if c.get("verdict") in ("refuted", "unsupported")]
    if bad:
        lines.append("Not findings: " + ", ".join(f"`{c['id']}` ({c['verdict']})" for c in bad[:5]) + ".")
    if rep.get("missing"):
        lines.append("Some inputs were missing (see the report).")
    note = ""
    if det and mine != det:
        note = (f"The confirmed claims cross no threshold of the {det} rule I apply" if not deciding else
                f"By the confirmed claims ({', '.join(cite(c) for c in deciding)}) the job reads as {mine}, not {det}")
    levers = {lv["name"]: (f"Aimed at a {mine} job: " + ", ".join(cite(c) for c in deciding) + "." if deciding
                           else f"Recommended by the rules for a {det} job; the confirmed claims do not decide it.")
              for lv in rep.get("levers") or []}
    return [_call("submit_summary", {"executive_summary": " ".join(lines), "lever_explanations": levers,
                                     "bottleneck_class": mine, "class_note": note, "numbers": nums.refs})]


_VARIANCE = {"low": 0, "normal": 1, "high": 2}


def lever_picker(req: dict) -> list[dict]:
    data = _user_payload(req)
    b = data.get("bottleneck") or {}
    cands = data.get("candidates") or []
    klass, verified = b.get("class"), b.get("verified_by") or []
    rec = data.get("recommended") or []
    pool = [c for c in cands if verified and klass in c.get("targets", [])] or cands
    pick = min(pool, key=lambda c: (c["name"] not in rec, _VARIANCE.get(c.get("variance"), 1),
                                    c.get("status") != "candidate", cands.index(c)))
    nums = Numbers()
    conf = {c["id"]: c for c in data.get("confirmed_claims") or []}
    basis = next((conf[i] for i in verified if i in conf and isinstance(conf[i]["value"], (int, float))
                  and not isinstance(conf[i]["value"], bool)), None)
    if verified and basis is not None:
        reason = (f"{pick['name']} targets the verified {klass} class: `{basis['id']}` is "
                  f"{nums.say(basis['value'], basis['unit'], basis['cite_as'])} {basis['unit']}.")
        claims = [basis["id"]]
    else:
        reason = f"No verified class to aim at; {pick['name']} is the first fitting candidate."
        claims = []
    return [_call("submit_pick", {"lever": pick["name"], "reason": reason, "claims": claims, "numbers": nums.refs})]


AGENTS = {
    "trace_analyst": trace_analyst,
    "telemetry_analyst": telemetry_analyst,
    "trace_verifier": lambda r: _verifier(r, "trace"),
    "telemetry_verifier": lambda r: _verifier(r, "telemetry"),
    "synthesizer": synthesizer,
    "lever_picker": lever_picker,
}


def _rejected_numbers(req: dict) -> list[str]:
    """Numbers the client named as untraced in its latest rejection (``rejected: numbers not traced
    to a tool-result field: 935: ...; 40: ...``)."""
    last = req["messages"][-1]
    out: list[str] = []
    for b in _blocks(last):
        c = b.get("content")
        if isinstance(c, list):
            c = "".join(x.get("text", "") for x in c if isinstance(x, dict))
        if b.get("type") == "tool_result" and isinstance(c, str) and "numbers not traced" in c:
            body = c.split("field:", 1)[-1].split(". Add", 1)[0]
            out += [part.strip().split(":", 1)[0] for part in body.split(";") if ":" in part]
    return out


def _drop_numbers(text: str, bad: list[str]) -> str:
    """``text`` without the sentences that state one of ``bad`` (how this model repairs an answer)."""
    import re

    keep = [x for x in re.split(r"(?<=[.!?])\s+", text)
            if not any(re.search(rf"(?<![\w.]){re.escape(n)}(?![\d])", x) for n in bad)]
    return " ".join(keep)


def _repair(blocks: list[dict], bad: list[str]) -> list[dict]:
    """Drop the sentences with the rejected numbers from every text field of the final answer."""
    for b in blocks:
        if b.get("type") != "tool_use" or not b["name"].startswith("submit_"):
            continue
        x = b["input"]
        for k in ("prose", "executive_summary", "class_note", "reason"):
            if isinstance(x.get(k), str):
                x[k] = _drop_numbers(x[k], bad) or "(withdrawn)"
        for r in x.get("reviews") or []:
            r["note"] = _drop_numbers(r.get("note", ""), bad)
        for k, v in list((x.get("lever_explanations") or {}).items()):
            x["lever_explanations"][k] = _drop_numbers(v, bad) or "(withdrawn)"
        x["new_claims"] = [c for c in x.get("new_claims") or [] if _drop_numbers(c["statement"], bad)] \
            if "new_claims" in x else x.get("new_claims")
        if x.get("new_claims") is None:
            x.pop("new_claims", None)
    return blocks


def respond(req: dict, raw: bytes) -> dict:
    """A Messages API response for ``req`` (deterministic: ids from a hash of the body)."""
    agent = _agent(req)
    content = AGENTS[agent](req) if agent in AGENTS else [{"type": "text", "text": "Unknown agent."}]
    bad = _rejected_numbers(req)
    if bad:
        content = _repair(content, bad)
    h = hashlib.sha256(raw).hexdigest()
    for i, b in enumerate(content):
        if b["type"] == "tool_use":
            b["id"] = f"toolu_{hashlib.sha256(f'{h}:{i}'.encode()).hexdigest()[:24]}"
    has_tool = any(b["type"] == "tool_use" for b in content)
    return {
        "id": f"msg_{h[:24]}", "type": "message", "role": "assistant", "model": req.get("model"),
        "content": content, "stop_reason": "tool_use" if has_tool else "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": max(1, len(raw) // 4), "output_tokens": max(1, len(json.dumps(content)) // 4),
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }


def text_only(resp: dict) -> dict:
    """Replace the answer by a text-only turn (no tool call, ``stop_reason: end_turn``)."""
    resp["content"] = [{"type": "text", "text": "I have what I need; here is my answer in words."}]
    resp["stop_reason"] = "end_turn"
    return resp


def unknown_tool(resp: dict) -> dict:
    """Replace the answer by one call of a tool no agent has (``stop_reason: tool_use``)."""
    n = int(STATE.get("unknown", 0)) + 1
    STATE["unknown"] = n
    resp["content"] = [{"type": "tool_use", "id": f"toolu_unknown_{n:04d}", "name": "no_such_tool", "input": {}}]
    resp["stop_reason"] = "tool_use"
    return resp


def corrupt(resp: dict) -> dict:
    """Replace the first ``submit_*`` tool_use input by one that fails the answer schema."""
    for b in resp.get("content") or []:
        if b.get("type") == "tool_use" and str(b.get("name", "")).startswith("submit_"):
            b["input"] = {"answer": "see above", "prose": ""}
            return resp
    return resp


# ------------------------------------------------------------------------------------------
# the HTTP server
# ------------------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    fault: str | None = None
    upstream: str | None = None

    def log_message(self, *args: Any) -> None:  # never log requests (headers carry the key)
        pass

    def _send(self, code: int, obj: dict) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if not self.path.startswith("/v1/messages"):
            return self._send(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})
        with LOCK:
            if self.fault == "overload-once" and not STATE["overloaded"]:
                STATE["overloaded"] = True
                return self._send(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        req = json.loads(raw)
        if self.upstream:
            fwd = urllib.request.Request(self.upstream.rstrip("/") + self.path, data=raw, method="POST")
            for k in ("x-api-key", "anthropic-version", "anthropic-beta", "content-type"):
                if self.headers.get(k):
                    fwd.add_header(k, self.headers[k])
            try:
                with urllib.request.urlopen(fwd, timeout=300) as r:
                    code, resp = r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                code, resp = e.code, json.loads(e.read() or b"{}")
        else:
            code, resp = 200, respond(req, raw)
        with LOCK:
            if code == 200 and self.fault == "malformed-once" and not STATE["malformed"] and any(
                    b.get("type") == "tool_use" and str(b.get("name", "")).startswith("submit_")
                    for b in resp.get("content") or []):
                STATE["malformed"] = True
                resp = corrupt(resp)
            elif code == 200 and self.fault == "text-once" and not STATE["text"]:
                STATE["text"] = True
                resp = text_only(resp)
            elif code == 200 and self.fault == "unknown-tool-always":
                resp = unknown_tool(resp)
        self._send(code, resp)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--fault", choices=["overload-once", "malformed-once", "text-once", "unknown-tool-always"],
                    default=None)
    ap.add_argument("--upstream", default=None)
    a = ap.parse_args()
    Handler.fault, Handler.upstream = a.fault, a.upstream
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(a.port_file, "w") as f:
        f.write(str(srv.server_address[1]))
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
