"""The report checker: the real H200 report passes; a copy with each rule broken fails on that rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ai4s_graph.tools.cluster import evalcluster as E
from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.cluster.report_check import RULES, anchors, check_file, check_report, slug

RAW = Path(__file__).resolve().parent.parent / "reports" / "raw-2026-11-29" / "eval-vm.json"


@pytest.fixture(scope="module")
def clean() -> str:
    nodes = [json.loads(RAW.read_text())]
    return E.build_report(nodes, raw_dir="raw-2026-11-29", access="test access")


def rules_of(text: str) -> set[str]:
    return {v.rule for v in check_report(text)}


def test_clean_report_passes(clean):
    assert check_report(clean) == []


def test_acronym_not_expanded(clean):
    bad = clean.replace("MAMF (Maximum Achievable Matmul FLOPS)", "MAMF")
    assert "acronym" in rules_of(bad)
    v = [x for x in check_report(bad) if x.rule == "acronym"]
    assert "MAMF" in v[0].message


def test_iec_units_fio_shorthand(clean):
    bad = clean.replace("| 16 KiB | read |", "| 16k | read |")
    assert "iec_units" in rules_of(bad)


def test_iec_units_decimal_size(clean):
    bad = clean.replace("140.4 GiB", "150.8 GB")
    assert "iec_units" in rules_of(bad)


def test_iec_units_storage_mb_per_s(clean):
    bad = clean.replace("MiB/s", "MB/s", 1)
    assert "iec_units" in rules_of(bad)


def test_numeric_align(clean):
    bad = clean.replace("| ---: | --- | ---: | ---: | ---: |", "| --- | --- | ---: | ---: | ---: |")
    v = [x for x in check_report(bad) if x.rule == "numeric_align"]
    assert v and "size" in v[0].message


def test_times_not_percent(clean):
    shared = ("\n### Shared nfs IO benchmark\n\n| size | rw | latency (msec) | bw (MiBps) | IOPS (M) | %local |\n"
              "| ---: | --- | ---: | ---: | ---: | ---: |\n| 16 KiB | read | 1.2 | 39.0 | 0.010 | 9.8% |\n")
    assert "times_not_percent" in rules_of(clean + shared)
    good = shared.replace("%local", "local/shared ×").replace("9.8%", "10.2")
    assert "times_not_percent" not in rules_of(clean + good)
    assert "times_not_percent" in rules_of(clean + good.replace("local/shared ×", "local/shared %"))


@pytest.mark.parametrize("phrase", ["**Pass** — No Fail", "Skip reasons: none", "Slow GPUs: none found.", "None"])
def test_asserted_absence(clean, phrase):
    bad = clean.replace("## Findings", f"{phrase}\n\n## Findings")
    assert "asserted_absence" in rules_of(bad)


def test_toc_anchor(clean):
    bad = clean.replace("### Find underperforming GPUs", "### Find slow GPUs")
    v = [x for x in check_report(bad) if x.rule == "toc_anchor"]
    assert v and "#find-underperforming-gpus" in v[0].message


def test_structure_empty_or_sectionless_report(tmp_path):
    assert [v.rule for v in check_report("")] == ["structure"]
    assert [v.rule for v in check_report("# Title only\n")] == ["structure"]
    binary = tmp_path / "b.md"
    binary.write_bytes(bytes(range(128, 256)))
    with pytest.raises(InputError, match="not UTF-8"):
        check_file(binary)


def test_every_rule_has_a_test():
    assert set(RULES) == {"structure", "acronym", "iec_units", "numeric_align", "times_not_percent",
                          "asserted_absence", "toc_anchor"}


def test_slugs_and_duplicate_anchors():
    text = "## Storage\n### Introduction\n## Network\n### Introduction\n### Shared `lustre` IO benchmark\n"
    assert anchors(text) == {"storage", "introduction", "network", "introduction-1", "shared-lustre-io-benchmark"}
    assert slug("Intra-node all-reduce benchmark") == "intra-node-all-reduce-benchmark"
