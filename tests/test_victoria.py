"""The VictoriaMetrics wrapper against the real ``victoria-metrics`` binary (no mocks)."""

from __future__ import annotations

import json

import pytest
import requests

from ai4s_graph.tools.errors import InputError, ToolUnavailableError
from ai4s_graph.tools.telemetry.victoria import BASE_FLAGS, VictoriaMetrics, find_binary


def _export_counts(url: str, match: str) -> dict[str, int]:
    r = requests.get(f"{url}/api/v1/export", params={"match[]": match}, timeout=10)
    r.raise_for_status()
    out: dict[str, int] = {}
    for line in r.text.splitlines():
        d = json.loads(line)
        key = d["metric"].get("jobid") or d["metric"]["__name__"]
        out[key] = out.get(key, 0) + len(d["timestamps"])
    return out


def test_find_binary_missing_gives_one_line_install_hint(monkeypatch):
    monkeypatch.setenv("AI4S_VICTORIA_METRICS", "/nonexistent/victoria-metrics")
    with pytest.raises(ToolUnavailableError) as ei:
        find_binary()
    msg = str(ei.value)
    assert "\n" not in msg and "apt-get install victoria-metrics" in msg
    with pytest.raises(ToolUnavailableError):
        VictoriaMetrics()


def test_flags_follow_notes_and_seed():
    # notes/victoriametrics.md (retention, latency offset, dedup) and seed 000 lesson 3 (mmap)
    for flag in ("-retentionPeriod=100y", "-search.latencyOffset=0", "-fs.disableMmap"):
        assert flag in BASE_FLAGS
    assert any(f.startswith("-dedup.minScrapeInterval=") for f in BASE_FLAGS)


@pytest.mark.vm
def test_import_is_idempotent_and_counts_real_samples(vm_server, perf_runs):
    export = perf_runs / "92003" / "telemetry" / "export.jsonl"  # NVML at 4 Hz over the ViT bf16 run
    expected = {}
    for line in export.read_text().splitlines():
        d = json.loads(line)
        if d["metric"]["__name__"] == "rmsjob_info":
            expected[d["metric"]["jobid"]] = len(d["timestamps"])
    assert vm_server.import_jsonl(export) == 8  # 7 GPU metrics + rmsjob_info
    vm_server.import_jsonl(export)  # a second import must not duplicate samples
    counts = _export_counts(vm_server.url, 'rmsjob_info{jobid="92003"}')
    assert counts == expected == {"92003": 130}  # 130 rmsjob_info samples, 1795963718.506 .. 750.741


@pytest.mark.vm
def test_import_prometheus_text_and_health(vm_server):
    assert requests.get(f"{vm_server.url}/health", timeout=5).text.strip() == "OK"
    vm_server.import_prometheus(
        'ai4s_victoria_selftest{instance="t1"} 42 1700000000000\n'
        'ai4s_victoria_selftest{instance="t1"} 43 1700000001000\n'
    )
    r = requests.get(
        f"{vm_server.url}/api/v1/query",
        params={"query": 'ai4s_victoria_selftest{instance="t1"}', "time": "1700000001"},
        timeout=5,
    ).json()
    assert r["data"]["result"][0]["value"][1] == "43"


@pytest.mark.vm
def test_import_errors_are_one_line(vm_server, tmp_path):
    with pytest.raises(InputError, match="not found"):
        vm_server.import_jsonl(tmp_path / "missing.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InputError, match="empty"):
        vm_server.import_jsonl(empty)


@pytest.mark.vm
def test_own_server_starts_and_stops_cleanly(tmp_path):
    try:
        find_binary()
    except ToolUnavailableError as e:
        pytest.skip(str(e))
    vm = VictoriaMetrics(tmp_path / "vmdata", stop_timeout_s=5)
    with vm:
        assert vm.running and vm.url.startswith("http://127.0.0.1:")
        url = vm.url
        assert requests.get(f"{url}/health", timeout=5).status_code == 200
    assert not vm.running
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/health", timeout=2)
    assert (tmp_path / "vmdata").is_dir()  # a given storage dir is kept
    vm.stop()  # idempotent



#: A process that starts two servers, stops one, then calls stop_all (in a process of its own: in
#: the suite's, stop_all would stop the session's shared server too).
_STOP_ALL = """
import json, sys
import requests
from ai4s_graph.tools.telemetry import victoria
done = victoria.VictoriaMetrics(sys.argv[1], stop_timeout_s=5).start()
done.stop()
left = victoria.VictoriaMetrics(stop_timeout_s=5).start()
url, store = left.url, left.storage_dir
was = store.is_dir()
n, again = victoria.stop_all(), victoria.stop_all()
try:
    requests.get(url + "/health", timeout=2)
    answered = True
except requests.ConnectionError:
    answered = False
print(json.dumps({"stopped": n, "again": again, "running": left.running, "store_was": was,
                  "store_is": store.exists(), "answered": answered}))
"""


@pytest.mark.vm
def test_stop_all_stops_the_servers_left_running(tmp_path):
    """What an interrupted ``run`` calls before it exits at once: every server started and not
    stopped is stopped (its port closed, its temporary storage removed); one stopped already is not
    counted again."""
    import subprocess
    import sys

    try:
        find_binary()
    except ToolUnavailableError as e:
        pytest.skip(str(e))
    got = subprocess.run([sys.executable, "-c", _STOP_ALL, str(tmp_path / "done")], capture_output=True,
                         text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout.splitlines()[-1]) == {"stopped": 1, "again": 0, "running": False, "store_was": True,
                                                       "store_is": False, "answered": False}
