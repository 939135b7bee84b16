"""How the on-board program ends: its exit codes, the one-line error that carries one, a stop signal.

Why a module of its own: identity, inputs, backends and the run all stop with a `RunnerError` naming
its exit code (the same meanings as the rkdet CLI), and the CLIs print it as one line, no traceback.
SIGTERM/SIGINT only set STOP; the loops call check_stop() between inferences.
"""

from typing import List

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_BAD_INPUT = 2
EXIT_BOARD = 3
EXIT_MODEL_REFUSED = 5
EXIT_INTERRUPTED = 130


class RunnerError(Exception):
    """A failure with a one-line message and the exit code it maps to (no traceback shown)."""

    def __init__(self, message, exit_code=EXIT_BAD_INPUT):
        # type: (str, int) -> None
        Exception.__init__(self, " ".join(str(message).split()))
        self.exit_code = exit_code


class Interrupted(BaseException):
    """Raised from the SIGTERM handler so the run is closed like a Ctrl-C (a BaseException, like
    KeyboardInterrupt, so no `except Exception` around a runtime call swallows it)."""


STOP = []  # type: List[int]


def on_stop_signal(signum, frame):
    """Only note the signal: raising here could leave a lock held mid-`with` (and hang the close);
    the loop checks `STOP` between inferences, so a run stops cleanly within one inference."""
    STOP.append(signum)


def check_stop():
    # type: () -> None
    if STOP:
        raise Interrupted("stopped by signal %d" % STOP[0])

