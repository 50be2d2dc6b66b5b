"""``python -m bench.accuracy score``: see :mod:`bench.accuracy.score`."""

import sys

from .score import main

sys.exit(main())
