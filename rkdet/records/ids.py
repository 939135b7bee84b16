"""Run and session ids: THE one definition, for what makes them and for everything that takes one.

Why one: an id becomes a host folder (`results/<board>/<fp16>/<run-id>/`, the private resume record
`<run-id>.json`), a board path (`runs/<session>/<run>`), a history row and a terminal line, and it is read back
from files a colleague or a board may have crafted (deploy.json, the private record). Three patterns that had
drifted apart (one allowed '.', '_' and 128 characters, one any length) meant a crafted id passed one door and
not another. Here: what `rkdet deploy` and `rkdet fleet deploy` make (`YYYYMMDDTHHMMSSZ-<hex>`) fits the one
pattern, a plain token of letters, digits and '-' starting with a letter or digit, at most 64 characters: no
path separator, no '..', no whitespace or control character, nothing a shell or a terminal reads specially.
"""

from __future__ import annotations

import re
import secrets
import time
from typing import Any

from rkdet.errors import InputError

#: a run id, a session id or a fleet run id
ID_PATTERN = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,63}")
#: what a refusal says an id must be
ID_RULE = "letters, digits and '-', starting with a letter or digit, at most 64"


def new_run_id(random_bytes: int = 2) -> str:
    """A new id (a run's, a session's, a fleet run's): UTC time to the second and `random_bytes` random bytes
    in hex, so ids sort by time and two made in one second differ."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(random_bytes)


def is_run_id(value: Any) -> bool:
    """True when `value` is an id rkdet makes (ID_PATTERN)."""
    return isinstance(value, str) and ID_PATTERN.fullmatch(value) is not None


def check_run_id(value: Any, what: str = "run id", where: str = "",
                 then: str = "not a run folder rkdet deploy made, or a crafted one") -> str:
    """`value` when it is an id rkdet makes; else InputError, one line naming `where` (a file, when the id was
    read from one) and `what`, the id shown escaped and cut to 40 characters, and `then` (what it means, what to do)."""
    if is_run_id(value):
        return value  # type: ignore[no-any-return]
    shown = repr(value[:40] if isinstance(value, str) else value)[:60]
    raise InputError(f"{where + ': ' if where else ''}{what} {shown} is not one rkdet makes ({ID_RULE}); {then}")


__all__ = ["ID_PATTERN", "ID_RULE", "check_run_id", "is_run_id", "new_run_id"]
