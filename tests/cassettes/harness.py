"""Cassette harness for the LLM tests: vcrpy configuration, the body matcher, and the switch
between replay (CI), synthesis (no key: the scripted server ``fake_anthropic.py``) and real
re-recording (``ANTHROPIC_API_KEY`` set).

Modes come from pytest-recording's ``--record-mode`` option:

- ``none`` (default, CI): replay only. ``ANTHROPIC_API_KEY`` is set to :data:`FAKE_KEY`, no
  server runs, and any request missing from the cassette fails the test.
- ``rewrite``: the cassette is deleted and recorded again. With a real key in the environment the
  requests go to https://api.anthropic.com (through ``fake_anthropic.py --upstream`` when the test
  injects a fault); without one they go to the scripted server, which is how the committed
  cassettes were synthesized (``python tests/cassettes/generate.py``).
- ``once`` / ``new_episodes`` / ``all``: vcrpy's modes, same routing.

Recorded requests keep only ``content-type``/``anthropic-version``/``anthropic-beta`` headers
(``x-api-key``, ``authorization`` and every other header are dropped) and their URI is written as
``https://api.anthropic.com/v1/messages``; responses keep only ``content-type``. Requests match on
method, path and the JSON body with volatile parts normalized (:func:`normalize_body`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

import vcr

HERE = Path(__file__).resolve().parent
FAKE_KEY = "sk-ant-test-0000-never-a-real-key-0000"
API = "https://api.anthropic.com"
KEEP_REQUEST_HEADERS = {"content-type", "anthropic-version", "anthropic-beta"}
KEEP_RESPONSE_HEADERS = {"content-type"}

_LOOPBACK = re.compile(r"https?://(?:127\.0\.0\.1|localhost|\[::1\]):\d+")
_TMP = re.compile(r"/tmp/[^\s\"']*?/(?=[^/\s\"']+\.(?:json|gz|jsonl|log|md|png)\b)")


def normalize_body(body: Any) -> Any:
    """The request body as canonical JSON (keys sorted) with loopback URLs and temporary
    directories replaced by placeholders; a non-JSON body is returned as text."""
    if body is None:
        return None
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else str(body)
    try:
        obj = json.loads(text)
    except ValueError:
        return text

    def fix(x: Any) -> Any:
        if isinstance(x, str):
            return _TMP.sub("<tmp>/", _LOOPBACK.sub("<tsdb>", x))
        if isinstance(x, dict):
            return {k: fix(v) for k, v in x.items()}
        if isinstance(x, list):
            return [fix(v) for v in x]
        return x

    return json.dumps(fix(obj), sort_keys=True, separators=(",", ":"))


def body_matcher(r1: Any, r2: Any) -> None:
    """vcrpy matcher: raises AssertionError unless the normalized bodies are equal."""
    assert normalize_body(r1.body) == normalize_body(r2.body), "request bodies differ"


def _scrub_request(request: Any) -> Any:
    """Only Messages API calls are cassette material: any other request (the real VictoriaMetrics
    the telemetry tools query on loopback) returns None, which tells vcrpy to let it through
    unrecorded, in replay too."""
    p = urlparse(request.uri)
    if not p.path.startswith("/v1/messages"):
        return None
    request.uri = API + p.path + (f"?{p.query}" if p.query else "")
    for h in list(request.headers):
        if h.lower() not in KEEP_REQUEST_HEADERS:
            del request.headers[h]
    return request


def _scrub_response(response: dict[str, Any]) -> dict[str, Any]:
    response["headers"] = {k: v for k, v in (response.get("headers") or {}).items()
                           if k.lower() in KEEP_RESPONSE_HEADERS}
    return response


def make_vcr(record_mode: str) -> vcr.VCR:
    """A VCR configured for the Anthropic cassettes (see the module docstring)."""
    v = vcr.VCR(
        cassette_library_dir=str(HERE),
        record_mode=record_mode,
        match_on=["method", "path", "anthropic_body"],
        filter_headers=["x-api-key", "authorization"],
        before_record_request=_scrub_request,
        before_record_response=_scrub_response,
        decode_compressed_response=True,
        # Only httpx2 (the anthropic SDK's HTTP client) is patched. vcrpy's http.client/urllib3
        # stubs un-patch every library for a moment (force_reset) whenever they pass a request to
        # a real server; with the telemetry tools talking to VictoriaMetrics in one graph branch
        # while the other branch calls the API, that race let API calls slip past the cassette.
        skip_patchers=("httplib", "requests", "boto3", "urllib3", "httplib2", "tornado", "aiohttp", "httpx"),
    )
    v.register_matcher("anthropic_body", body_matcher)
    return v


def real_key_present() -> bool:
    """True when ``ANTHROPIC_API_KEY`` holds something other than the test's fake key."""
    k = os.environ.get("ANTHROPIC_API_KEY", "")
    return bool(k) and not k.startswith("sk-ant-test-")


@contextlib.contextmanager
def _server(fault: str | None, upstream: str | None) -> Iterator[str]:
    with tempfile.TemporaryDirectory() as d:
        port_file = Path(d) / "port"
        cmd = [sys.executable, str(HERE / "fake_anthropic.py"), "--port-file", str(port_file)]
        if fault:
            cmd += ["--fault", fault]
        if upstream:
            cmd += ["--upstream", upstream]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                if port_file.exists() and port_file.read_text().strip():
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError("fake_anthropic.py did not start")
            yield f"http://127.0.0.1:{port_file.read_text().strip()}"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@contextlib.contextmanager
def anthropic_cassette(name: str, record_mode: str, monkeypatch: Any, fault: str | None = None) -> Iterator[Any]:
    """Use cassette ``tests/cassettes/<name>.yaml`` in ``record_mode`` (pytest-recording's
    ``--record-mode``); yields the vcrpy cassette (``play_count``, ``requests``, ``responses``).

    ``fault``: ``overload-once`` or ``malformed-once``, injected by ``fake_anthropic.py`` while
    recording (in replay the cassette already holds the faulty exchange)."""
    mode = record_mode or "none"
    path = HERE / f"{name}.yaml"
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_URL", raising=False)
    if mode == "none":
        monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
        with make_vcr("none").use_cassette(path.name) as cass:
            yield cass
        return
    if mode == "rewrite":
        path.unlink(missing_ok=True)
        mode = "all"
    real = real_key_present()
    if not real:
        monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    needs_server = (not real) or fault is not None
    with contextlib.ExitStack() as stack:
        if needs_server:
            url = stack.enter_context(_server(fault, API if real else None))
            monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
        cass = stack.enter_context(make_vcr(mode).use_cassette(path.name))
        yield cass


def files_containing(root: Path, needle: str) -> list[str]:
    """Files under ``root`` (recursively) whose bytes contain ``needle``."""
    out = []
    b = needle.encode()
    for p in Path(root).rglob("*"):
        if p.is_file():
            try:
                if b in p.read_bytes():
                    out.append(str(p))
            except OSError:
                continue
    return out
