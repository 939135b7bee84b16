"""The flags board-facing commands share, declared once: `rkdet deploy`, `rkdet board`, `rkdet layers
--board` and `rkdet fleet deploy` take them from here.

Why one table: each flag's name, type and default is written once (`option(name)`); a command that
says it differently (fleet deploy's "for boards the source gives none") changes only its help, so the
parsed values always fit `ConnectionOptions`, `RunOverrides` and `DeployRequest.from_options`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click

from rkdet.choices import BACKENDS, CORE_MASKS
from rkdet.config import DEFAULT_CONFIG, RESOLVED_CONFIG

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def _core_masks(ctx: Any, param: Any, value: str | None) -> str | None:
    """--core-mask: one mask or a comma list of distinct masks (config.check_core_masks), else exit 2."""
    from rkdet.config import check_core_masks

    if value is None:
        return None
    try:
        return check_core_masks(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _backend_pair(ctx: Any, param: Any, value: str | None) -> tuple[str, str] | None:
    """--backends A,B: two distinct backends of the registry, else exit 2."""
    if value is None:
        return None
    names = tuple(v.strip() for v in value.split(","))
    unknown = [n for n in names if n not in BACKENDS]
    if len(names) != 2 or names[0] == names[1] or unknown:
        raise click.BadParameter(f"{value!r}: expected two distinct backends A,B of {', '.join(BACKENDS)}")
    return names[0], names[1]


# name -> (parameter declarations, click.option keyword arguments)
_OPTIONS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    # -- connection (ConnectionOptions; --sudo is RunOverrides.sudo) --
    "board": (("--board",), dict(required=True, help="HOST[:PORT] or a Host alias from ~/.ssh/config.")),
    "user": (("--user",), dict(default=None, help="Login user (default: ssh_config, else yours).")),
    "port": (("--port",), dict(type=int, default=None, help="SSH port (default: ssh_config, else 22).")),
    "identity": (("--identity", "identity"), dict(
        type=click.Path(path_type=Path), default=None,
        help="Private key file (default: ssh_config IdentityFile, agent, ~/.ssh/id_*).")),
    "known_hosts": (("--known-hosts",), dict(
        type=click.Path(path_type=Path), default=None,
        help="rkdet's known_hosts (default ~/.config/rkdet/known_hosts; ~/.ssh/known_hosts is read too).")),
    "ssh_config": (("--ssh-config",), dict(type=click.Path(path_type=Path), default=None,
                                           help="ssh_config file (default ~/.ssh/config).")),
    "accept_new_host_key": (("--accept-new-host-key",), dict(
        is_flag=True, help="Trust an unknown host key on first use and record it (never a changed one).")),
    "sudo": (("--sudo",), dict(is_flag=True, default=None,
                               help="Run board-side work with `sudo -n` (non-root login).")),
    "connect_timeout": (("--connect-timeout",), dict(
        type=click.FloatRange(min=0.1), default=10.0, show_default=True,
        help="Seconds allowed for each of TCP connect, SSH banner and authentication.")),
    "sftp_timeout": (("--sftp-timeout",), dict(
        type=click.FloatRange(min=0.1), default=30.0, show_default=True,
        help="Seconds allowed for each answer of the board's SFTP server (a stalled board fails).")),
    # -- deploy (DeployRequest, RunOverrides) --
    "config_path": (("--config", "config_path"), dict(
        type=click.Path(path_type=Path), default=None,
        help="Config whose run/board/tolerances sections apply (default: the build's own "
             f"{RESOLVED_CONFIG}; without --build, {DEFAULT_CONFIG}).")),
    "build": (("--build",), dict(
        type=click.Path(path_type=Path), default=None,
        help="Build folder from rkdet convert (default build/<name>-<first platform> of the config).")),
    "repeats": (("--repeats",), dict(type=click.IntRange(min=1), default=None,
                                     help="Runs over the golden inputs (config run.repeats).")),
    "warmup": (("--warmup",), dict(type=click.IntRange(min=0), default=None,
                                   help="Unrecorded warm-up passes (config run.warmup).")),
    "core_mask": (("--core-mask",), dict(
        default=None, metavar="M[,M…]", callback=_core_masks,
        help=f"NPU cores (config run.core_mask): one of {', '.join(CORE_MASKS)}, or a comma list "
             "(0,1,2,0_1_2): each mask a cell of one pinned session; masks the SoC lacks are skipped.")),
    "contexts": (("--contexts",), dict(
        type=click.IntRange(min=1, max=16), default=None,
        help="Also run N runtime contexts in threads on the same inputs and check they agree with "
             "the sequential run (config run.contexts).")),
    "backend": (("--backend",), dict(
        type=click.Choice(BACKENDS), default=None,
        help="Board runtime (config run.backend); onnxruntime runs the prepared ONNX on the board CPU.")),
    "backends": (("--backends",), dict(
        default=None, metavar="A,B", callback=_backend_pair,
        help="Run the build through both backends on the same board in ONE pinned session (both preflighted "
             "before any push, pinned once, A then B, restored once), and say whether B's outputs equal A's "
             "bitwise, else which output and setting differ "
             "(e.g. rknnlite,rknn_c: what was proven against what ships; docs/RUNNER_C.md).")),
    "runner_setting": (("--runner-setting",), dict(
        multiple=True, metavar="KEY=VALUE",
        help="A runtime setting of the backend's runner, as your application chooses it (repeatable; rknn_c: "
             "want_float=1|0, pass_through=0|1, input_fmt=model|nchw|nhwc; docs/RUNNER_C.md).")),
    "out": (("--out",), dict(
        type=click.Path(path_type=Path), default=Path("results"), show_default=True,
        help="Results root: <out>/<board>/<fingerprint>/<run-id>/ (runs are recorded in <out>/rkdet.db).")),
    "workdir": (("--workdir",), dict(default=None,
                                     help="Remote work dir (default ~/.cache/rkdet or /tmp/rkdet-<user>).")),
    "state_dir": (("--state-dir",), dict(
        default=None, help="Remote pin state dir (default /run/rkdet as root, else <workdir>/state).")),
    "no_pin": (("--no-pin",), dict(is_flag=True, help="Run without pinning clocks (results say so).")),
    "keep": (("--keep",), dict(is_flag=True, help="Keep the run folder on the board after pulling it.")),
    "resume": (("--resume",), dict(is_flag=True, help="Re-attach to this board's unfinished run and pull it.")),
    "install_selfcheck": (("--install-selfcheck",), dict(
        is_flag=True,
        help="After a passing deploy, install the build's self-check in <workdir>/selfcheck on the board, "
             "run it once and print the command for a unit's ExecStartPre= (docs/SELFCHECK.md).")),
    "allow_failed_build": (("--allow-failed-build",), dict(
        is_flag=True,
        help="Run a build that failed a gate at convert (e.g. a --keep-failed <name>.failed folder); "
             "refused otherwise (exit 2). Every verdict then says the build failed its gates.")),
    "timeout": (("--timeout",), dict(type=float, default=3600.0, show_default=True,
                                     help="Seconds to wait for the run.")),
    "lock_timeout": (("--lock-timeout",), dict(
        type=click.IntRange(min=0, max=99999), default=0, show_default=True,
        help="Seconds to wait while another pinned job holds the board (one board, one holder); "
             "0 refuses at once (exit 3, naming the holder).")),
    "emulator_fault": (("--emulator-fault",), dict(
        default=None, metavar="JSON",
        help="TEST CONTROL (emulated board only): flip one bit, e.g. "
             '\'{"occurrence": 5, "input_sha256": null, "output": "cls0", "index": 123, "bit": 0}\'.')),
    "emulator_npu": (("--emulator-npu", "emulator_npu"), dict(
        type=click.IntRange(min=0), default=None, metavar="K",
        help="TEST CONTROL (emulated board only): emulate an NPU: answer with the build's simulator outputs, "
             "K elements one LSB off (0: exactly); run.json then says emulates_npu.")),
    "inputs": (("--inputs",), dict(
        type=click.Path(path_type=Path), default=None, metavar="FOLDER",
        help="Run these <name>.npy tensors (the build's fed input: dtype and shape checked) instead of the build's "
             "golden inputs, e.g. `rkdet accuracy --save-inputs` of a labelled set; there is no reference for them, "
             "so only the repeatable verdict is judged (docs/ACCURACY.md).")),
    "as_json": (("--json", "as_json"), dict(is_flag=True, help="Print the deploy record as JSON on stdout.")),
}

CONNECTION = ("board", "user", "port", "identity", "known_hosts", "ssh_config", "accept_new_host_key", "sudo",
              "connect_timeout", "sftp_timeout")
DEPLOY = ("config_path", "build", "repeats", "warmup", "core_mask", "contexts", "backend", "backends", "runner_setting", "out", "workdir",
          "state_dir", "no_pin", "keep", "resume", "install_selfcheck", "allow_failed_build", "timeout",
          "lock_timeout", "emulator_fault", "emulator_npu", "inputs", "as_json")


def option(name: str, decls: tuple[str, ...] | None = None, **changes: Any) -> Decorator:
    """The one declaration of flag `name` (by its parameter name); `changes` (e.g. a command's own help)
    and `decls` (another destination) override it for one command."""
    own, kwargs = _OPTIONS[name]
    return click.option(*(decls or own), **{**kwargs, **changes})


def options(*names: str) -> Decorator:
    """Flags `names`, in this order in --help."""
    def apply(func: Callable[..., Any]) -> Callable[..., Any]:
        for name in reversed(names):
            func = option(name)(func)
        return func
    return apply


def connection_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The SSH flags every board-facing command takes."""
    return options(*CONNECTION)(func)


def deploy_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The flags of `rkdet deploy` (the command itself is rkdet/cli/deploy.py, which also records the run)."""
    return options(*DEPLOY)(func)
