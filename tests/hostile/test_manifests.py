"""Kind: malformed ``manifest.json`` (issue 26). With ``--fresh`` over a good report, a manifest that
is not JSON, not an object, of the wrong field types, too large or too deep is refused before
anything runs (exit 2, one line naming the file and the field), and the good report survives."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_harness as H  # noqa: E402

from ai4s_graph.tools.jsonguard import MAX_DOCUMENT_BYTES  # noqa: E402


def _good_manifest() -> dict:
    return json.loads((H.EXAMPLE / "manifest.json").read_text())


#: name -> (manifest bytes, the words the refusal must hold)
CASES = {
    "syntax-error": (b'{"jobid": "92001", "nodes_list": ["vm"', "not valid JSON"),
    "empty-file": (b"", "not valid JSON"),
    "a-list": (b'["92001"]', "expected a JSON object"),
    "a-string": (b'"92001"', "expected a JSON object"),
    "nodes-list-a-number": (json.dumps({**_good_manifest(), "nodes_list": 5}).encode(), "nodes_list"),
    "batch-a-word": (json.dumps({**_good_manifest(), "global_batch_size": "large"}).encode(), "global_batch_size"),
    "batch-infinite": (json.dumps({**_good_manifest(), "global_batch_size": 1e400}).encode().replace(b"Infinity", b"1e400"),
                       "global_batch_size"),
    "deeply-nested": (b'{"jobid": "92001", "extra": ' + b"{\"a\": " * 5000 + b"1" + b"}" * 5000 + b"}",
                      "nested deeper than 64 levels"),
}


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = tmp_path_factory.mktemp("manifests")
    run, out, files = H.good_report(d)
    return {"run": run, "out": out, "files": files, "state": d / "st"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_manifest_with_fresh_keeps_the_good_report(good, name, tmp_path):
    text, words = CASES[name]
    run = H.copy_run(tmp_path / "run", good["run"])
    (run / "manifest.json").write_bytes(text)
    cp = H.cli("run", "--job", "92001", "--perf-run", str(run), "--out", str(good["out"]), "--fresh",
               state=good["state"])
    H.assert_refused(cp, "manifest.json", words)
    assert H.snapshot(good["out"]) == good["files"]


def test_a_manifest_too_large_is_refused_unread(good, tmp_path):
    run = H.copy_run(tmp_path / "run", good["run"])
    with open(run / "manifest.json", "wb") as f:  # sparse: the check is on the size, nothing is read
        f.truncate(MAX_DOCUMENT_BYTES + 1)
    cp = H.cli("run", "--job", "92001", "--perf-run", str(run), "--out", str(good["out"]), "--fresh",
               state=good["state"])
    H.assert_refused(cp, "manifest.json", "more than the")
    assert H.snapshot(good["out"]) == good["files"]


def test_a_manifest_of_another_job_is_refused(good, tmp_path):
    run = H.copy_run(tmp_path / "run", good["run"])
    (run / "manifest.json").write_text(json.dumps({**_good_manifest(), "jobid": "93001"}))
    cp = H.cli("run", "--job", "92001", "--perf-run", str(run), "--out", str(good["out"]), "--fresh",
               state=good["state"])
    H.assert_refused(cp, "does not match manifest.json jobid 93001")
    assert H.snapshot(good["out"]) == good["files"]
    assert os.listdir(run) == os.listdir(good["run"])
