"""The one bounded reader of every JSON file rkdet reads on the host (docs/SECURITY.md).

Why: a build folder, a result set, a run folder or a self-check bundle may come from someone else (a
colleague's build, a CI artefact, a hostile board). So a file is opened only if it is a regular file
(O_NONBLOCK: a FIFO swapped in cannot hang us; a symlink to /dev/zero is refused by fstat), at most
`limit` bytes are read, the nesting depth is measured *before* `json.loads` (so 100k brackets are one
line, not a RecursionError), and integer literals are bounded (10**4000 is refused, not an
OverflowError later). Every refusal is one line naming the file. The same module holds the one
"may I write here" rule (`check_may_write`) for files rkdet writes beside a user's config, the one
atomic writer (`write_atomic`, re-exported: it is defined once, with the board side's code) and the
one folder swap (`swap_folder`: a build folder, a pulled result folder).

The board side (rkdet/onboard/, Python 3.6, stdlib + numpy) cannot import this module: it keeps its own
small bounded reader with the same rules (onboard/bounded.py). The one atomic writer lives there
(onboard/atomic.py, used on the board too) and is re-exported here: host code imports it from this module.
"""

from __future__ import annotations

import json
import operator
import os
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from itertools import accumulate, count
from pathlib import Path
from typing import Any, BinaryIO

from rkdet.errors import InputError, RkdetError
from rkdet.onboard.atomic import save_array_atomic, write_atomic, write_json_atomic  # the one atomic writer (host and board)

# THE atomic writer (temp name in the same folder, fsync, rename; never renamed over a device, FIFO or
# symlink) is defined once beside the board-side program (rkdet/onboard/atomic.py, stdlib only), which
# cannot import this module. Host code imports it from here only (`from rkdet.records.io import write_atomic`).

MAX_JSON = 16 << 20  # bytes of one JSON document (manifest, run.json, deploy.json, cells.json, ...)
MAX_LINE = 1 << 20  # bytes of one JSON Lines record
MAX_RUN_RECORD = 4 << 20  # bytes of a run folder's records from a board (deploy.json, board.json, run.json, cells.json)
MAX_DEPTH = 64  # nesting of arrays/objects; rkdet's own files nest at most ~8 deep
MAX_INT_DIGITS = 64  # an integer literal longer than this is not one rkdet writes

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_STEP = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


def kind(mode: int) -> str:
    """What a non-regular file is, for a refusal line."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: Path, error: type[RkdetError] = InputError) -> BinaryIO:
    """Open `path` for reading only if it is a regular file (a symlink to one is followed; the open
    descriptor is checked again, opened O_NONBLOCK so a FIFO swapped in meanwhile cannot block).

    FileNotFoundError passes through for the caller's own message; anything else is `error`.
    """
    try:
        before = os.stat(path)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise error(f"{path}: cannot read ({err.strerror})") from None
    if not stat.S_ISREG(before.st_mode):
        raise error(f"{path}: is {kind(before.st_mode)}, not a regular file; rkdet reads only regular files")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise error(f"{path}: cannot read ({err.strerror})") from None
    after = os.fstat(fd)
    if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise error(f"{path}: changed while being opened (now {kind(after.st_mode)}); not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_capped(path: Path, limit: int = MAX_JSON, error: type[RkdetError] = InputError) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (more: one line, nothing more read)."""
    with open_regular(path, error) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise error(f"{path}: larger than {_size(limit)}; not a file rkdet wrote")
    return data


def depth(data: bytes) -> int:
    """The deepest nesting of arrays/objects in JSON text (strings skipped), in C-speed passes."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKET).translate(_DEPTH_STEP)
    # each opener counts +2, each closer 0; minus one per bracket: the running depth
    return max(map(operator.sub, accumulate(brackets), count(1)), default=0)


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer literal of {len(text)} digits")
    return int(text)


def loads(data: bytes | str, where: str, *, max_depth: int = MAX_DEPTH,
          error: type[RkdetError] = InputError) -> Any:
    """JSON text (already bounded in size) parsed with the depth and integer bounds; `where` names it."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if depth(raw) > max_depth:
        raise error(f"{where}: JSON nested deeper than {max_depth} levels; not a file rkdet wrote")
    try:
        return json.loads(raw.decode("utf-8"), parse_int=_int)
    except UnicodeDecodeError:
        raise error(f"{where}: not UTF-8 text; not a file rkdet wrote") from None
    except (ValueError, RecursionError) as err:
        raise error(f"{where}: unreadable JSON ({str(err)[:120]})") from None


def read_json(path: Path, *, limit: int = MAX_JSON, max_depth: int = MAX_DEPTH,
              error: type[RkdetError] = InputError) -> Any:
    """Any JSON document from a regular file, bounded (size, depth, integers). FileNotFoundError passes."""
    return loads(read_capped(path, limit, error), str(path), max_depth=max_depth, error=error)


