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

The server's answers are rule-based and read the request like a model would: the agent from the
system prompt's first line, the task data from the user message, the tool results from the
``tool_result`` blocks. Every number it puts in a claim is copied from a tool result it cites.

Faults (``--fault``), applied the same way whether this server answers itself or forwards:

- ``overload-once``: the first request gets HTTP 529 ``{"type":"error","error":{"type":
  "overloaded_error",...}}`` (the client must retry with backoff);
- ``malformed-once``: the first final answer (a ``submit_*`` tool_use) gets its input replaced by
  one that fails the answer schema (the client must send it back and get a valid one).

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
import re
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STATE = {"overloaded": False, "malformed": False}
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


def _tool_results(req: dict) -> list[tuple[dict, bool]]:
    """All tool results so far: (parsed JSON content, is_error)."""
    out = []
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
                parsed = json.loads(c) if isinstance(c, str) else c
            except ValueError:
                parsed = {"text": c}
            out.append((parsed if isinstance(parsed, dict) else {"text": parsed}, bool(b.get("is_error"))))
    return out


def _turns(req: dict) -> int:
    return sum(1 for m in req["messages"] if m.get("role") == "assistant")


def _results_by_tool(req: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r, err in _tool_results(req):
        if not err and "evidence_id" in r:
            out.setdefault(r.get("tool", ""), []).append(r)
    return out


def _fmt(v: float) -> str:
    """A number as a careful writer rounds it (3 significant digits below 1000, whole above)."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int) or abs(v) >= 1000:
        return f"{round(v):d}"
    return f"{v:.3g}"


# ------------------------------------------------------------------------------------------
# the scripted agents: each returns a list of content blocks
# ------------------------------------------------------------------------------------------


def _call(name: str, args: dict) -> dict:
    return {"type": "tool_use", "name": name, "input": args}


def trace_analyst(req: dict) -> list[dict]:
    data = _user_payload(req)
    res = _results_by_tool(req)
    turn = _turns(req)
    ranks = ((data.get("findings") or {}).get("trace") or {}).get("ranks") or []
    if turn == 0:
        cats = (ranks[0].get("ops_by_category") if ranks else None) or []
        top = max(cats, key=lambda c: c.get("percent", 0))["category"] if cats else "GEMM"
        return [{"type": "text", "text": f"The dominant op category is {top}; I will read the timeline and "
                                         "the top GEMM kernels."},
                _call("trace_timeline", {}), _call("trace_top_kernels", {"category": "GEMM", "n": 3})]
    if turn == 1 and "kineto.kernel_stats" in res:
        k = res["kineto.kernel_stats"][0]["result"]["kernels"][0]["name"]
        return [{"type": "text", "text": "Which op launches the hottest GEMM kernel?"},
                _call("trace_ops_for_kernel", {"kernel_substring": k[:40], "n": 3})]
    tl = res["tracelens.analyze_trace"][0]
    tk = res["kineto.kernel_stats"][0]
    ops = res.get("kineto.ops_for_kernel", [None])[0]
    busy = tl["result"]["gpu_timeline.busy_time.percent"]
    idle = tl["result"]["gpu_timeline.idle_time.percent"]
    gemm = tk["result"]["category_percent_of_kernel_time"]
    k0 = tk["result"]["kernels"][0]
    claims = [
        {"name": "gemm_kernel_share", "statement": f"GEMM-launched kernels take {_fmt(gemm)}% of all kernel time.",
         "metric": "kernels.category.GEMM.percent_of_kernel_time", "value": gemm, "unit": "%",
         "evidence_ids": [tk["evidence_id"]], "confidence": 0.8},
        {"name": "top_gemm_kernel_mean_us",
         "statement": f"The hottest GEMM kernel runs {k0['count']} times at {_fmt(k0['mean_us'])} µs each.",
         "metric": "kernels.top_gemm.mean_us", "value": k0["mean_us"], "unit": "µs",
         "evidence_ids": [tk["evidence_id"]], "confidence": 0.8},
    ]
    prose = (f"The GPU is busy {_fmt(busy)}% of the profiled window and idle {_fmt(idle)}%, so the timeline is "
             f"densely packed. GEMM-launched kernels take {_fmt(gemm)}% of kernel time; the hottest one averages "
             f"{_fmt(k0['mean_us'])} µs, far above launch overhead.")
    if ops and ops["result"]["ops"]:
        o = ops["result"]["ops"][0]
        claims.append({"name": "hot_kernel_launcher", "statement": f"{o['op']} launches {o['kernels']} of the "
                       f"{ops['result']['matched_kernels']} kernels matching the hottest GEMM kernel's name.",
                       "metric": "kernels.top_gemm.launcher_kernels", "value": o["kernels"], "unit": "kernels",
                       "evidence_ids": [ops["evidence_id"]], "confidence": 0.8})
        prose += f" They come from {o['op']}."
    prose += " Few, long kernels keep the device fed: the work is GEMM-heavy computation, not launch overhead."
    return [_call("submit_analysis", {"endorsed": [c["id"] for c in data.get("claims") or []], "disputed": {},
                                      "new_claims": claims, "prose": prose})]


def telemetry_analyst(req: dict) -> list[dict]:
    data = _user_payload(req)
    res = _results_by_tool(req)
    turn = _turns(req)
    if turn == 0:
        win = ((data.get("findings") or {}).get("telemetry") or {}).get("window") or [0, 40]
        half = max(1.0, round((float(win[1]) - float(win[0])) / 2))
        return [{"type": "text", "text": "Is the SM clock steady across the job? Power max vs average, and the FOM."},
                _call("telemetry_stat", {"metric": "sm_clock", "stat": "avg", "start_offset_s": 0, "end_offset_s": half}),
                _call("telemetry_stat", {"metric": "power", "stat": "max"}),
                _call("fom_read", {})]
    tel = res.get("promql.job_stat", [])
    fom = res.get("fom.parse_log", [None])[0]
    claims, bits = [], []
    for r in tel:
        key = next(k for k in r["result"] if k.startswith("telemetry."))
        v = r["result"][key]
        if v is None:
            continue
        w = r["result"]["window_s"]
        name = key.split(".", 1)[1].replace(".", "_") + ("_first_half" if w[0] == 0 and "sm_clock" in key else "")
        claims.append({"name": name, "statement": f"{key} over seconds {_fmt(w[0])}-{_fmt(w[1])} of the job is "
                       f"{_fmt(v)} {r['result']['unit']} (a {key.rsplit('.', 1)[1]} over 1 s samples, not a burst rate).",
                       "metric": key + (".first_half" if "sm_clock" in key else ""), "value": v,
                       "unit": r["result"]["unit"], "evidence_ids": [r["evidence_id"]], "confidence": 0.75})
        bits.append(f"{key} {_fmt(v)} {r['result']['unit']}")
    if fom and fom["result"].get("fom.steady_step_time_s") is not None:
        v = fom["result"]["fom.steady_step_time_s"]
        claims.append({"name": "steady_step_time_reread", "statement": f"Re-reading the log, the steady step takes "
                       f"{_fmt(v)} s.", "metric": "fom.steady_step_time_s", "value": v, "unit": "s",
                       "evidence_ids": [fom["evidence_id"]], "confidence": 0.85})
        bits.append(f"steady step {_fmt(v)} s")
    prose = ("Telemetry joined through rmsjob_info shows " + "; ".join(bits) + ". Clock and power stay high while "
             "the GPU is busy, which supports a compute-bound reading rather than a trickle of small kernels.")
    return [_call("submit_analysis", {"endorsed": [c["id"] for c in data.get("claims") or []], "disputed": {},
                                      "new_claims": claims, "prose": prose})]


TOOL_FOR = {"kineto.kernel_stats": "trace_top_kernels", "kineto.ops_for_kernel": "trace_ops_for_kernel",
            "tracelens.analyze_trace": "trace_timeline", "promql.job_stat": "telemetry_stat",
            "fom.parse_log": "fom_read"}


def _numbers(obj: Any) -> list[float]:
    if isinstance(obj, bool) or obj is None:
        return []
    if isinstance(obj, (int, float)):
        return [float(obj)]
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _numbers(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _numbers(v)]
    return []


def _agrees(a: float, b: float) -> bool:
    return abs(a - b) <= max(1.0, 0.02 * max(abs(a), abs(b)))


def _verifier(req: dict, domain: str) -> list[dict]:
    data = _user_payload(req)
    res = _results_by_tool(req)
    verdicts = data.get("verdicts") or []
    if _turns(req) == 0:
        calls = []
        if domain == "trace":
            if any(v["metric"].startswith(("gpu_timeline.", "ops_by_category.", "kernels.")) for v in verdicts):
                calls.append(_call("trace_timeline", {}))
        else:
            want = sorted((v for v in verdicts if v["metric"].startswith("telemetry.")
                           and v["metric"].count(".") == 2 and not isinstance(v["value"], bool)),
                          key=lambda v: v["verdict"] != "inconclusive")[:3]
            for v in want:
                _, m, s = v["metric"].split(".")
                calls.append(_call("telemetry_stat", {"metric": m, "stat": s}))
            if any(v["metric"].startswith("fom.") for v in verdicts):
                calls.append(_call("fom_read", {}))
        # an inconclusive claim made from one of my tools: re-run the same query
        props = {t.get("name"): set((t.get("input_schema") or {}).get("properties") or {}) for t in req.get("tools") or []}
        have = set(props)
        for v in verdicts:
            if v["verdict"] != "inconclusive" or isinstance(v["value"], (bool, str)):
                continue
            for e in v.get("evidence") or []:
                name = TOOL_FOR.get(e.get("tool"))
                if name in have and name != "trace_timeline" and len(calls) < 6:
                    calls.append(_call(name, {k: x for k, x in (e.get("args") or {}).items() if k in props[name]}))
        if not calls:
            return [_call("submit_review", {"reviews": [], "prose": "Nothing to re-check with my tools."})]
        return [{"type": "text", "text": "Re-running the tools behind the claims."}, *calls]
    found: dict[str, tuple[Any, str]] = {}
    for rs in res.values():
        for r in rs:
            for k, v in r["result"].items():
                found.setdefault(k, (v, r["evidence_id"]))
    reviews, refuted = [], []
    for v in verdicts:
        if v["metric"] not in found or isinstance(v["value"], (bool, str)):
            continue
        got, eid = found[v["metric"]]
        if got is None:
            continue
        if _agrees(float(v["value"]), float(got)):
            reviews.append({"claim_id": v["claim_id"], "verdict": "confirmed", "rederived_value": got,
                            "evidence_ids": [eid], "note": f"re-ran the tool: {_fmt(got)} {v['unit']}"})
        else:
            reviews.append({"claim_id": v["claim_id"], "verdict": "refuted", "rederived_value": got,
                            "evidence_ids": [eid], "note": f"the tool returns {_fmt(got)} {v['unit']}, "
                                                           f"not {_fmt(v['value'])}"})
            refuted.append(v["claim_id"])
    done = {r["claim_id"] for r in reviews}
    for v in verdicts:
        if v["claim_id"] in done or v["verdict"] != "inconclusive" or isinstance(v["value"], (bool, str)):
            continue
        for rs in res.values():
            for r in rs:
                hit = next((x for x in _numbers(r["result"]) if abs(x - float(v["value"])) <= 0.01 * abs(x)), None)
                if hit is not None and v["claim_id"] not in done:
                    done.add(v["claim_id"])
                    reviews.append({"claim_id": v["claim_id"], "verdict": "confirmed", "rederived_value": hit,
                                    "evidence_ids": [r["evidence_id"]],
                                    "note": f"re-ran {r['tool']} with the same arguments: {_fmt(hit)} {v['unit']}"})
    prose = (f"Re-checked {len(reviews)} claims with my own tool calls"
             + (f"; refuted {', '.join(refuted)}." if refuted else "; all agree."))
    return [_call("submit_review", {"reviews": reviews, "prose": prose})]


def synthesizer(req: dict) -> list[dict]:
    rep = (_user_payload(req).get("report") or {})
    b = rep.get("bottleneck") or {}
    klass = b.get("klass", "unknown")
    claims = [c for c in rep.get("claims") or [] if isinstance(c, dict)]
    conf = [c for c in claims if c.get("verdict") == "confirmed"]
    bad = [c for c in claims if c.get("verdict") in ("refuted", "unsupported")]
    support = [c for c in conf if c["id"] in (b.get("supporting_claims") or [])] or conf
    lines = [f"The job ran on {', '.join(rep.get('nodes_list') or ['unknown nodes'])} and is **{klass}**."]
    for c in support[:4]:
        if isinstance(c["value"], (int, float)) and not isinstance(c["value"], bool):
            lines.append(f"`{c['id']}` ({_fmt(c['value'])} {c['unit']}): {c['statement']}")
    if bad:
        lines.append("Not findings: " + ", ".join(f"`{c['id']}` ({c['verdict']})" for c in bad[:5]) + ".")
    if rep.get("missing"):
        lines.append(f"Some inputs were missing: {len(rep['missing'])} (see the report).")
    levers = {lv["name"]: f"Fits a {klass} job: it acts on what the confirmed claims show is the limit."
              for lv in rep.get("levers") or []}
    return [_call("submit_summary", {"executive_summary": " ".join(lines), "lever_explanations": levers})]


AGENTS = {
    "trace_analyst": trace_analyst,
    "telemetry_analyst": telemetry_analyst,
    "trace_verifier": lambda r: _verifier(r, "trace"),
    "telemetry_verifier": lambda r: _verifier(r, "telemetry"),
    "synthesizer": synthesizer,
}


def respond(req: dict, raw: bytes) -> dict:
    """A Messages API response for ``req`` (deterministic: ids from a hash of the body)."""
    agent = _agent(req)
    content = AGENTS[agent](req) if agent in AGENTS else [{"type": "text", "text": "Unknown agent."}]
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
        self._send(code, resp)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--fault", choices=["overload-once", "malformed-once"], default=None)
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
