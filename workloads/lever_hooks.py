"""Run the project's workload (``train.py``) with the levers it has no flag for, set through the
environment (torch only, like ``train.py``; used by the GPU lever catalogs as
``AI4S_WORKLOAD_MODULE=ai4s_graph.workloads.lever_hooks``):

- ``AI4S_TORCH_COMPILE=<mode>``: wrap the constructed model in ``torch.compile(model, mode=<mode>)``
  (``default``, ``reduce-overhead`` = CUDA graphs, ``max-autotune``). Seed 000 lesson 2: wrap the
  model object after construction, not a module path. Lesson 6: blocked for double-backward
  models (the GNN's force loss) -- ``aot_autograd`` cannot differentiate its own backward;
- ``AI4S_MATMUL_PRECISION=high|medium``: ``torch.set_float32_matmul_precision`` (TF32 on
  Ampere and later);
- ``AI4S_CUDNN_BENCHMARK=1``: ``torch.backends.cudnn.benchmark = True`` (``0``: False, torch's
  default, set explicitly).

The other levers of ``tools/levers/catalogs/workload.yaml`` set ``train.py`` knobs (the injected
causes of ``faults.py``). Every argument goes to ``train.main`` unchanged; the hooks applied are
printed to stderr.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

if __package__:
    from . import train as _train
    from . import tunable as _tunable
else:  # run as a file on a GPU node that has only torch
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import train as _train  # type: ignore  # noqa: E402
    import tunable as _tunable  # type: ignore  # noqa: E402


def apply_hooks(env: dict[str, str] | None = None) -> list[str]:
    """Apply the environment's hooks; returns what was applied (for the log)."""
    env = dict(os.environ if env is None else env)
    done = []
    mode = env.get("AI4S_TORCH_COMPILE")
    if mode:
        holder = getattr(_train, "_models", _train)  # the module whose build_model train.main calls
        build = holder.build_model

        def compiled_build(*args, **kwargs):
            model = build(*args, **kwargs)
            return torch.compile(model, mode=None if mode == "default" else mode)

        holder.build_model = compiled_build
        done.append(f"torch.compile(mode={mode})")
    prec = env.get("AI4S_MATMUL_PRECISION")
    if prec:
        torch.set_float32_matmul_precision(prec)
        done.append(f"float32_matmul_precision={prec}")
    bench = env.get("AI4S_CUDNN_BENCHMARK")
    if bench in ("0", "1"):
        torch.backends.cudnn.benchmark = bench == "1"
        done.append(f"cudnn.benchmark={bench == '1'}")
    return done


def apply_tunable(env: dict[str, str] | None = None, tunable_api=None) -> list[str]:
    """``AI4S_TUNABLEOP_TIMEBOX_S=<s>`` (and ``AI4S_TUNABLEOP_DIR``): PyTorch TunableOp tuning for
    that many seconds, then tuning off and the partial per-rank cache kept (seed 000 lesson 28;
    :mod:`tunable`); the box is checked before every forward of the constructed model.
    ``tunable_api``: the TunableOp module (default ``torch.cuda.tunable``). Returns what was applied."""
    box = _tunable.from_env(dict(os.environ if env is None else env), tunable_api)
    if box is None:
        return []
    done = [box.arm()]
    holder = getattr(_train, "_models", _train)  # the module whose build_model train.main calls
    build = holder.build_model

    def boxed_build(*args, **kwargs):
        model = build(*args, **kwargs)

        def check_box(_module, _inputs):  # returns None: the inputs pass unchanged
            box.check()

        model.register_forward_pre_hook(check_box)
        return model

    holder.build_model = boxed_build
    return done


def main(argv: list[str] | None = None) -> int:
    done = apply_hooks() + apply_tunable()
    print(f"ai4s-lever-hooks: {', '.join(done) or 'none'}", file=sys.stderr)
    return _train.main(argv)


if __name__ == "__main__":
    sys.exit(main())
