"""numpy, or None when this Python has none: imported in this one place.

Why: a board without python3-numpy must still get one line and exit 3 from rkdet-run and
rkdet-selfcheck (they check `np is None` first), not an ImportError at the first module import.
"""

try:
    import numpy as np
except ImportError:
    np = None  # type: ignore
