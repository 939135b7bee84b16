"""`rkdet audit pull | verify | report`: the serving audit log of a board (docs/AUDIT.md).

pull copies the board's audit folder with the link's bounded, hash-checked pull (through rkdet.deploy.pulled);
verify checks the chain, the builds and the canaries (exit 0 intact, 1 a finding, 2 not a log);
report writes the same verification with control charts as one HTML file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rkdet.cli.options import CONNECTION, option, options
from rkdet.errors import EXIT_DIFFERENT, InputError
from rkdet.textsafe import visible

if TYPE_CHECKING:
    from rkdet.link.files import BoardLink
    from rkdet.link.transfer import TransferStats

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@click.group("audit")
def audit_group() -> None:
    """The serving audit log: evidence that a build kept its answers while it served."""


@audit_group.command("pull")
@option("board", required=False, help="HOST[:PORT] or a Host alias from ~/.ssh/config (or --inventory).")
@options(*(name for name in CONNECTION if name != "board"))
@click.option("--inventory", type=click.Path(path_type=Path), default=None,
              help="A fleet: an Ansible inventory (docs/FLEET.md); one folder per board under OUT.")
@click.option("--limit", default=None, help="Ansible host pattern selecting the inventory's boards.")
@click.option("--remote", required=True, help="The board's audit folder (the app's RKDET_AUDIT_DIR).")
@click.option("--out", "out", type=click.Path(path_type=Path), required=True,
              help="Local folder (with --inventory: OUT/<board>); replaced whole, atomically, once every file "
                   "matched the board's sha256.")
def audit_pull(remote: str, out: Path, inventory: Path | None, limit: str | None, **conn_opts: Any) -> None:
    """Copy a board's audit folder (bounded like every pull; nothing outside OUT is written).

    With --inventory: every selected board in turn, into OUT/<board>; a board that fails is one line
    and the others go on. Exit 0 every board pulled, 3 one or more failed, 2 a usage or inventory mistake.
    """
    from rkdet.link.connect import ConnectionOptions, open_connection

    if inventory is not None:
        _fleet_pull(remote, out, inventory, limit, ConnectionOptions.from_options(conn_opts))
        return
    if limit is not None:
        raise InputError("--limit selects from an inventory; use it with --inventory")
    if not conn_opts.get("board"):
        raise InputError("give the board: --board HOST[:PORT], or a fleet: --inventory FILE [--limit P]")
    with open_connection(ConnectionOptions.from_options(conn_opts)) as conn:
        stats = _pull_board(conn, remote, out)
    click.echo(f"pulled {stats.files_sent} files ({stats.files_skipped} unchanged) into {visible(str(out))}")


def _pull_board(conn: BoardLink, remote: str, out: Path) -> TransferStats:
    """One board's verified pull (the link's, through deploy's `pull_noted`); what it survived (an SFTP session
    that ended under it: the file fetched again over exec) said as a warning, as deploy says it."""
    from rkdet.cli.warn import say_warnings
    from rkdet.deploy.pulled import pull_noted
    from rkdet.log import log_console

    warnings: list[str] = []
    stats = pull_noted(conn, remote, out, warnings)
    say_warnings(log_console(), warnings)
    return stats


def _board_folder(name: str) -> str | None:
    """The board's folder name under OUT: its inventory name when that is one plain path component."""
    if name in ("", ".", "..") or "/" in name or "\\" in name or len(name.encode()) > 200 or not name.isprintable():
        return None
    return name


