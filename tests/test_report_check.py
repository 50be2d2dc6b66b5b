"""The report checker: seed 003's 62 rules, each with a passing report and failing copies.

Bases: the two committed reports (1 node of 1× H200, 1 node of 2× H200) and a hand-built 2-node
report (DCGM, a slow GPU, an NFS share, inter-node all-reduce) built from the real H200 run.
Every base passes every rule. Each case below breaks one rule and must be named by the checker;
a case on a committed report is a mutant that must break that rule ONLY (the checker names
exactly it), and there are at least 40 of them. Many cases are rewordings the old keyword checker
let through ("two slow GPUs", "41% used", "reran", "Multi-node all-reduce: skipped", "results are
listed below", "hurt", "nothing to report", "Pass, no failures", "45% of the ... line rate",
"89.5% slower than local", "16K", "about 680", unitless numbers outside Findings).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ai4s_graph.tools.cluster import evalcluster as E
from ai4s_graph.tools.cluster.report_check import (RULES, WARNINGS, anchors, check_file, check_report, check_report_all,
                                                   slug)
from ai4s_graph.tools.cluster.rules import RULEBOOK
from ai4s_graph.tools.errors import InputError

from eval_fixtures import two_node_eval, two_node_inter

REPO = Path(__file__).resolve().parent.parent
R1 = REPO / "reports" / "h200-2026-11-29-1442Z.md"
R2 = REPO / "reports" / "h200-2026-11-30-0946Z.md"
NET = "https://github.com/stas00/ml-engineering/blob/master/network/README.md#unidirectional-vs-bidirectional-duplex"


@pytest.fixture(scope="module")
def bases() -> dict[str, str]:
    two = E.build_report(two_node_eval(), raw_dir="raw-2026-11-30-1000Z", access="ssh", inter=two_node_inter(),
                         nccl_env_source="the container image")
    return {"1gpu": R1.read_text(), "2gpu": R2.read_text(), "2n": two}


def rules_of(text: str, filename: str | None = None) -> set[str]:
    return {v.rule for v in check_report(text, filename)}


# (rule, base, [(old, new), ...]): the edits break that rule. On "1gpu"/"2gpu" they break it alone.
CASES = [
    ("title", "1gpu", [("# Cluster eval: 1 node of 1× H200", "# Cluster eval: 1 nodes of 1× H200")]),
    ("title", "2gpu", [("# Cluster eval: 1 node of 2× H200", "# Cluster eval: H200 node")]),
    ("header_bullets", "1gpu", [("- Access: the device tool of this workplace: one shell command per call on a lent virtual "
                                 "machine with one H200\n", "")]),
    ("header_bullets", "2gpu", [("Raw logs: [`raw-2026-11-30-2gpu/`](raw-2026-11-30-2gpu/).", "Raw logs: /tmp/raw-2026-11-30-2gpu.")]),
    ("links", "2gpu", [(NET, "../network/README.md#unidirectional-vs-bidirectional-duplex")]),
    ("links", "1gpu", [("see the [TFLOPS comparison table]", "see the book's [TFLOPS comparison table]")]),
    ("links", "2gpu", [("(NVIDIA H200 SXM datasheet; see", "(NVIDIA H200 SXM datasheet and MLE; see")]),
    ("plots_inlined", "2gpu", [("![Intra-node all-reduce](raw-2026-11-30-2gpu/busbw-all_reduce.png)",
                                "[Intra-node all-reduce](raw-2026-11-30-2gpu/busbw-all_reduce.png)")]),
    ("plots_inlined", "2gpu", [("![Intra-node all-gather](raw-2026-11-30-2gpu/busbw-all_gather.png)", "")]),
    ("plots_inlined", "2gpu", [("(raw-2026-11-30-2gpu/busbw-reduce_scatter.png)", "(/root/eval/raw-2026-11-30-2gpu/busbw-reduce_scatter.png)")]),
    ("tools_linked", "1gpu", [("— ai4s-graph's own torch script:", "— ai4s-graph's own torch script, a port of `mamf-finder.py`:")]),
    ("tools_linked", "2gpu", [("so the script searches:", "so the script searches like [`mamf-finder.py`](https://github.com/stas00/"
                               "ml-engineering/blob/master/compute/accelerator/benchmarks/mamf-finder.py):")]),
    ("intro_lists", "1gpu", [("1. `fio` (the Debian package", "`fio` (the Debian package")]),
    ("intro_lists", "2gpu", [("— an inline script in `gpu_bench.py`:", "— a script in `gpu_bench.py`:")]),
    ("intro_lists", "1gpu", [("1. `gpu_bench.py` matmul shape search — ai4s-graph's", "1. `gpu_bench.py` matmul shape search, ai4s-graph's")]),
    ("shorthand", "1gpu", [("and selected the fastest that held", "and kept the fastest that held")]),
    ("shorthand", "2gpu", [("could be installed in an isolated environment", "could be installed in an isolated environment, so "
                            "every pass reran on the image's torch")]),
    ("shorthand", "1gpu", [("The shape column is the M×N×K", "As configured, the shape column is the M×N×K")]),
    ("node_scope", "1gpu", [("- Intra-node all-reduce benchmark: 1 GPU on this node",
                             "- Multi-node all-reduce: skipped\n- Intra-node all-reduce benchmark: 1 GPU on this node")]),
    ("node_scope", "2gpu", [("NVLS (NVLink SHARP) performs", "The inter-node all-reduce did not run on this single node. NVLS "
                             "(NVLink SHARP) performs")]),
    ("newest_torch", "1gpu", [("- torch 2.11.0+cu130 is the machine image's build; the machine cannot reach a package registry, "
                               "so no newer torch release could be installed in an isolated environment\n", "")]),
    ("newest_torch", "2gpu", [("build; the machine cannot reach a package registry, so no newer torch release could be installed "
                               "in an isolated environment", "build")]),
    ("nccl_env", "1gpu", [("| NCCL environment | `NCCL_NVLS_ENABLE=0`, set by the device machine's image, which keeps NVLink "
                           "multicast off |\n", "")]),
    ("nccl_env", "2gpu", [("| NCCL environment | `NCCL_NVLS_ENABLE=0`, set by the device machine's image, which keeps NVLink "
                           "multicast off |", "| NCCL environment | whatever the image sets, set by the device machine's image |")]),
    ("toc", "1gpu", [("3. [Storage](#storage)", "3. [Storage](#storage-section)")]),
    ("toc", "2gpu", [("3. [Network](#network)", "3. [Network](#networks)")]),
    ("toc_labels", "1gpu", [("[Local disk IO benchmark](#local-disk-io-benchmark)", "[Local disk benchmark](#local-disk-io-benchmark)")]),
    ("toc_labels", "2gpu", [("[GPU performance benchmarks](#gpu-performance-benchmarks)", "[MAMF](#gpu-performance-benchmarks)")]),
    ("toc_labels", "2gpu", [("   2. [Intra-node all-gather benchmark](#intra-node-all-gather-benchmark) — `gpu_bench.py`, 2 ranks\n", "")]),
    ("toc_ran", "1gpu", [("3. [Storage](#storage)", "3. [Network](#network) — not run on one GPU\n4. [Storage](#storage)")]),
    ("toc_ran", "2gpu", [("   2. [Find underperforming GPUs](#find-underperforming-gpus) — fixed 16384³ `matmul` on every GPU\n",
                          "   2. [Find underperforming GPUs](#find-underperforming-gpus) — fixed 16384³ `matmul` on every GPU\n"
                          "   3. [Gaps](#gaps) — DCGM\n")]),
    ("toc_annotations", "1gpu", [("— `fio` on `/tmp`", "— `fio` scan of the local disk")]),
    ("toc_annotations", "2gpu", [("[Intra-node all-gather benchmark](#intra-node-all-gather-benchmark)",
                                  "[Intra-node all-gather benchmark, 2 ranks](#intra-node-all-gather-benchmark-2-ranks)"),
                                 ("### Intra-node all-gather benchmark", "### Intra-node all-gather benchmark, 2 ranks")]),
    ("env_tables", "1gpu", [("### Filesystems", "### Storage volumes")]),
    ("env_tables", "2gpu", [("### Fabric\n\n", "")]),
    ("env_host", "1gpu", [("| OS | Ubuntu 24.04.3 LTS |\n| hostname | `vm` |", "| hostname | `vm` |\n| OS | Ubuntu 24.04.3 LTS |")]),
    ("env_host", "2gpu", [("| PCIe to each GPU | Gen5 ×16 |\n", ""), ("| driver / CUDA |", "| PCIe | Gen5 ×16 |\n| driver / CUDA |")]),
    ("env_gpu", "1gpu", [("| HBM (high-bandwidth memory) | 140.4 GiB |", "| HBM (high-bandwidth memory) | 143771 MiB (140.4 GiB) |")]),
    ("env_gpu", "2gpu", [("saturated 1483–1488 MHz (dense matmul at the power limit)", "loaded 1483–1488 MHz")]),
    ("env_no_mamf", "1gpu", [("| SM clocks | boost 1980 MHz,", "| SM clocks | boost 1980 MHz (the MAMF, Maximum Achievable "
                             "Matmul FLOPS, burst),")]),
    ("env_filesystems", "1gpu", [("| Local | `/`, 252 GiB (ext4) |", "| Local | `/`, 252 GiB (ext4), the local ceiling |")]),
    ("env_filesystems", "2gpu", [("| Local | `/`", "| Local disk | `/`")]),
    ("no_fullness", "1gpu", [("| Local | `/`, 252 GiB (ext4) |", "| Local | `/`, 252 GiB (ext4), 41% used |")]),
    ("no_fullness", "2gpu", [("| `/` | 252 GiB | ext4 | `/dev/vda` |", "| `/` | 252 GiB (180 GiB free) | ext4 | `/dev/vda` |")]),
    ("env_software", "1gpu", [("| torch | 2.11.0+cu130 |", "| torch | 2.11.0+cu130 in /root/venvs/cluster-eval |")]),
    ("env_software", "2gpu", [("| Python | 3.12.3 |", "| OS | Ubuntu 24.04.3 LTS |\n| Python | 3.12.3 |")]),
    ("compute_intro", "1gpu", [(", TDP 700 W, official", ", official")]),
    ("compute_intro", "2gpu", [("; see the [TFLOPS comparison table](https://github.com/stas00/ml-engineering/blob/master/compute/"
                                "accelerator/README.md#tflops-comparison-table)", "")]),
    ("compute_headings", "2gpu", [("[Find underperforming GPUs](#find-underperforming-gpus)", "[Lemon check](#lemon-check)"),
                                  ("### Find underperforming GPUs", "### Lemon check")]),
    ("hw_health", "2n", [("### Hardware health\n\n**Pass**", "### Hardware health\n\nAll plugins passed.")]),
    ("hw_health", "1gpu", [("- GPUs: MAMF", "- GPUs: Pass, no failures. MAMF")]),
    ("hw_health", "2n", [("### Hardware health\n\n**Pass**", "### Hardware health\n\n**Pass** — No Fail")]),
    ("shapes_tried", "1gpu", [("GPU0 timed 512 matmul shapes, every combination", "GPU0 timed every combination")]),
    ("shapes_tried", "2gpu", [("Compute is measured by timing matrix multiplication. How fast",
                               "GPU0 reached 814 TFLOPS. Compute is measured by timing matrix multiplication. How fast")]),
    ("mamf_msmf_spec", "1gpu", [("Two numbers vs official BF16 TFLOPS on NVIDIA H200 (989 TFLOPS):", "Two numbers:")]),
    ("mamf_msmf_spec", "2gpu", [(", 112 W / 1980 MHz, 82.3% of spec", ", 82.3% of spec")]),
    ("msmf_table", "1gpu", [("| 691 / 1470 | 70.6% |", "| 691 / 1470 | 71.0% |")]),
    ("msmf_table", "2gpu", [("Node MSMF (slowest GPU) 670 TFLOPS; median 671 TFLOPS; spread 3 TFLOPS.\n", "")]),
    ("three_passes", "2gpu", [("| `vm` | 3 | 705 | 694 | 694 (gpu1) | 705 |", "| `vm` | 3 | 705 | 670 | 670 (gpu1) | 705 |"),
                              ("lemon GEMM 694–714 TFLOPS", "lemon GEMM 670–714 TFLOPS")]),
    ("three_passes", "2gpu", [("**TLDR: no under-performing or dead GPUs**", "**TLDR: under-performing: `vm(node0):gpu1`**")]),
    ("lemon_tldr", "1gpu", [("**TLDR: no under-performing or dead GPUs**", "**TLDR: all GPUs fine**")]),
    ("lemon_tldr", "2gpu", [("It is not MAMF: there is no search", "Unlike the shape search, there is no search")]),
    ("lemon_table", "2gpu", [("| 700 (gpu0) | 714 |", "| 714 (gpu1) | 714 |")]),
    ("lemon_table", "1gpu", [("| `vm` | 2 | 680 | 680 (gpu0) | 680 |", "| `vm` | 2 | 680 | 680 (gpu0) | 690 |")]),
    ("sm_coverage", "1gpu", [("62 full waves and a tail of 8 CTAs", "62 full waves and a tail of 10 CTAs")]),
    ("sm_coverage", "2gpu", [("This GPU has 132 SMs.", "This GPU has 108 SMs.")]),
    ("network_intro", "2gpu", [("Each sweeps bf16 payloads from 32 KiB upward (×8 per step), once over NVLink",
                                "Each sweep runs once over NVLink")]),
    ("nvls", "2gpu", [("`NCCL_NVLS_ENABLE=0` was set by the device machine's image, which keeps NVLink multicast off.",
                       "`NCCL_NVLS_ENABLE=0` stayed as it was.")]),
    ("nvls", "2gpu", [("was set by the device machine's image, which keeps", "was set by NCCL_NVLS_ENABLE=0, "
                       "TORCH_SYMM_MEM_DISABLE_MULTICAST=1 (the device rule), which keeps")]),
    ("intra_node", "2gpu", [(", 72.7% of the NVLink 4 spec of 450 GB/s per direction;", ";")]),
    ("nic_percent", "2n", [("(a mixed NVLink + NIC figure, not a NIC rate)", "(45% of the NIC line rate)")]),
    ("nic_percent", "2n", [("Peak busbw 180.0 GB/s at 128 MiB.", "Peak busbw 180.0 GB/s at 128 MiB, 45% of the 400 Gb/s line rate.")]),
    ("inter_node", "2n", [("Transport: mlx5_0 400 Gb/sec (4X NDR) per node (inventory, not a busbw denominator). ", "")]),
    ("inter_node", "2n", [(" At the same payload (128 MiB) the 1-node all-reduce over 2 ranks reached 375.0 GB/s.", "")]),
    ("no_launcher", "2n", [("Peak busbw 180.0 GB/s at 128 MiB.", "Peak busbw 180.0 GB/s at 128 MiB under srun.")]),
    ("no_launcher", "2gpu", [("intra-node fabric, all-reduce over 2 ranks", "intra-node fabric, all-reduce over 2 torchrun ranks")]),
    ("storage_order", "1gpu", [("### Introduction\n\n1. `fio` (the Debian", "#### Introduction\n\n1. `fio` (the Debian")]),
    ("partitions_table", "1gpu", [("| `/` | 252 GiB | ext4 | `/dev/vda` |",
                                   "| `/` | 252 GiB | ext4 | `/dev/vda` |\n| `/tmp` | 252 GiB | ext4 | `/dev/vda` |")]),
    ("partitions_table", "2gpu", [("| `/` | 252 GiB | ext4 | `/dev/vda` |\n\n### Gaps",
                                   "| `/` | 252 GiB | ext4 | `/dev/vda` |\n\nThe `/` disk holds the fio scratch directory.\n\n### Gaps")]),
    ("partition_type", "1gpu", [("| `/` | 252 GiB | ext4 | `/dev/vda` |", "| `/` | 252 GiB | overlay | `/dev/vda` |")]),
    ("storage_intro", "1gpu", [("`libaio`, `O_DIRECT` (bypasses", "`O_DIRECT` (bypasses")]),
    ("storage_intro", "1gpu", [("16 parallel jobs, 4 KiB blocks, ", "")]),
    ("report_done_only", "1gpu", [("Every run deleted its own files", "The `/data` mount was not benchmarked. Every run deleted "
                                   "its own files")]),
    ("report_done_only", "2gpu", [("once over NVLink and once", "once over NVLink (its per-link bandwidth was not measured) and once")]),
    ("iec_units", "1gpu", [("| HBM (high-bandwidth memory) | 140.4 GiB |", "| HBM (high-bandwidth memory) | 150.8 GB |")]),
    ("iec_units", "2gpu", [("- fio on /tmp: fio is not installed", "- fio on /tmp (16K, 1M and 1G files): fio is not installed")]),
    ("iec_units", "2n", [("| 16 KiB | read |", "| 16k | read |")]),
    ("fio_columns", "1gpu", [("| size | rw | latency (msec) | bw (MiBps) | IOPS (M) |", "| size | rw | lat msec | bw (MiBps) | IOPS (M) |")]),
    ("fio_columns", "1gpu", [("| 16 KiB | read | 0.178 | 350.7 | 0.090 |", "| 16 KiB | read | 0.178 | 350.7 | 0.090 M |")]),
    ("numeric_align", "1gpu", [("| ---: | --- | ---: | ---: | ---: |", "| --- | --- | ---: | ---: | ---: |")]),
    ("numeric_align", "2gpu", [("| --- | ---: | ---: | --- | --- | ---: |", "| --- | ---: | --- | --- | --- | ---: |")]),
    ("local_shared", "2n", [("Its provisioned throughput is unknown", "It is 89.5% slower than local. Its provisioned throughput is "
                             "unknown")]),
    ("local_shared", "2n", [("`local/shared ×` divides the local disk table's bandwidth by this table's bandwidth on the same row: "
                             "how many times slower this filesystem is; 1 would mean as fast as the local disk.\n\n", "")]),
    ("shared_heading", "2n", [("[Shared nfs IO benchmark](#shared-nfs-io-benchmark)", "[Shared nfs](#shared-nfs)"),
                              ("### Shared nfs IO benchmark", "### Shared nfs")]),
    ("scratch_cleared", "1gpu", [("and the scratch directory was removed afterwards", "and the scratch directory was moved to "
                                  "the trash afterwards")]),
    ("findings_headings", "1gpu", [("[Healthy subsystems](#healthy-subsystems)", "[Healthy](#healthy)"),
                                   ("### Healthy subsystems", "### Healthy")]),
    ("findings_headings", "2gpu", [("- GPUs: MAMF 814", "- A. GPUs: MAMF 814")]),
    ("gpu_naming", "2n", [("- `gpu-b(node1):gpu1` — lemon GEMM", "- GPU1 of gpu-b — lemon GEMM")]),
    ("gpu_naming", "2gpu", [("lemon GEMM 694–714 TFLOPS on every GPU", "lemon GEMM 694–714 TFLOPS on every GPU, with two slow GPUs")]),
    ("gpu_naming", "2n", [("- `gpu-b(node1):gpu1` — lemon GEMM", "- `gpu-b(node0):gpu1` — lemon GEMM")]),
    ("gpu_naming", "2n", [("lemon GEMM 650 / 648 / 652 TFLOPS in three passes", "lemon GEMM 650 TFLOPS")]),
    ("verdict_target", "1gpu", [("cannot be called healthy or underperforming until the figures they are supposed to hit arrive",
                                 "are listed here")]),
    ("verdict_target", "1gpu", [("until the figures they are supposed to hit arrive", "until the figure they are supposed to hit arrives")]),
    ("verdict_target", "2gpu", [(f"72.7% of the NVLink 4 spec of 450 GB/s per direction, below the [~80% of the unidirectional spec]"
                                 f"({NET}) that a ring collective reaches on NVLink;", "which is slow;")]),
    ("operator_ask", "1gpu", [(", 1 GiB **327.5 MiB/s / 344.7 MiB/s**", "")]),
    ("operator_ask", "1gpu", [("from one client with 16 jobs, 4 KiB blocks and `O_DIRECT`", "from the vendor")]),
    ("operator_ask", "1gpu", [("- local disk (`/`, 252 GiB, ext4 on `/dev/vda`):", "- local disk:")]),
    ("vendor_unknown", "2n", [("Its provisioned throughput is unknown, so there is no target to compare against: filesystem software "
                               "publishes no performance figures, because throughput is a property of the deployment (storage "
                               "targets, their devices, the network, the stripe count).",
                               "The mounts show only the server address and size, so we could not find a rate for it.")]),
    ("vendor_unknown", "1gpu", [("The provisioned figures of this disk are unknown, so", "The provisioned figures of this disk are "
                                 "unknown (the mount table lists only its size), so")]),
    ("literal_terms", "1gpu", [("Compare a sustained workload to this number.", "A sustained workload will feel this number.")]),
    ("literal_terms", "2gpu", [("that a ring collective reaches on NVLink;", "that a ring collective reaches on NVLink, which will "
                                "hurt collectives;")]),
    ("acronyms", "1gpu", [("MAMF (Maximum Achievable Matmul FLOPS)", "MAMF")]),
    ("acronyms", "2gpu", [("8192 CTAs (cooperative thread arrays, one CUDA thread block each)", "8192 CTAs")]),
    ("terms_defined", "1gpu", [("many **matmul shapes** (M×N×K) on GPU0", "many **shapes** on GPU0")]),
    ("terms_defined", "2n", [("column, which divides this disk's bandwidth by the shared filesystem's on the same row: how many times "
                              "slower the shared filesystem is (1 would mean as fast).", "column.")]),
    ("filler", "1gpu", [("### Local disk IO benchmark\n", "### Local disk IO benchmark\n\nThe results are shown below.\n")]),
    ("filler", "2gpu", [("### Intra-node all-reduce benchmark\n\n", "### Intra-node all-reduce benchmark\n\nThe results are listed "
                         "below.\n\n")]),
    ("filler", "1gpu", [("Compare a sustained workload to this number.", "Compare a sustained workload to this number, for reference.")]),
    ("asserted_absence", "1gpu", [("## Findings", "Skip reasons: none\n\n## Findings")]),
    ("asserted_absence", "2gpu", [("- GPUs: MAMF 814", "- GPUs (nothing to report): MAMF 814")]),
    ("asserted_absence", "1gpu", [("| PCIe to each GPU | Gen5 ×16 |", "| PCIe to each GPU | N/A |")]),
    ("asserted_absence", "2gpu", [("![Intra-node reduce-scatter](raw-2026-11-30-2gpu/busbw-reduce_scatter.png)\n",
                                   "![Intra-node reduce-scatter](raw-2026-11-30-2gpu/busbw-reduce_scatter.png)\n\n### Gaps\n\nNone.\n")]),
    ("workload_assumed", "1gpu", [("Compare a sustained workload to this number.", "Compare a training step to this number.")]),
    ("workload_assumed", "2gpu", [("a rate any sustained workload holds", "a rate any epoch holds")]),
    ("prose_numbers", "1gpu", [("16 KiB **350.7 MiB/s / 453.4 MiB/s**", "16 KiB **350.8 MiB/s / 453.4 MiB/s**")]),
    ("prose_numbers", "1gpu", [("below its node median in all three.", "below its node median in all three, about 680 TFLOPS each.")]),
    ("prose_numbers", "2gpu", [("NVLink: peak busbw 327.3 GB/s at 1 GiB, 72.7% of the NVLink 4 spec of 450 GB/s per direction, below",
                                "NVLink: peak busbw 327 GB/s at 1 GiB, 72.7% of the NVLink 4 spec of 450 GB/s per direction, below")]),
    ("prose_numbers", "1gpu", [("MSMF 698 TFLOPS (70.6% of the official", "MSMF 698 TFLOPS (70.6 of the official")]),
    ("prose_numbers", "2gpu", [("in GB/s (10⁹ bytes per second).", "in GB/s (10⁹ bytes per second); GB/s: 327.3 / 265.4 at 1 GiB.")]),
    ("prose_numbers", "2n", [("1 GiB **32.1 MiB/s / 39.2 MiB/s**", "1 GiB **32 MiB/s / 39.2 MiB/s**")]),
]


def _apply(text: str, edits: list[tuple[str, str]]) -> str:
    for old, new in edits:
        assert old in text, f"case text not in the report: {old[:70]!r}"
        text = text.replace(old, new, 1)
    return text


def test_every_base_passes_every_rule_and_house_rule(bases):
    for name, text in bases.items():
        assert check_report_all(text) == [], name


@pytest.mark.parametrize("rule,base,edits", CASES, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_rule_fails_and_is_named(bases, rule, base, edits):
    good = bases[base]
    assert rule not in rules_of(good)  # the passing side
    bad = _apply(good, edits)
    got = check_report(bad)
    named = {v.rule for v in got}
    assert rule in named, f"{rule} not reported; got {[str(x) for x in got]}"
    assert any(f"[{rule}]" in str(v) for v in got)
    if base in ("1gpu", "2gpu"):  # a mutant of a committed report breaks its one rule only
        assert named == {rule}, [str(x) for x in got]


def test_at_least_40_single_rule_mutants_of_the_committed_reports():
    mutants = [c for c in CASES if c[1] in ("1gpu", "2gpu")]
    assert len(mutants) >= 40
    assert {c[1] for c in mutants} == {"1gpu", "2gpu"}
    assert len({c[0] for c in mutants}) >= 40  # at least 40 distinct rules named on the committed reports


def test_every_rule_has_a_failing_case():
    covered = {c[0] for c in CASES} | {"file_name", "shared_grouping", "node_scope"}
    assert covered == set(r.id for r in RULEBOOK)
    assert len(RULEBOOK) == 62 and [r.n for r in RULEBOOK] == list(range(1, 63))


def test_file_name_rule(bases):
    assert "file_name" in rules_of(bases["1gpu"], "eval-h200-2026-11-29.md")
    assert "file_name" in rules_of(bases["1gpu"], "h200-2026-11-29.md")
    assert "file_name" not in rules_of(bases["1gpu"], "h200-2026-11-29-1442Z.md")


def _shared_copy(text: str, factor: float | None = None) -> str:
    i = text.index("### Shared nfs IO benchmark")
    j = text.index("### Gaps", i) if "### Gaps" in text[i:text.index("## Findings")] else text.index("## Findings")
    sec = text[i:j].replace("### Shared nfs IO benchmark", "### Shared lustre IO benchmark")
    if factor is not None:
        for v in ("36.9", "56.0", "37.9", "48.5", "32.1", "39.2"):
            sec = sec.replace(f"| {v} |", f"| {float(v) * factor:.1f} |", 1)
    toc = "   4. [Shared lustre IO benchmark](#shared-lustre-io-benchmark) — `fio` on `/lustre`\n"
    out = text[:j] + sec + text[j:]
    return out.replace("   3. [Shared nfs IO benchmark](#shared-nfs-io-benchmark) — `fio` on `/data/scratch`\n",
                       "   3. [Shared nfs IO benchmark](#shared-nfs-io-benchmark) — `fio` on `/data/scratch`\n" + toc)


def test_shared_grouping_within_5_percent(bases):
    good = bases["2n"]
    assert "shared_grouping" not in rules_of(good)
    # the same share measured twice (every cell equal): one group, one table
    assert "shared_grouping" in rules_of(_shared_copy(good))
    # 4% slower in every cell: still within 5% (abs(a-b)/min(a,b) = 1/0.96 - 1 = 4.2%)
    assert "shared_grouping" in rules_of(_shared_copy(good, 0.96))
    # 20% slower in every cell: a different group, its own table is right
    assert "shared_grouping" not in rules_of(_shared_copy(good, 0.8))


def test_node_scope_two_nodes_need_the_inter_node_benchmark_or_its_gap():
    # two nodes, no inter-node all-reduce and nothing in Gaps saying why: invented silence
    no_inter = E.build_report(two_node_eval(), raw_dir="raw-2026-11-30-1000Z", access="ssh", inter=None,
                              nccl_env_source="the container image")
    assert "node_scope" in rules_of(no_inter)
    with_gap = E.build_report(two_node_eval(), raw_dir="raw-2026-11-30-1000Z", access="ssh", inter=None,
                              nccl_env_source="the container image",
                              extra_gaps=["network: Inter-node all-reduce benchmark: rendezvous timed out on gpu-b"])
    assert "node_scope" not in rules_of(with_gap)


def test_house_rules_are_named_warnings_not_failures(bases):
    # an earlier product report listed a Network TOC entry whose section holds only Gaps, and an NCCL
    # environment row without "set by": the seed allows both, the house rule warns
    one = _apply(bases["1gpu"], [("3. [Storage](#storage)", "3. [Network](#network)\n4. [Storage](#storage)"),
                                 (", set by the device machine's image, which keeps NVLink multicast off |", " |")])
    assert check_report(one) == []
    warn = check_report_all(one)
    assert {v.rule for v in warn} == {"house_toc_gaps_only", "house_nccl_set_by"}
    assert all(v.severity == "warning" and "(house warning)" in str(v) for v in warn)
    # the seed asks for the scratch clean-up in the summary to the user; the product also says it in the report
    quiet = _apply(bases["1gpu"], [("Every run deleted its own files (`--unlink=1`) and the scratch directory was removed "
                                    "afterwards. ", "")])
    assert check_report(quiet) == [] and {v.rule for v in check_report_all(quiet)} == {"house_scratch_stated"}
    assert set(WARNINGS) == {"house_toc_gaps_only", "house_nccl_set_by", "house_scratch_stated"}


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


def test_a_table_inside_a_code_fence_is_not_a_table(bases):
    # markdown-it parses the structure: a pipe table quoted in a fenced block is code, not a table
    fenced = bases["1gpu"].replace("## Findings", "```\n| size | rw |\n| --- | --- |\n| 16k | read |\n```\n\n## Findings")
    assert check_report(fenced) == []


def test_rules_are_the_62_of_seed_003():
    assert RULES[0] == "structure" and len(RULES) == 63
    assert all(r.section and r.text for r in RULEBOOK)


def test_committed_reports_pass():
    reps = sorted((REPO / "reports").glob("*.md"))
    assert len(reps) >= 2
    for p in reps:
        assert check_file(p) == [], p.name
