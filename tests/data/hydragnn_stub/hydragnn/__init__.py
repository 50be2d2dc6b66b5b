"""Stand-in for the hydragnn package (see ../README.md)."""
from . import models  # noqa: F401