def read_json_object(path: Path, *, limit: int = MAX_JSON, max_depth: int = MAX_DEPTH,
                     error: type[RkdetError] = InputError) -> dict[str, Any]:
    """`read_json`, which must be an object."""
    obj = read_json(path, limit=limit, max_depth=max_depth, error=error)
    if not isinstance(obj, dict):
        raise error(f"{path}: expected a JSON object")
    return obj


def iter_jsonl(path: Path, limit: int = MAX_LINE, error: type[RkdetError] = InputError
               ) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of a JSON Lines file; a final line without newline is a torn write, skipped.

    No line is read beyond `limit` bytes, so one endless line cannot fill memory.
    """
    with open_regular(path, error) as handle:
        lineno = 0
        while True:
            line = handle.readline(limit + 1)
            lineno += 1
            if not line:
                return
            if len(line) > limit:
                raise error(f"{path}:{lineno}: line longer than {_size(limit)}; not a record rkdet-run writes")
            if not line.endswith(b"\n"):
                return
            if not line.strip():
                continue
            record = loads(line, f"{path}:{lineno}", error=error)
            if not isinstance(record, dict):
                raise error(f"{path}:{lineno}: expected a JSON object")
            yield lineno, record


def check_may_write(path: Path, what: str = "output") -> None:
    """THE "may I write here" rule for a file rkdet writes beside a user's file (init's config,
    `<config>.searched.yaml`, `search.json`), checked before the long work starts: the name is absent
    or a regular file (never a symlink, FIFO, device or folder: we would follow or hang), and its
    folder exists (or can be created) and is writable. One line naming the file otherwise (exit 2)."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # the folder part is checked below
        st = None
    except OSError as err:
        raise InputError(f"{path}: cannot check the {what} ({err.strerror}); choose another path") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path}: is {kind(st.st_mode)}, not a regular file; rkdet will not write its {what} "
                         "through it: remove it or choose another path")
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"{folder}: cannot create the folder for {path.name} ({err.strerror}); choose another "
                         "path") from None
    try:  # a real probe: os.access says yes to root on a read-only mount
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".rkdet-write-test-"):
            pass
    except OSError as err:
        raise InputError(f"{folder}: not a writable folder ({err.strerror}), so {path.name} ({what}) cannot be "
                         "written; choose another path") from None


_HEX64 = re.compile(r"[0-9a-f]{64}")


def identifier(value: Any, where: Path | str, field: str, *, required: bool = True) -> str | None:
    """THE check of an identifier read from a build folder (a fingerprint, a sha256): 64 lowercase hex,
    because it becomes part of a path (run folder, board work dir, cut cache) and a command line. A
    build folder is input (a colleague's, CI's): anything else is one line naming the file and field."""
    if value is None and not required:
        return None
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise InputError(f"{where}: {field} {str(value)[:80]!r} is not 64 lowercase hex digits; the build folder is "
                         "damaged or crafted, re-run rkdet convert")
    return value


def swap_folder(stage: Path, final: Path) -> None:
    """THE folder swap: rename the finished `stage` folder to `final`, replacing an existing folder whole
    (renamed aside, the new one renamed in, the old one removed), so a reader sees the old folder or the
    new one, never a mix. Used for a build folder (convert, the search's passing variant, import-rknn)
    and a pulled result folder. `stage` must be in `final`'s folder (same file system). `final` must be
    absent or a real folder: a symlink, file, FIFO or device there is refused (InputError), not replaced."""
    stage, final = Path(stage), Path(final)
    try:
        mode = os.lstat(final).st_mode
    except FileNotFoundError:
        os.rename(stage, final)
        return
    if not stat.S_ISDIR(mode):
        raise InputError(f"{final}: exists and is {kind(mode)}, not a folder; rkdet replaces only a folder there: "
                         "remove it or choose another path")
    old = final.with_name(f".{final.name}.rkdet-old-{secrets.token_hex(4)}")
    os.rename(final, old)
    try:
        os.rename(stage, final)
    except BaseException:
        os.rename(old, final)  # put the old folder back: nothing half-installed
        raise
    shutil.rmtree(old, ignore_errors=True)


SHARED = 0o644  # a run folder's files are published (reviews, audits): readable by others whatever the umask


def write_json(path: Path | str, obj: Any, mode: int | None = None) -> None:
    """A JSON document as rkdet writes every one (sorted keys, two-space indent, a final newline),
    through the one atomic writer (docs/FORMATS.md); `mode` for a private file (0600)."""
    write_atomic(str(path), json.dumps(obj, indent=2, sort_keys=True) + "\n", perms=mode)


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit >> 10} KiB"


__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "MAX_JSON", "MAX_LINE", "MAX_RUN_RECORD", "check_may_write", "depth", "identifier",
           "iter_jsonl", "kind", "loads", "open_regular", "read_capped", "read_json", "read_json_object", "swap_folder",
           "SHARED", "write_atomic", "write_json", "write_json_atomic"]