def _fleet_pull(remote: str, out: Path, inventory: Path, limit: str | None, common: Any) -> None:
    """Pull every selected board of the inventory, one after the other; one line per board that failed."""
    import os
    import stat

    from rkdet.cli.fleet import select_from_inventory
    from rkdet.errors import EXIT_BOARD, RkdetError
    from rkdet.link.connect import open_connection

    if common.board:
        raise InputError("give one board source: --board HOST[:PORT] or --inventory FILE [--limit P], not both")
    try:
        if not stat.S_ISDIR(os.lstat(out).st_mode):
            raise InputError(f"{visible(str(out))}: exists and is not a folder (a symlink or a file); give a folder "
                             "for the boards' folders")
    except FileNotFoundError:
        pass
    boards = select_from_inventory(inventory, limit, None)
    if not boards:
        raise InputError(f"{visible(str(inventory))}: no board selected{' by --limit ' + visible(limit) if limit else ''}")
    failed = 0
    for board in boards:
        folder = _board_folder(board.name)
        try:
            if folder is None:
                raise InputError("its inventory name is not a plain folder name (a slash, dot-dot, control "
                                 "character or over 200 bytes); rename the host in the inventory")
            conn_opts = common.for_board(board.address, user=board.user, port=board.port,
                                         identity=Path(board.key_file) if board.key_file else None,
                                         known_hosts=Path(board.known_hosts) if board.known_hosts else None,
                                         proxy_jump=board.proxy_jump)
            with open_connection(conn_opts) as conn:
                stats = _pull_board(conn, remote, out / folder)
        except (RkdetError, OSError) as err:
            failed += 1
            click.echo(f"board {visible(board.name)}: FAILED: {visible(str(err))}")
            continue
        click.echo(f"board {visible(board.name)}: pulled {stats.files_sent} files ({stats.files_skipped} unchanged) "
                   f"into {visible(str(out / folder))}")
    click.echo(f"pulled {len(boards) - failed} of {len(boards)} boards into {visible(str(out))}"
               f"{f'; {failed} failed' if failed else ''}")
    if failed:
        raise SystemExit(EXIT_BOARD)


def _known_builds(builds: tuple[Path, ...], fingerprints: tuple[str, ...]) -> set[str]:
    from rkdet.records.manifest import read_manifest

    known = set()
    for fp in fingerprints:
        if not _HEX64.match(fp):
            raise InputError(f"--fingerprint {visible(fp)}: not a build fingerprint (64 lowercase hex)")
        known.add(fp)
    for folder in builds:
        manifest = read_manifest(folder / "manifest.json")
        known.add(manifest.fingerprint)
        if manifest.embedded_fingerprint:
            known.add(manifest.embedded_fingerprint)
    if not known:
        raise InputError("no approved build: give --build FOLDER (a converted build) or --fingerprint HEX")
    return known


def _read_anchor(path: Path | None) -> str | None:
    if path is None or not path.exists():
        return None
    from rkdet.records.io import read_capped

    text = read_capped(path, 256).decode("ascii", "replace").strip()
    if not _HEX64.match(text):
        raise InputError(f"{visible(str(path))}: not an anchor (64 lowercase hex); delete it to start a new chain")
    return text


_VERIFY_OPTIONS = [
    click.argument("folder", type=click.Path(path_type=Path)),
    click.option("--build", "builds", type=click.Path(path_type=Path), multiple=True,
                 help="An approved build folder (its manifest's fingerprint); repeatable."),
    click.option("--fingerprint", "fingerprints", multiple=True, help="An approved build fingerprint; repeatable."),
    click.option("--anchor-file", type=click.Path(path_type=Path), default=None,
                 help="The last record's hash of the previous pull: the chain must continue from it; "
                      "rewritten with this pull's last hash when the log verifies."),
    click.option("--results", type=click.Path(path_type=Path, file_okay=False), default=None,
                 help="Record this verified pull in RESULTS/rkdet.db, so `rkdet history` shows serving beside "
                      "deploy runs (verifying the same pull twice records it once)."),
    click.option("--board-label", default=None,
                 help="The board's name in the history (default: the folder's name, as `pull --inventory` makes it)."),
]


def _with_verify_options(func: Any) -> Any:
    for decorate in reversed(_VERIFY_OPTIONS):
        func = decorate(func)
    return func


