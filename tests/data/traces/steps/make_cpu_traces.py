"""Make the CPU-profiled traces of host-side causes for the step accounting tests (issue 34).

Run with torch installed (CPU is enough): ``python tests/data/traces/steps/make_cpu_traces.py``.
Each trace profiles 3 steps of a small MLP training loop (``torch.profiler`` with ``with_stack``,
``record_shapes``, ``profile_memory``) with one host-side cause injected in every step, large
enough by construction to be the step's largest part:

- ``python_work``: a pure-Python loop (``busy_python``) outside every op;
- ``gc_collect``: ``gc.collect()`` over many live objects (``collect_garbage``);
- ``torch_save``: ``torch.save`` of the model each step into a buffer (``checkpoint``);
- ``per_sample``: the forward run once per sample on batch-1 slices (``forward_per_sample``);
- ``cpu_preprocess``: tensor preprocessing on the CPU in the main process (``preprocess``).

The traces are written gzipped beside this script (a few hundred kB each).
"""

from __future__ import annotations

import gc
import gzip
import io
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

HERE = Path(__file__).resolve().parent
torch.manual_seed(0)
torch.set_num_threads(1)


def busy_python(n: int = 400_000) -> int:
    s = 0
    for i in range(n):
        s += i * i % 7
    return s


JUNK = [[{"k": i, "v": [i] * 4} for i in range(200)] for _ in range(300)]


def collect_garbage() -> int:
    return gc.collect()


def checkpoint(model: torch.nn.Module) -> int:
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.tell()


def forward_per_sample(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return torch.cat([model(x[i:i + 1]) for i in range(x.shape[0])])


def preprocess(raw: torch.Tensor) -> torch.Tensor:
    for _ in range(20):
        raw = (raw - raw.mean(dim=1, keepdim=True)) / (raw.std(dim=1, keepdim=True) + 1e-6)
        raw = torch.nn.functional.pad(raw, (1, 1))[:, 1:-1]
    return raw[:, :64].contiguous()


def train(kind: str, out: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 64), torch.randn(16, 8)
    raw = torch.randn(16, 1 << 16)  # the samples before preprocessing
    sched = schedule(wait=1, warmup=1, active=3, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True, record_shapes=True, profile_memory=True,
                 schedule=sched) as prof:
        for _ in range(5):
            xb = preprocess(raw) if kind == "cpu_preprocess" else x
            outp = forward_per_sample(model, xb) if kind == "per_sample" else model(xb)
            loss = torch.nn.functional.mse_loss(outp, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if kind == "python_work":
                busy_python()
            elif kind == "gc_collect":
                collect_garbage()
            elif kind == "torch_save":
                for _ in range(4):
                    checkpoint(model)
            prof.step()
    with tempfile.TemporaryDirectory() as d:
        raw = Path(d) / "t.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as src, gzip.open(out, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)


if __name__ == "__main__":
    for kind in sys.argv[1:] or ("python_work", "gc_collect", "torch_save", "per_sample", "cpu_preprocess"):
        train(kind, HERE / f"{kind}.json.gz")
        print(kind, (HERE / f"{kind}.json.gz").stat().st_size)
