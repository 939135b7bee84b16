"""The board side's bounded reads: a regular file only, a size cap before reading, a JSON depth cap.

Why a copy of the host's rules (rkdet/records/io.py): the on-board program imports nothing from the
host, and a board's files (a bundle, an io.json) are untrusted: a FIFO must not hang it (O_NONBLOCK),
/dev/zero must not fill its memory, 100k brackets must not overflow json.loads. `visible` shows
untrusted text on a board's terminal as the host's rkdet/textsafe.py does.
"""

import errno
import json
import os
import re
import stat
from typing import Any

MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(b'"[^"\\\\]*(?:\\\\.[^"\\\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(bytearray(b for b in range(256) if b not in b"[]{}"))
_DEPTH_STEP = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


def json_depth(data):
    # type: (bytes) -> int
    """The deepest nesting of arrays/objects in JSON text (strings skipped), in C-speed passes."""
    import itertools
    import operator
    steps = _JSON_STRING.sub(b"", bytes(data)).translate(None, _NOT_BRACKET).translate(_DEPTH_STEP)
    return max(itertools.chain((0,), map(operator.sub, itertools.accumulate(steps), itertools.count(1))))


def loads_bounded(data, where, max_depth=MAX_JSON_DEPTH):
    # type: (bytes, str, int) -> Any
    """JSON text with its depth bounded; ValueError naming `where` otherwise."""
    if json_depth(data) > max_depth:
        raise ValueError("%s: JSON nested deeper than %d levels" % (where, max_depth))
    try:
        return json.loads(bytes(data).decode("utf-8"))
    except (ValueError, RecursionError) as err:
        raise ValueError("%s: not JSON (%s)" % (where, str(err).splitlines()[0][:200] if str(err) else type(err).__name__))


def open_regular(path):
    # type: (str) -> int
    """A read-only descriptor of `path` if it is a regular file (O_NONBLOCK, checked with fstat: a FIFO
    or device never blocks or is read); OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file (a FIFO or device?)", path)
    return fd


def read_regular(path, limit):
    # type: (str, int) -> bytes
    """At most `limit` bytes of a regular file; ValueError when it holds more (nothing more is read)."""
    with os.fdopen(open_regular(path), "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError("%s: larger than %d MiB" % (path, limit >> 20))
    return data


# Untrusted text (a bundle's platform, names) printed on a board: the same characters as the host's
# rkdet/textsafe.py `visible` (tests/trust/test_selfcheck_trust.py checks both agree).
_CONTROL = re.compile(u"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(text):
    # type: (Any) -> str
    """`str(text)` with control and bidi characters shown as escapes (\\x1b, \\u202e)."""
    def escape(match):
        ch = match.group()
        if ch in _NAMED:
            return _NAMED[ch]
        return "\\x%02x" % ord(ch) if ord(ch) <= 0xFF else "\\u%04x" % ord(ch)
    return _CONTROL.sub(escape, str(text))
