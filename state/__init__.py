"""Pydantic models of the graph state: manifest, claims, verdicts, report, STATUS line.

Where a claim is made, checked and reported:

- made:     ``graph/analysis/nodes/trace_analyst.py``, ``graph/analysis/nodes/telemetry_analyst.py`` -> :class:`Claim`
- checked:  ``graph/analysis/nodes/trace_verifier.py``, ``graph/analysis/nodes/telemetry_verifier.py``
  -> :class:`VerifiedClaim`
- reported: ``graph/analysis/nodes/synthesizer.py`` -> :class:`Report` (``report.md``, ``report.json``)

The analysis graph's state holds these models as they are (``graph/analysis/schema.py``).
"""

from .claims import BottleneckClass, Claim, Evidence, Tolerance, Verdict, VerifiedClaim
from .manifest import TERMINAL_STATES, Artifacts, Manifest
from .report import Bottleneck, Contradiction, LeverRecommendation, NamedCause, Report, Usage
from .status import Outcome, StatusLine, with_note, worst

__all__ = [
    "Artifacts", "Bottleneck", "BottleneckClass", "Claim", "Contradiction", "Evidence", "LeverRecommendation", "NamedCause",
    "Manifest", "Outcome", "Report", "StatusLine", "TERMINAL_STATES", "Tolerance", "Usage",
    "Verdict", "VerifiedClaim", "with_note", "worst",
]
