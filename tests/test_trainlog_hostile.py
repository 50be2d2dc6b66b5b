"""Training logs as terminals and adversaries write them (issues 26, 33): colour codes around every
number (``rich.logging.RichHandler`` with forced colour), cursor moves and OSC window titles,
carriage-return progress bars, colour inside a number; one 1 MB line (the regular expressions
must stay linear: the time is bounded by a budget in the harness, never asserted); ``time
1e308``. Every right value is computed by hand."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ai4s_graph.cli import app
from ai4s_graph.state import Report
from ai4s_graph.tools.trainlog import fom, formats
from ai4s_graph.tools.trainlog.reread import reread_log

from telemetry_builders import T0, dcgm_gpu, grid, perf_run, rms

ESC = "\x1b"
REPO = Path(__file__).resolve().parent.parent


def _c(x: object, code: str = "1;36") -> str:
    """``x`` in colour, as rich writes a highlighted number: ``ESC[1;36m0ESC[0m``."""
    return f"{ESC}[{code}m{x}{ESC}[0m"


def _plain_log(n: int = 20) -> list[tuple[int, float, float]]:
    """(batch, loss, time): step i takes 0.5 s, except every 4th 0.7 s."""
    return [(i, 2.0 - i / 40, 0.7 if i % 4 == 0 else 0.5) for i in range(n)]


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "train.log"
    p.write_text(text)
    return p


# A single-epoch log of 20 steps: the first 10 % (2 steps) are warm-up; of the other 18, steps
# 4, 8, 12, 16 take 0.7 s and 14 take 0.5 s: median 0.5 s.
STEADY = 0.5


@pytest.mark.parametrize("style", ["rich", "osc-title", "cursor", "inside-number", "8-bit-csi"])
def test_escape_sequences_are_display_only(tmp_path, style):
    lines = []
    for i, loss, t in _plain_log():
        if style == "rich":
            s = f"Batch {_c(i)}: loss {_c(f'{loss:.4f}')} time {_c(t)} seconds"
        elif style == "osc-title":
            s = f"{ESC}]0;step {i}\x07Batch {i}: loss {loss:.4f} time {t} seconds{ESC}]2;done{ESC}\\"
        elif style == "cursor":
            s = f"{ESC}[2K{ESC}[1GBatch {i}: loss {loss:.4f} {ESC}[1Atime {t} seconds{ESC}7{ESC}8"
        elif style == "inside-number":
            whole, frac = f"{t:.2f}".split(".")
            s = f"Batch {i}: loss {loss:.4f} time {whole}.{_c(frac, '33')} seconds"
        else:
            s = f"\x9b1mBatch {i}\x9b0m: loss {loss:.4f} time {t} seconds"
        lines.append(s)
    p = _write(tmp_path, "\n".join(lines) + "\nEpoch 0 completed\n")
    r = fom.parse_log(p, global_batch_size=16)
    assert (r.n_steps, r.steady_step_time_s) == (20, STEADY)
    assert r.throughput_samples_per_s == pytest.approx(32.0)  # 16 / 0.5
    assert any("terminal escape sequence(s) stripped" in n for n in r.notes)
    rr = reread_log(p)  # the verifier's own reader strips them too
    assert [round(x, 3) for x in rr["steps"]] == [t for _, _, t in _plain_log()]


def test_carriage_return_progress_bar_rewrites(tmp_path):
    """tqdm rewriting one line with ``\\r`` and coloured; the step lines between its updates."""
    out = []
    for i, loss, t in _plain_log():
        out.append(f"\r{_c('Train', '35')}: {i * 5:3d}%|{'#' * (i // 2)}| {i}/20 [00:0{i // 10}<00:10, 2.00it/s]")
        out.append(f"\rBatch {i}: loss {loss:.4f} time {t} seconds\n")
    p = _write(tmp_path, "".join(out) + "Epoch 0 completed\n")
    r = fom.parse_log(p)
    assert r.format == "batch_time" and (r.n_steps, r.steady_step_time_s) == (20, STEADY)


def test_coloured_hydragnn_bars_are_read(tmp_path):
    """HydraGNN's tqdm bars with colour: two epochs of 20 batches at 1.25 and 1.00 s/it; the first
    epoch is warm-up, so the epoch time is 20 x 1.00 = 20 s."""
    text = ""
    for e, spi in enumerate((1.25, 1.0)):
        for n in (5, 20):
            text += f"\r{_c('Train')}: {_c(f'{n * 5:3d}%')}|####| {n}/20 [00:{int(n * spi):02d}<00:00, {spi:.2f}s/it]"
        text += f"\nEpoch: {e:02d}, Train Loss: {_c(f'{1.0 - e / 10:.3f}')}, Val Loss: 1.0, Test Loss: 1.0\n"
    r = fom.parse_log(_write(tmp_path, text))
    assert r.format == "hydragnn_tqdm" and r.epoch_times_s == [25.0, 20.0] and r.epoch_time_s == 20.0
    assert r.epoch_losses == [1.0, 0.9]


def test_a_coloured_log_through_the_graph_is_confirmed(tmp_path):
    t0 = T0 + 300000
    ts = grid(t0, t0 + 20)
    log = "\n".join(f"Batch {_c(i)}: loss {_c(f'{loss:.4f}')} time {_c(t)} seconds" for i, loss, t in _plain_log())
    run = perf_run(tmp_path, "98201", dcgm_gpu("lg1", 0, ts, lambda t: 50.0) + rms("lg1", "98201", ts),
                   start=t0, end=t0 + 20, nodes=["lg1"], log=log + "\nEpoch 0 completed\n")
    out = tmp_path / "o"
    res = CliRunner().invoke(app, ["run", "--job", "98201", "--perf-run", str(run), "--out", str(out)])
    rep = Report.model_validate_json((out / "report.json").read_text())
    step = next(v for v in rep.claims if v.claim.metric == "fom.steady_step_time_s")
    assert step.claim.value == STEADY and step.verdict.value == "confirmed"
    # 3 numbers a line, each between an opening and a closing code: 6 x 20 lines
    assert "(120 terminal escape sequence(s) stripped)" in rep.statuses["telemetry_analyst"]
    assert not [m for m in rep.missing if "training log" in m], res.output


_BUDGET_S = 120  # the harness's budget: far above the < 1 s these take (main took > 5 min on 1 MB)

_LONG_LINE = {
    "tqdm-desc": "'x: ' * 350000",                  # the lazy desc class ran from every start (issue 26)
    "tqdm-bars": "'Train: 50%|' * 100000",
    "edm-heads": "'epoch: 1 batch_idx 1 ' * 50000",   # a lazy '.*?' up to 'loss' from every head
    "digit-run": "'Batch 1: loss ' + '1' * 1000000",  # a long number under backtracking
}


@pytest.mark.parametrize("kind", sorted(_LONG_LINE))
@pytest.mark.parametrize("cap", ["default", "uncapped"])
def test_one_megabyte_line_is_read_in_linear_time(tmp_path, kind, cap):
    """One ~1 MB line between two step lines: the log is read (2 steps) within the budget, with the
    cap (the line cut and said) and without it (the patterns alone are linear)."""
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from ai4s_graph.tools.trainlog import fom, formats
        if {cap == 'uncapped'!r}:
            formats.MAX_RECORD_CHARS = 10**9
        p = Path(sys.argv[1])
        p.write_text("Batch 0: loss 1.0 time 0.5 seconds\\n" + {_LONG_LINE[kind]} + "\\nBatch 1: loss 1.0 time 0.5 seconds\\n")
        r = fom.parse_log(p)
        print(r.n_steps, "|".join(r.notes))
    """)
    cp = subprocess.run([sys.executable, "-c", code, str(tmp_path / "long.log")], capture_output=True, text=True,
                        timeout=_BUDGET_S, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert cp.returncode == 0, cp.stderr[-2000:]
    n, _, notes = cp.stdout.strip().partition(" ")
    assert n == "2"
    if cap == "default":
        assert "1 line(s) longer than 8192 characters" in notes and "were cut to their first 8192" in notes


def test_a_cut_line_is_said_in_the_report(tmp_path):
    p = _write(tmp_path, "Batch 0: loss 1.0 time 0.5 seconds\n" + "z" * 10000 + "\nBatch 1: loss 1.0 time 0.5 seconds\n")
    r = fom.parse_log(p)
    assert r.n_steps == 2 and r.notes == ["1 line(s) longer than 8192 characters (the longest 10000) were cut to "
                                          "their first 8192"]


def test_a_step_time_of_1e308_does_not_overflow(tmp_path):
    """Steps 5 and 6 take 1e308 s: their sum overflows (statistics.fmean raised OverflowError).
    The median of the 18 steady steps is still 0.5 s; the mean is inf."""
    p = _write(tmp_path, "".join(f"Batch {i}: loss 1.0 time {'1e308' if i in (5, 6) else '0.5'} seconds\n"
                                 for i in range(20)))
    r = fom.parse_log(p, global_batch_size=8)
    assert r.steady_step_time_s == 0.5 and r.step_time_mean_s == float("inf")
    assert formats.strip_escapes("a\x1b[31mb")[0] == "ab"
