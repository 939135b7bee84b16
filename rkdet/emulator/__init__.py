"""The emulated board: kernel-like sysfs/procfs (FUSE or plain tree), sshd, runtime double.

`EmulatedBoard`, `SshdVariant` and `VARIANTS` are importable from here (loaded on first use, so
importing the package for the runtime double stays cheap).
"""

from __future__ import annotations

from typing import Any

__all__ = ["EmulatedBoard", "VARIANTS", "SshdVariant"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rkdet.emulator import sshd

        return getattr(sshd, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
