"""The report checker: the real H200 report passes; a copy with each rule broken fails on that rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ai4s_graph.tools.cluster import evalcluster as E
from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.cluster.report_check import RULES, anchors, check_file, check_report, slug

from eval_fixtures import collectives_2gpu, h200_eval, two_node_eval, two_node_inter

REPO = Path(__file__).resolve().parent.parent
RAW = REPO / "reports" / "raw-2026-11-29" / "eval-vm.json"


@pytest.fixture(scope="module")
def clean() -> str:
    nodes = [json.loads(RAW.read_text())]
    return E.build_report(nodes, raw_dir="raw-2026-11-29", access="test access")


@pytest.fixture(scope="module")
def bases(clean) -> dict[str, str]:
    """Three clean reports: 1 node of 1x H200 (real run), 2 nodes of 2x H200 with inter-node,
    DCGM, a slow GPU and an NFS share (hand-built), and a 2-GPU collectives sweep."""
    two = E.build_report(two_node_eval(), raw_dir="raw-2026-11-30-1000Z", access="ssh", inter=two_node_inter(),
                         nccl_env_source="the container image")
    coll = E.build_report([dict(h200_eval(), network={"collectives": collectives_2gpu()})], raw_dir="raw-2026-11-30-1100Z",
                          access="device tool", nccl_env_source="the device machine's image")
    return {"h200": clean, "2n": two, "coll": coll}


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


def test_slugs_and_duplicate_anchors():
    text = "## Storage\n### Introduction\n## Network\n### Introduction\n### Shared `lustre` IO benchmark\n"
    assert anchors(text) == {"storage", "introduction", "network", "introduction-1", "shared-lustre-io-benchmark"}
    assert slug("Intra-node all-reduce benchmark") == "intra-node-all-reduce-benchmark"


SHARED_COPY = None  # filled by the shared_grouping case below

# rule -> (base report, text to replace, replacement): the replacement breaks exactly that rule.
RULE_CASES = [
    ("title", "h200", "# Cluster eval: 1 node of 1× H200", "# Cluster eval: 1 nodes of 1× H200"),
    ("title", "h200", "# Cluster eval: 1 node of 1× H200", "# H200 evaluation"),
    ("title", "2n", "Raw logs: [`raw-2026-11-30-1000Z/`](raw-2026-11-30-1000Z/).", "Raw logs: /tmp/raw."),
    ("toc_ran", "h200", "3. [Storage](#storage)", "3. [Network](#network)\n4. [Storage](#storage)"),
    ("toc_ran", "2n", "[Shared nfs IO benchmark](#shared-nfs-io-benchmark)", "[Shared IO](#shared-nfs-io-benchmark)"),
    ("toc_ran", "2n", "1. [Hardware health](#hardware-health) — `dcgmi diag -r 2`\n", ""),
    ("environment", "h200", "### Filesystems", "### Storage volumes"),
    ("environment", "h200", "| HBM (high-bandwidth memory) | 140.4 GiB |", "| HBM (high-bandwidth memory) | 143767 MiB (140.4 GiB) |"),
    ("environment", "h200", "| OS | Ubuntu 24.04.3 LTS |\n| hostname | `vm` |", "| hostname | `vm` |\n| OS | Ubuntu 24.04.3 LTS |"),
    ("environment", "h200", "| torch | 2.11.0+cu130 |", "| torch | 2.11.0+cu130 (/root/venvs/cluster-eval) |"),
    ("no_fullness", "h200", "| Local | `/`, 252 GiB (ext4) |", "| Local | `/`, 252 GiB (ext4), 41% full |"),
    ("compute", "h200", "**TLDR: no under-performing or dead GPUs**", "**TLDR: all GPUs fine**"),
    ("compute", "2n", "### Hardware health\n\n**Pass**", "### Hardware health\n\nAll plugins passed."),
    ("nic_percent", "2n", "Peak busbw 180.0 GB/s at 128 MiB.", "Peak busbw 180.0 GB/s at 128 MiB, 36.0% of the NIC spec."),
    ("nic_percent", "2n", "(a mixed NVLink + NIC figure, not a NIC rate)", "(72% of rail)"),
    ("nccl_env", "2n", "`NCCL_NVLS_ENABLE=2` was set by the container image.", "`NCCL_NVLS_ENABLE=2` was kept."),
    ("nccl_env", "h200", ", set by the environment the benchmarks ran in |", " |"),
    ("node_scope", "h200", "- Intra-node all-reduce benchmark: 1 GPU", "- Inter-node all-reduce benchmark: skipped, only 1 node\n- Intra-node all-reduce benchmark: 1 GPU"),
    ("plots_inlined", "2n", "![Intra-node all-reduce](raw-2026-11-30-1000Z/busbw-intra.png)", "[Intra-node all-reduce](raw-2026-11-30-1000Z/busbw-intra.png)"),
    ("plots_inlined", "coll", "![Intra-node all-gather](raw-2026-11-30-1100Z/busbw-all_gather.png)", ""),
    ("storage_layout", "h200", "| size | rw | latency (msec) | bw (MiBps) | IOPS (M) |", "| size | rw | lat msec | bw (MiBps) | IOPS (M) |"),
    ("storage_layout", "h200", "| `/` | 252 GiB | ext4 | `/dev/vda` |", "| `/tmp` | 252 GiB | ext4 | `/dev/vda` |"),
    ("findings", "h200", "### Healthy subsystems", "### Healthy"),
    ("findings", "2n", "- `gpu-b(node1):gpu1` — lemon GEMM 650 / 648 / 652 TFLOPS in three passes, 2.3% / 2.4% / 2.3% below the node median",
     "- `gpu-b(node1):gpu1` — lemon GEMM 650 / 648 / 652 TFLOPS in three passes, slower than its sibling"),
    ("findings", "h200", "These subsystems were measured cleanly but cannot be called healthy or underperforming until the figures they are supposed to hit arrive.\n", ""),
    ("gpu_naming", "2n", "- `gpu-b(node1):gpu1` — lemon GEMM 650 / 648 / 652 TFLOPS", "- GPU1 of gpu-b — lemon GEMM 650 / 648 / 652 TFLOPS"),
    ("gpu_naming", "2n", "lemon GEMM 650 / 648 / 652 TFLOPS in three passes", "lemon GEMM 650 TFLOPS"),
    ("prose_numbers", "2n", "16 KiB **36.9 MiB/s / 56.0 MiB/s**", "16 KiB **37.0 MiB/s / 56.0 MiB/s**"),
    ("prose_numbers", "2n", "83.3% of the NVLink 4 spec of 450 GB/s per direction; obtain", "83.3 of the NVLink 4 spec of 450 GB/s per direction; obtain"),
    ("plural_targets", "h200", "obtain the expected MiB/s or IOPS at each measured file size", "obtain the provisioned throughput of this disk at each measured file size"),
    ("plural_targets", "h200", "until the figures they are supposed to hit arrive", "until the figure they are supposed to hit arrives"),
    ("operator_ask", "h200", ", 1 GiB **327.5 MiB/s / 344.7 MiB/s**", ""),
    ("operator_ask", "h200", "from one client with 16 jobs, 4 KiB blocks and `O_DIRECT`", "from the vendor"),
    ("filler", "h200", "### Local disk IO benchmark\n", "### Local disk IO benchmark\n\nThe results are shown below.\n"),
    ("shorthand", "2n", "2. `fio` on `/data/scratch` — the same runs", "2. `fio` on `/data/scratch` — a rerun of the same runs"),
    ("feelings", "2n", "how many times slower this filesystem is;", "how many times slower this filesystem is, which small files will feel;"),
    ("workload_assumed", "h200", "Compare a sustained workload to this number.", "Compare a training step to this number."),
    ("book_reference", "h200", "see the [TFLOPS comparison table]", "see the book's [TFLOPS comparison table]"),
    ("intro_lists", "h200", "1. `fio` (the Debian package", "`fio` (the Debian package"),
    ("links", "h200", "https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md#tflops-comparison-table",
     "../compute/accelerator/README.md"),
    ("links", "2n", "Peak busbw 180.0 GB/s at 128 MiB.", "Peak busbw 180.0 GB/s at 128 MiB under srun."),
]


def _shared_copy(text: str) -> str:
    i = text.index("### Shared nfs IO benchmark")
    j = text.index("## Findings")
    return text[:j] + text[i:j].replace("### Shared nfs IO benchmark", "### Shared lustre IO benchmark") + text[j:]


@pytest.mark.parametrize("rule,base,old,new", RULE_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(RULE_CASES)])
def test_rule_fails_and_is_named(bases, rule, base, old, new):
    good = bases[base]
    assert old in good, f"case text not in the {base} report: {old[:60]!r}"
    assert rule not in rules_of(good)  # passing side: the clean report
    bad = good.replace(old, new, 1)
    v = [x for x in check_report(bad) if x.rule == rule]
    assert v, f"{rule} not reported; got {check_report(bad)}"
    assert f"[{rule}]" in str(v[0])


def test_shared_grouping_within_5_percent(bases):
    good = bases["2n"]
    assert "shared_grouping" not in rules_of(good)
    assert "shared_grouping" in rules_of(_shared_copy(good))
    # a second share 20% slower in every cell is a different group: its own table is right
    other = _shared_copy(good)
    k = other.index("### Shared lustre IO benchmark")
    tail = other[k:]
    for v in ("36.9", "56.0", "37.9", "48.5", "32.1", "39.2"):
        tail = tail.replace(f"| {v} |", f"| {float(v) * 0.8:.1f} |", 1)
    assert "shared_grouping" not in rules_of(other[:k] + tail)


def test_file_name_rule(clean):
    assert "file_name" in {v.rule for v in check_report(clean, filename="eval-h200-2026-11-29.md")}
    assert "file_name" not in {v.rule for v in check_report(clean, filename="h200-2026-11-29-1442Z.md")}


def test_every_rule_has_a_failing_case():
    covered = {c[0] for c in RULE_CASES} | {"shared_grouping", "file_name", "structure", "acronym", "iec_units",
                                             "numeric_align", "times_not_percent", "asserted_absence", "toc_anchor"}
    assert covered == set(RULES)


def test_clean_bases_pass_every_rule(bases):
    for name, text in bases.items():
        assert check_report(text) == [], name


def test_committed_reports_pass():
    reps = sorted((REPO / "reports").glob("*.md"))
    assert reps
    for p in reps:
        assert check_file(p) == [], p.name
