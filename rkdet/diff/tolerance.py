"""The diff's name for the one tolerance value (defined in rkdet.tolerance, shared with the config
loader and deploy); kept so `from rkdet.diff.tolerance import Tolerance` stays the documented API."""

from __future__ import annotations

from rkdet.tolerance import KEYS, Tolerance

__all__ = ["KEYS", "Tolerance"]
