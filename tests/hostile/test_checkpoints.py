"""Kind: crafted checkpoints (issue 26, "code execution from a checkpoint"). A checkpoint entry of
every serialization type LangGraph's ``JsonPlusSerializer.loads_typed`` accepts (``null``,
``bytes``, ``bytearray``, ``json``, ``msgpack`` with each of its extension codes 0-7, ``pickle``)
and of a type it does not, each built to run ``touch <marker>`` where a permissive loader would
run it: ``run`` and ``optimize --resume`` refuse the checkpoint in one line naming the file
(exit 2), and the marker is never created."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sqlite3
import sys
from pathlib import Path

import ormsgpack
import pytest
from langgraph.checkpoint.serde import jsonplus as J

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_harness as H  # noqa: E402


class _Pickled:
    def __init__(self, cmd: str) -> None:
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


def _ext(code: int, tup) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, ormsgpack.packb(tup))


def payloads(marker: Path, good_blob: bytes) -> dict[str, tuple[str, bytes]]:
    """``name -> (serialization type, bytes)``; every msgpack one replaces ``channel_values.request``
    of a real checkpoint (``good_blob``) so the rest of the checkpoint is well-formed."""
    cmd = f"touch {marker}"
    argv = {"args": ["touch", str(marker)]}
    real = J.JsonPlusSerializer(allowed_msgpack_modules=True).loads_typed(("msgpack", good_blob))

    def with_request(value) -> tuple[str, bytes]:
        doc = dict(real)
        doc["channel_values"] = {**real["channel_values"], "request": value}
        return "msgpack", J._msgpack_enc(doc)

    return {
        "pickle": ("pickle", pickle.dumps(_Pickled(cmd))),
        "json-lc2-constructor": ("json", json.dumps({"lc": 2, "type": "constructor", "id": ["os", "system"],
                                                     "args": [cmd]}).encode()),
        "json-lc1-constructor": ("json", json.dumps({"lc": 1, "type": "constructor", "id": ["subprocess", "run"],
                                                     "kwargs": argv}).encode()),
        "msgpack-ext0-single-arg": with_request(_ext(J.EXT_CONSTRUCTOR_SINGLE_ARG, ("os", "system", cmd))),
        "msgpack-ext1-pos-args": with_request(_ext(J.EXT_CONSTRUCTOR_POS_ARGS, ("os", "system", [cmd]))),
        "msgpack-ext2-kw-args": with_request(_ext(J.EXT_CONSTRUCTOR_KW_ARGS, ("subprocess", "run", argv))),
        "msgpack-ext3-method": with_request(_ext(J.EXT_METHOD_SINGLE_ARG, ("os", "system", cmd, "__call__"))),
        "msgpack-ext4-pydantic-v1": with_request(_ext(J.EXT_PYDANTIC_V1, ("subprocess", "run", argv))),
        "msgpack-ext5-pydantic-v2": with_request(_ext(J.EXT_PYDANTIC_V2, ("subprocess", "run", argv, "model_validate_json"))),
        "msgpack-ext6-numpy": with_request(_ext(J.EXT_NUMPY_ARRAY, ("|O", [1], "C", b"\0" * 8))),
        "msgpack-ext7-delta-snapshot": with_request(ormsgpack.Ext(J.EXT_DELTA_SNAPSHOT, ormsgpack.packb(
            _ext(J.EXT_CONSTRUCTOR_SINGLE_ARG, ("os", "system", cmd))))),
        "msgpack-unknown-ext": with_request(ormsgpack.Ext(99, b"\x00")),
        "msgpack-model-fails-validation": with_request(_ext(J.EXT_PYDANTIC_V2, (
            "ai4s_graph.graph.analysis.configuration", "RunRequest", {"out_dir": ["not", "a", "path"]},
            "model_validate_json"))),
        "msgpack-model-as-constructor": with_request(_ext(J.EXT_CONSTRUCTOR_KW_ARGS, (
            "ai4s_graph.graph.analysis.configuration", "RunRequest", {"out_dir": "/tmp"}))),
        "msgpack-plain-dict-for-a-model": with_request({"out_dir": "/tmp", "jobid": "1"}),
        "msgpack-not-msgpack": ("msgpack", b"\xc1\xc1\xc1"),
        "null": ("null", b""),
        "bytes": ("bytes", b"junk"),
        "bytearray": ("bytearray", b"junk"),
        "unknown-type": ("yaml", b"!!python/object/apply:os.system ['" + cmd.encode() + b"']"),
    }


def _poison(db: Path, type_: str, blob: bytes) -> None:
    with sqlite3.connect(db) as c:
        c.execute("UPDATE checkpoints SET type = ?, checkpoint = ?", (type_, blob))


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """One good analysis of 92001: its checkpoint database, out dir, and a real checkpoint blob."""
    d = tmp_path_factory.mktemp("ckpt")
    run, out, files = H.good_report(d)
    db = d / "st" / "checkpoints.sqlite"
    with sqlite3.connect(db) as c:
        blob = c.execute("SELECT checkpoint FROM checkpoints ORDER BY checkpoint_id DESC LIMIT 1").fetchone()[0]
    return {"dir": d, "run": run, "out": out, "db": db, "files": files, "blob": blob}


def test_the_payloads_are_live_under_a_permissive_loader(tmp_path, analysed):
    """The inputs are not inert: LangGraph's serializer with its default permissive allow-list
    (what ``optimize`` used before) runs the extension payload and creates the marker."""
    marker = tmp_path / "PWNED"
    t, blob = payloads(marker, analysed["blob"])["msgpack-ext0-single-arg"]
    J.JsonPlusSerializer(allowed_msgpack_modules=True).loads_typed((t, blob))
    assert marker.exists()


def _names() -> list[str]:
    return list(payloads(Path("/x"), J._msgpack_enc({"channel_values": {}})).keys())


@pytest.mark.parametrize("name", _names())
def test_run_refuses_a_crafted_checkpoint(tmp_path, analysed, name):
    marker = tmp_path / "PWNED"
    st = tmp_path / "st"
    st.mkdir()
    db = st / "checkpoints.sqlite"
    shutil.copy(analysed["db"], db)
    _poison(db, *payloads(marker, analysed["blob"])[name])
    cp = H.cli("run", "--job", "92001", "--perf-run", str(analysed["run"]), "--out", str(analysed["out"]), state=st)
    H.assert_refused(cp, f"refused checkpoint {db}")
    assert not marker.exists()
    assert H.snapshot(analysed["out"]) == analysed["files"]  # the report in place is untouched


@pytest.fixture
def loop(tmp_path):
    """A loop directory with a real checkpoint of the optimizer graph (its request, as ``init``
    wrote it), made without running a job. (One per test: ``loop.json`` names its directory.)"""
    from ai4s_graph.graph.optimize import graph as O
    from ai4s_graph.tools.levers.catalog import bundled_catalog

    d = tmp_path / "made"
    req = O.new_loop(model="cpu-toy", catalog_path=bundled_catalog("cpu-toy"), loop_root=d / "loops",
                     executor="local", shared_dir=d / "shared", iterations=0)
    with O.compiled(req.loop_dir) as app:
        app.update_state({"configurable": {"thread_id": req.loop_id}},
                         {"request": {**req.model_dump(mode="json"), "out_dir": req.loop_dir}, "statuses": {},
                          "missing": []}, as_node="init")
    db = Path(req.loop_dir) / O.CHECKPOINT_DB
    with sqlite3.connect(db) as c:
        blob = c.execute("SELECT checkpoint FROM checkpoints ORDER BY checkpoint_id DESC LIMIT 1").fetchone()[0]
    return {"root": d / "loops", "dir": Path(req.loop_dir), "id": req.loop_id, "db": db, "blob": blob}


@pytest.mark.parametrize("name", _names())
def test_optimize_resume_refuses_a_crafted_checkpoint(tmp_path, loop, name):
    marker = tmp_path / "PWNED"
    root, db = loop["root"], loop["db"]
    _poison(db, *payloads(marker, loop["blob"])[name])
    cp = H.cli("optimize", "--resume", f"loop-{loop['id']}", "--loop-root", str(root), state=tmp_path / "st")
    H.assert_no_traceback(cp)
    assert cp.returncode == 2, cp.stdout[-1500:] + cp.stderr[-1500:]
    last = H.status_lines(cp)[-1]
    assert last.startswith(f"STATUS=fail; reason=refused checkpoint {db}")
    assert not marker.exists()
    assert not (loop["dir"] / "journal.jsonl").exists()  # nothing ran


def test_strict_serializer_reads_a_real_checkpoint_as_langgraph_does(analysed):
    """The other side: every entry of a real run's checkpoint decodes to exactly what LangGraph's
    own serializer rebuilds (36 entries on 92001)."""
    from ai4s_graph.graph.analysis.schema import CHECKPOINT_TYPES
    from ai4s_graph.graph.checkpoint import serializer

    strict, ref = serializer(CHECKPOINT_TYPES, "x"), J.JsonPlusSerializer(allowed_msgpack_modules=True)
    n = 0
    with sqlite3.connect(analysed["db"]) as c:
        rows = list(c.execute("SELECT type, checkpoint FROM checkpoints")) + list(c.execute("SELECT type, value FROM writes"))
    for t, b in rows:
        assert strict.loads_typed((t, b)) == ref.loads_typed((t, b))
        n += 1
    assert n >= 20
