#!/usr/bin/env python3
"""Synthesize the LLM test cassettes (no API key needed) — see README.md in this folder.

Runs the cassette tests with ``--record-mode=rewrite`` while ``ANTHROPIC_API_KEY`` is the fake test
key, so ``harness.anthropic_cassette`` routes every request to the scripted server
``fake_anthropic.py``; vcrpy records the real client's requests and the server's responses in the
Anthropic Messages API wire format. Then a header comment saying so is put at the top of each
cassette. Re-run it after changing a prompt, a tool, or anything that changes a request body.

With a real key, do not use this script: ``pytest tests/test_llm_*.py --record-mode=rewrite``
records from Claude instead (the header then disappears, as it should).

Usage: ``python tests/cassettes/generate.py [pytest args...]`` from the repository root.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
from harness import FAKE_KEY  # noqa: E402

HEADER = (
    "# SYNTHESIZED, NOT RECORDED: this cassette holds the exact Anthropic Messages API wire format\n"
    "# (POST /v1/messages, tool_use / tool_result blocks, usage), but its responses were written by the\n"
    "# scripted server tests/cassettes/fake_anthropic.py, not by Claude (no API key where it was made).\n"
    "# Regenerate: python tests/cassettes/generate.py.  Re-record from Claude:\n"
    "#   ANTHROPIC_API_KEY=<key> pytest tests/test_llm_*.py --record-mode=rewrite\n"
)
#: Every LLM test file (the ones without cassettes are quick and harmless to run too), and the
#: hostile-input catalog's agent-loop test (a model that keeps calling an unknown tool).
TESTS = ("tests/test_llm_*.py", "tests/hostile/test_agent_loops.py")


def main() -> int:
    env = dict(os.environ, ANTHROPIC_API_KEY=FAKE_KEY)
    env.pop("ANTHROPIC_BASE_URL", None)
    tests = sorted(str(p.relative_to(ROOT)) for pattern in TESTS for p in ROOT.glob(pattern))
    rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests,
                          "--record-mode=rewrite", *sys.argv[1:]], cwd=ROOT, env=env)
    for f in sorted(HERE.glob("*.yaml")):
        text = f.read_text()
        if not text.startswith("# SYNTHESIZED"):
            f.write_text(HEADER + text)
    return rc


if __name__ == "__main__":
    sys.exit(main())
