"""The compatibility table's rows from issue 23: two issue-thread rows (warn) and the measured load rows, each
with its source; a measured row names the rkdet command that reproduces it (and the command exists)."""

from __future__ import annotations

import click
from click.testing import CliRunner

from rkdet.boardinfo.compat import KNOWN, MEASURED_LOADS, StackFacts, check
from rkdet.cli import main


def _facts(model: tuple[int, int, int], runtime: tuple[int, int, int]) -> StackFacts:
    return StackFacts("rk3588", "/usr/lib/librknnrt.so", runtime, (0, 9, 8), 6, model)


def _keys(facts: StackFacts) -> list[str]:
    return [f.row.key for f in check(facts)]


def test_a_2_3_0_model_on_librknnrt_2_3_2_warns_with_its_source() -> None:
    [finding] = [f for f in check(_facts((2, 3, 0), (2, 3, 2))) if f.row.key == "toolkit-2.3.0-model-on-librknnrt-2.3.2"]
    assert finding.decided and finding.row.severity == "warn" and "jaylfc/taOS#42" in finding.message
    assert "toolkit-2.3.0-model-on-librknnrt-2.3.2" not in _keys(_facts((2, 3, 2), (2, 3, 2)))
    assert "toolkit-2.3.0-model-on-librknnrt-2.3.2" not in _keys(_facts((2, 3, 0), (2, 3, 0)))


def test_a_model_newer_than_the_runtime_warns() -> None:
    assert "model-toolkit-newer-than-librknnrt" in _keys(_facts((2, 3, 2), (2, 3, 0)))
    assert "model-toolkit-newer-than-librknnrt" not in _keys(_facts((2, 3, 2), (2, 5, 0)))
    unknown = check(StackFacts("rk3588", "/usr/lib/librknnrt.so", None, (0, 9, 8), 6, (2, 5, 0)))
    row = next(f for f in unknown if f.row.key == "model-toolkit-newer-than-librknnrt")
    assert not row.decided and "unknown" in row.message  # an unknown version warns, never blocks


def test_measured_rows_name_their_source_and_a_real_command() -> None:
    assert {(m.model_toolkit, m.runtime) for m in MEASURED_LOADS} == {
        (a, f"rknn-toolkit2 {b} load_rknn (x86_64 host)") for a in ("2.3.2", "2.5.0") for b in ("2.3.2", "2.5.0")}
    commands = set(main.list_commands(click.Context(main)))  # the commands a measured row names are registered
    for m in MEASURED_LOADS:
        assert m.source.startswith("measured here") and m.loads
        assert "rkdet import-rknn" in m.command and f"--toolkit {m.model_toolkit}" in m.command
        assert {"convert", "import-rknn"} <= commands
    assert all(row.source for row in KNOWN)
    assert CliRunner().invoke(main, ["import-rknn", "--help"]).exit_code == 0
