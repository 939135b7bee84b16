"""A wait that must end, told apart from a slow machine.

Why: a test proves that a timeout or a cap bounds a wait by the error it gives (the message names the
limit) and by what was not done (nothing pulled, the command killed); how fast a shared CI machine gets
there is not the claim. `ended_within` only tells a hang (or a wait that ignored its limit by minutes)
from that: the limit under test plus a margin no loaded machine needs. Speed lives in bench/.
"""

from __future__ import annotations

import time

#: seconds past the limit under test before a wait counts as hanging (not a speed threshold)
HANG_MARGIN = 60.0


def ended_within(started: float, limit: float = 0.0) -> bool:
    """True when the wait begun at `started` (time.monotonic()) ended within `limit` + HANG_MARGIN."""
    return time.monotonic() - started < limit + HANG_MARGIN
