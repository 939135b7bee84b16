"""Error types that carry their exit code and a one-line message.

The CLI catches `RkdetError` and prints `rkdet: <message>` with no traceback, then exits with
`exit_code`. Exit codes are part of the interface (documented in the README):

    0  ok / same / deterministic and within tolerance
    1  difference found (a verdict, not an error: raised only by diff/deploy paths as DifferenceFound;
       `rkdet accuracy`: a row below the --require line of FP32 accuracy)
    2  bad input, usage or config error; unreadable data ("trouble", as diffoscope)
    3  board or connection problem
    4  conversion failed (`rkdet convert --search`: no variant passes every gate)
  130  interrupted (Ctrl-C)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_BAD_INPUT = 2
EXIT_BOARD = 3
EXIT_CONVERSION = 4
EXIT_INTERRUPTED = 130


class RkdetError(Exception):
    """Base error: `str(err)` is the one-line message shown to the user."""

    exit_code: int = EXIT_BAD_INPUT

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(" ".join(message.split()) if "\n" in message else message)
        if exit_code is not None:
            self.exit_code = exit_code


class InputError(RkdetError):
    """A file, flag or value given by the user is wrong (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(InputError):
    """The YAML config is invalid; the message names file and key (exit 2)."""


class ConversionError(RkdetError):
    """The toolkit failed, or the result failed a fidelity gate (exit 4)."""

    exit_code = EXIT_CONVERSION
    warnings: tuple[str, ...] = ()  # the build's warnings up to the failure: printed as a passing build's are


class FidelityGateError(ConversionError):
    """A build failed a fidelity gate (exit 4): `rkdet layers` can say which layer lost it.

    `gate` and `subject` name the failing gate (kind, e.g. "cosine", and output) for the build's gate
    record (rkdet.records.gates); `details` are lines shown before the error (the whole fidelity line)."""

    def __init__(self, message: str, *, gate: str | None = None, subject: str | None = None,
                 details: tuple[str, ...] = (), exit_code: int | None = None) -> None:
        super().__init__(message, exit_code=exit_code)
        self.gate, self.subject, self.details = gate, subject, tuple(details)


class BoardError(RkdetError):
    """The board or the connection to it failed (exit 3)."""

    exit_code = EXIT_BOARD
