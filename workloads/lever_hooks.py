"""Run the project's workload (``train.py``) with the levers it has no flag for, set through the
environment (torch only, like ``train.py``; used by the GPU lever catalogs as
``AI4S_WORKLOAD_MODULE=ai4s_graph.workloads.lever_hooks``):

- ``AI4S_TORCH_COMPILE=<mode>``: wrap the constructed model in ``torch.compile(model, mode=<mode>)``
  (``default``, ``reduce-overhead`` = CUDA graphs, ``max-autotune``). Seed 000 lesson 2: wrap the
  model object after construction, not a module path. Lesson 6: blocked for double-backward
  models (the GNN's force loss) -- ``aot_autograd`` cannot differentiate its own backward;
- ``AI4S_MATMUL_PRECISION=high|medium``: ``torch.set_float32_matmul_precision`` (TF32 on
  Ampere and later);
- ``AI4S_CUDNN_BENCHMARK=1``: ``torch.backends.cudnn.benchmark = True``;
- ``AI4S_TUNABLEOP_TIMEBOX_S=<s>`` (``AI4S_TUNABLEOP_DIR``): TunableOp tuning for that many
  seconds, then the partial per-rank cache (lesson 28; :mod:`tunable`).

Every argument goes to ``train.main`` unchanged; the hooks applied are printed to stderr.
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


def apply_hooks(env: dict[str, str] | None = None, tunable_api=None) -> list[str]:
    """Apply the environment's hooks; returns what was applied (for the log). ``tunable_api``:
    the TunableOp module (default ``torch.cuda.tunable``)."""
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
    if env.get("AI4S_CUDNN_BENCHMARK") == "1":
        torch.backends.cudnn.benchmark = True
        done.append("cudnn.benchmark")
    box = _tunable.from_env(env, tunable_api)
    if box is not None:  # lesson 28: a time-boxed tune; the box is checked before every forward
        done.append(box.arm())
        holder = getattr(_train, "_models", _train)
        build_tuned = holder.build_model

        def boxed_build(*args, **kwargs):
            model = build_tuned(*args, **kwargs)
            def check_box(_module, _inputs):  # returns None: the inputs pass unchanged
                box.check()

            model.register_forward_pre_hook(check_box)
            return model

        holder.build_model = boxed_build
    return done


def main(argv: list[str] | None = None) -> int:
    done = apply_hooks()
    print(f"ai4s-lever-hooks: {', '.join(done) or 'none'}", file=sys.stderr)
    return _train.main(argv)


if __name__ == "__main__":
    sys.exit(main())
