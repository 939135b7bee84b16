"""The on-board program's one entry: `python3 rkdet-onboard.pyz run|selfcheck ARGS` (or `python -m rkdet.onboard`).

Why one entry: a board gets one file under one name; the two commands users see, rkdet-run and
rkdet-selfcheck, are its subcommands (and the wheel's console scripts of the same names).
"""

import sys
from typing import List, Optional, Sequence

COMMANDS = ("run", "selfcheck")
USAGE = "usage: rkdet-onboard.pyz run|selfcheck ARGS (rkdet-run, rkdet-selfcheck; --help after either)\n"


def main(argv=None):
    # type: (Optional[Sequence[str]]) -> int
    """Dispatch to rkdet-run or rkdet-selfcheck; exit 2 with one usage line otherwise."""
    args = list(sys.argv[1:] if argv is None else argv)  # type: List[str]
    if not args or args[0] not in COMMANDS:
        sys.stderr.write(USAGE)
        return 2
    if args[0] == "run":
        from . import run as command
    else:
        from . import selfcheck as command  # type: ignore[no-redef]
    return command.main(args[1:])


if __name__ == "__main__":
    sys.exit(main())