def _verified(folder: Path, builds: tuple[Path, ...], fingerprints: tuple[str, ...], anchor_file: Path | None,
              results: Path | None = None, board_label: str | None = None):
    from rkdet.audit.verify import verify

    known = _known_builds(builds, fingerprints)
    conn = None
    if results is not None:  # a refused database says so before the log is read, and nothing is recorded
        from rkdet.history.db import connect

        conn = connect(results)
    try:
        result = verify(folder, known, _read_anchor(anchor_file))
        if conn is not None:
            _record(conn, results, folder, board_label, result)
    finally:
        if conn is not None:
            conn.close()
    for f in result.findings:
        click.echo(f"{'FAIL' if f.failed else 'note'} {f.kind}: {f.where}: {f.message}")
    if result.not_shown:
        more = ", ".join(f"{k} {n}" for k, n in sorted(result.found.items()))
        click.echo(f"... and {result.not_shown} more findings not shown (per kind: {more})")
    if anchor_file is not None and not result.failed and result.last_hash:
        from rkdet.records.io import write_atomic

        write_atomic(str(anchor_file), result.last_hash + "\n")
    return result


def _record(conn: Any, results: Path | None, folder: Path, board_label: str | None, result: Any) -> None:
    """The verification as a history row (rkdet.history.serving): the CLI glues the two rooms."""
    import sqlite3
    import time

    from rkdet.audit.verify import CANARY_FAILED, CHAIN_KINDS, SHADOW_DISAGREED
    from rkdet.history.db import record_serving
    from rkdet.history.serving import ServingPull

    canaries = result.counts.get("canary", 0)
    failed_canaries = result.found.get(CANARY_FAILED, 0)
    pull = ServingPull(
        board=board_label or folder.resolve().name, folder=str(folder.resolve()),
        builds=tuple(sorted(b for b in result.builds if _HEX64.match(b))), records=result.records,
        first_seq=result.first_seq, last_seq=result.last_seq, canary_passed=max(canaries - failed_canaries, 0),
        canary_failed=failed_canaries, shadow_disagreements=result.found.get(SHADOW_DISAGREED, 0),
        chain="broken" if any(result.found.get(k) for k in CHAIN_KINDS) else "intact", failed=result.failed,
        findings=tuple(sorted(result.found.items())), last_hash=result.last_hash, verified_unix=time.time())
    try:
        fresh = record_serving(conn, pull)
    except sqlite3.OperationalError as err:  # locked past the busy timeout, disk full
        raise InputError(f"{visible(str(results))}/rkdet.db: {err} while recording the pull; rerun verify") from None
    click.echo(f"{'recorded' if fresh else 'already recorded'} in {visible(str(results))}/rkdet.db as serving of "
               f"board {visible(pull.board)}")


@audit_group.command("verify")
@_with_verify_options
def audit_verify(folder: Path, builds: tuple[Path, ...], fingerprints: tuple[str, ...], anchor_file: Path | None,
                 results: Path | None, board_label: str | None) -> None:
    """Chain intact, every build approved, every canary equal to its baseline? Exit 0 yes, 1 no, 2 not a log."""
    result = _verified(folder, builds, fingerprints, anchor_file, results, board_label)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.counts.items()))
    if result.failed:
        click.echo(f"audit log {visible(str(folder))}: FAILED ({sum(f.failed for f in result.findings)} findings; {counts})")
        raise SystemExit(EXIT_DIFFERENT)
    click.echo(f"audit log {visible(str(folder))}: chain intact, seq {result.first_seq}..{result.last_seq} ({counts})")


@audit_group.command("report")
@_with_verify_options
@click.option("--html", "html_path", type=click.Path(path_type=Path), required=True, help="The HTML report to write.")
def audit_report(folder: Path, builds: tuple[Path, ...], fingerprints: tuple[str, ...], anchor_file: Path | None,
                 results: Path | None, board_label: str | None, html_path: Path) -> None:
    """The verification and control charts (Western Electric rules) as one HTML file; exit as verify."""
    from rkdet.audit.chainlog import read_log
    from rkdet.audit.report import render_report
    from rkdet.records.io import check_may_write, write_atomic

    check_may_write(html_path, "--html")
    result = _verified(folder, builds, fingerprints, anchor_file, results, board_label)
    write_atomic(str(html_path), render_report(folder.name, result, read_log(folder)))
    click.echo(f"wrote {visible(str(html_path))}")
    if result.failed:
        raise SystemExit(EXIT_DIFFERENT)
