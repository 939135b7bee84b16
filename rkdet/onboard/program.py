"""The on-board program as ONE file for a board: `rkdet-onboard.pyz`, a zipapp of rkdet/onboard/.

Why a zipapp: a board gets one verified push under one name (deploy, the self-check install and the
bisection push the same file), and runs it with its own python3 (`python3 rkdet-onboard.pyz run ...`;
a zip on the command line is first on sys.path, also under -I). Its bytes are deterministic (sorted
names, fixed timestamps), so an unchanged program is never pushed again (transfer.push compares the
sha256). Host-side only (it is not packed itself); stdlib.
"""

import os
import zipfile
from typing import List, Optional, Sequence

from .atomic import write_atomic

PROGRAM = "rkdet-onboard.pyz"
HERE = os.path.dirname(os.path.abspath(__file__))
_NOT_PACKED = ("program.py",)
_STUB = '"""rkdet on a board: only its on-board program, rkdet.onboard (from rkdet-onboard.pyz)."""\n'
_MAIN = "import sys\n\nfrom rkdet.onboard.__main__ import main\n\nsys.exit(main())\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)


def sources():
    # type: () -> List[str]
    """The package's module files that go into the zipapp, sorted."""
    return sorted(os.path.join(HERE, n) for n in os.listdir(HERE) if n.endswith(".py") and n not in _NOT_PACKED)


def _entries():
    # type: () -> List[tuple]
    entries = [("__main__.py", _MAIN.encode("utf-8")), ("rkdet/__init__.py", _STUB.encode("utf-8"))]
    for path in sources():
        with open(path, "rb") as handle:
            entries.append(("rkdet/onboard/" + os.path.basename(path), handle.read()))
    return entries


def build(folder):
    # type: (str) -> str
    """Write `folder/rkdet-onboard.pyz` (atomically) and return its path; the same sources give the same bytes."""
    def write(handle):
        with zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in _entries():
                info = zipfile.ZipInfo(name, date_time=_EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                archive.writestr(info, data)
    return write_atomic(os.path.join(str(folder), PROGRAM), write)


def argv(program, command, args=()):
    # type: (str, str, Sequence[str]) -> List[str]
    """The board's command line for `command` (run or selfcheck) of the program at `program`."""
    return ["python3", program, command] + [str(a) for a in args]


def main(argv=None):
    # type: (Optional[Sequence[str]]) -> int
    """`python -m rkdet.onboard.program DIR`: write DIR/rkdet-onboard.pyz (to copy to a board by hand)."""
    import sys
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or not os.path.isdir(args[0]):
        sys.stderr.write("usage: python -m rkdet.onboard.program DIR (an existing folder)\n")
        return 2
    print(build(args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
