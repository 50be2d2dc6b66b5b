"""A reduced-precision conv net in NCHW layout (seed 001 T11): the tensor-core convolutions run in
NHWC, so cuDNN (or MIOpen) wraps every one of them in layout-conversion kernels
(:data:`LAYOUT_CONVERSION`); ``channels_last`` removes them.

Signature: the layout-conversion kernels take at least :data:`MIN_SHARE` of the profiled window.
``share`` = their kernel time / the GPU timeline's total time (what channels_last saves at most).

Detects from the analyst's kernel time by name; re-derived from the verifier reader's kernels over
its own timeline (:class:`~..kernel_share.KernelFamilyCause`). Lever ``channels_last``."""

from __future__ import annotations

import re

from .base import Constant, LeverSpec
from ..figures import Figure
from ..kernel_share import KernelFamilyCause

LAYOUT_CONVERSION = re.compile(r"nchwToNhwc|nhwcToNchw|NCHW2NHWC|NHWC2NCHW|nchw_to_nhwc|nhwc_to_nchw", re.I)
"""Layout-conversion kernels around convolutions: cuDNN ``nchwToNhwcKernel`` / ``nhwcToNchwKernel``;
MIOpen ``transpose_NCHW2NHWC`` / ``transpose_NHWC2NCHW`` (its batched-transpose solver's names).
cuDNN's ``nhwcAddPaddingKernel`` (padding, present with channels_last too) is not one."""
CONV = re.compile(r"conv|fprop|dgrad|wgrad|igemm|MIOpen", re.I)
"""Convolution kernels (the statement's context)."""
MIN_SHARE = 0.05


class NchwConvLayout(KernelFamilyCause):
    """Layout transposes around tensor-core convolutions of an NCHW net (seed 001 T11)."""

    seed = "seed 001 T11"
    causes = {"nchw-conv-layout": "a bf16/fp16 conv net in NCHW: layout transposes around every tensor-core conv"}
    reads = ("rank",)
    include, context, min_share = LAYOUT_CONVERSION, CONV, MIN_SHARE
    claim_id, metric, cause_id, lever_name = ("triage.t11.nchw_layout", "nchw_conv.layout_share", "nchw-conv-layout",
                                              "channels_last")
    figures = (Figure("nchw_conv.layout_share", "fraction", "layout-conversion kernel time / GPU timeline total time",
                      "cause", KernelFamilyCause.tolerance),)
    constants = {"MIN_SHARE": Constant(MIN_SHARE, "measurement on the bundled H200 runs (bench/accuracy/cases): "
                                       "nchw-conv 0.33 of the window in nchwToNhwc/nhwcToNchw kernels; every other "
                                       "run 0.000 (conv-control and cudnn-benchmark-off are channels_last): 6x "
                                       "below the case, above any stray conversion")}
    levers = (LeverSpec("channels_last", "model.to(memory_format=torch.channels_last) and "
                        "x.to(memory_format=torch.channels_last) so tensor-core convolutions need no layout "
                        "transposes (seed 001 T11)"),)

    def statement(self, s: float, part_us: float, context_us: float) -> str:
        return (f"layout-conversion kernels (nchwToNhwc / nhwcToNchw) take {s:.0%} of the profiled window "
                f"({part_us / 1e3:.1f} ms beside {context_us / 1e3:.1f} ms of convolutions): the conv net runs "
                "in NCHW (seed 001 T11)")


CAUSE = NchwConvLayout()
