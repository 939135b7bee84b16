"""The toolkit-upgrade reports' file names (issue 36): built from versions, platform and a fixed ending, so a
version ending in `.0` keeps it, and two platforms or two close versions never share a file."""

from __future__ import annotations

import re
from pathlib import Path

from rkdet.buildcompare.names import diff_page_path, upgrade_report_names

DOC = Path(__file__).resolve().parents[2] / "docs" / "UPGRADE.md"


def _all(names) -> list[Path]:  # type: ignore[no-untyped-def]
    return [names.json, names.html, *names.pages.values()]


def test_a_version_ending_in_0_keeps_it_and_the_platform_is_named(tmp_path: Path) -> None:
    n = upgrade_report_names(tmp_path, "2.3.2", "2.5.0", "rk3588")
    assert n.json == tmp_path / "compare-2.3.2-vs-2.5.0-rk3588.json"
    assert n.html == tmp_path / "compare-2.3.2-vs-2.5.0-rk3588.html"
    assert n.pages == {"simulator": tmp_path / "compare-2.3.2-vs-2.5.0-rk3588-simulator.html",
                       "onnx-fp32": tmp_path / "compare-2.3.2-vs-2.5.0-rk3588-onnx-fp32.html"}
    z = upgrade_report_names(tmp_path, "2.0.0", "3.0", "rv1126")
    assert z.json.name == "compare-2.0.0-vs-3.0-rv1126.json"
    assert all(p.parent == tmp_path for p in _all(n) + _all(z))


def test_two_platforms_and_close_versions_never_share_a_file(tmp_path: Path) -> None:
    sets = [upgrade_report_names(tmp_path, a, b, p) for a, b in (("2.3.2", "2.5.0"), ("2.3.2", "2.5.1"),
                                                                  ("2.5.0", "2.5.1"))
            for p in ("rk3588", "rk3568")]
    files = [f for s in sets for f in _all(s)]
    assert len(files) == len(set(files)) == 6 * 4


def test_the_diff_page_beside_a_page_keeps_every_dot_of_its_name(tmp_path: Path) -> None:
    assert diff_page_path(tmp_path / "cmp.html", "simulator") == tmp_path / "cmp-simulator.html"
    assert diff_page_path(tmp_path / "cmp-2.5.0", "simulator") == tmp_path / "cmp-2.5.0-simulator.html"
    assert diff_page_path(tmp_path / "cmp-2.5.0.HTM", "onnx-fp32") == tmp_path / "cmp-2.5.0-onnx-fp32.html"
    n = upgrade_report_names(tmp_path, "2.3.2", "2.5.0", "rk3588")
    assert {k: diff_page_path(n.html, k) for k in n.pages} == n.pages


def test_docs_upgrade_promises_these_names() -> None:
    text = DOC.read_text()
    promised = set(re.findall(r"compare-2\.3\.2-vs-2\.5\.0-<platform>[-a-z0-9.]*", text))
    n = upgrade_report_names(Path("."), "2.3.2", "2.5.0", "<platform>")
    assert promised and promised <= {p.name for p in _all(n)}, promised
