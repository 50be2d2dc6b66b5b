"""Make the real CPU DDP traces of tests/test_comm_gloo.py (torch CPU, the gloo backend, 2 ranks).

    python3 tests/data/traces/comm/make_gloo_traces.py   # from the repository root; ~20 s

Model: 8 x Linear(64, 64) (16 parameter tensors, 8 x (64*64 + 64) = 33,280 floats), SGD, batch 16;
one profiled step (wait 1, warm-up 1, active 1) with record_shapes. Rank 0's trace of each case is
written here (gzip):

- ``ddp_default``: ``bucket_cap_mb=25`` (the default): one bucket of 33,280 floats;
- ``ddp_find_unused``: the same with ``find_unused_parameters=True`` on a model whose every
  parameter is used: one more all-reduce, of 16 ints (the used-parameter map);
- ``ddp_tiny_bucket``: ``bucket_cap_mb=0.001`` (1048 B): in reverse parameter order each layer's bias
  (256 B) is under the cap and its weight (16 KiB) fills the bucket, so one bucket per layer: 8
  all-reduces of 4160 floats.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = {"ddp_default": (False, 25.0), "ddp_find_unused": (True, 25.0), "ddp_tiny_bucket": (False, 0.001)}

WORKER = r'''
import os, sys, torch, torch.nn as nn, torch.distributed as dist
from torch.profiler import profile, ProfilerActivity, schedule
fu, cap, out = sys.argv[1] == "1", float(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(8)])
ddp = nn.parallel.DistributedDataParallel(model, find_unused_parameters=fu, bucket_cap_mb=cap)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
x = torch.randn(16, 64)
def ready(p):
    if rank == 0:
        p.export_chrome_trace(out)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=1, warmup=1, active=1),
             on_trace_ready=ready) as p:
    for _ in range(4):
        opt.zero_grad()
        ddp(x).sum().backward()
        opt.step()
        p.step()
dist.destroy_process_group()
'''


def main() -> int:
    tmp = Path(tempfile.mkdtemp())
    (tmp / "worker.py").write_text(WORKER)
    for port, (name, (fu, cap)) in enumerate(CASES.items(), start=29741):
        raw = tmp / f"{name}.json"
        env = dict(os.environ, OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                        str(port), str(tmp / "worker.py"), "1" if fu else "0", str(cap), str(raw)],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        (HERE / f"{name}_rank0.json.gz").write_bytes(gzip.compress(raw.read_bytes(), mtime=0))
    shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
