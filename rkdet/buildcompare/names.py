"""File names of the toolkit-upgrade reports (`rkdet convert --toolkit A,B`), built from their parts.

Why its own function: a version string ends in `.0` or `.1`, so `Path.with_suffix` on a name containing
one eats the last part (`compare-2.3.2-vs-2.5.0-rk3588` + `.json` became `compare-2.3.2-vs-2.5.json`) and
two platforms or `2.5.0` vs `2.5.1` overwrote each other's reports. Every name here is joined from the
versions, the platform and a fixed ending; nothing is cut from a string that may contain a dot.
docs/UPGRADE.md promises these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rkdet.buildcompare.outputs import KINDS

_HTML_ENDINGS = (".html", ".htm")


@dataclass(frozen=True)
class UpgradeReportNames:
    """The comparison of toolkit `a` with `b` for one platform: its JSON, its HTML page and the diff page
    per golden set beside it."""

    json: Path
    html: Path
    pages: dict[str, Path]


def upgrade_stem(a: str, b: str, platform: str) -> str:
    """`compare-<a>-vs-<b>-<platform>`: the part every report of this comparison starts with."""
    return f"compare-{a}-vs-{b}-{platform}"


def upgrade_report_names(out: Path, a: str, b: str, platform: str) -> UpgradeReportNames:
    """The report files `rkdet convert --toolkit a,b --out out` writes for `platform`."""
    stem = upgrade_stem(a, b, platform)
    return UpgradeReportNames(json=out / f"{stem}.json", html=out / f"{stem}.html",
                              pages={kind: out / f"{stem}-{kind}.html" for kind in KINDS})


def diff_page_path(html: Path, kind: str) -> Path:
    """The diff page of golden set `kind` beside the comparison page `html`: `<name>-<kind>.html`, where
    `<name>` is `html`'s name less a trailing `.html`/`.htm` only (a name like `cmp-2.5.0` keeps its `.0`)."""
    name = html.name
    for ending in _HTML_ENDINGS:
        if name.lower().endswith(ending) and len(name) > len(ending):
            name = name[: -len(ending)]
            break
    return html.with_name(f"{name}-{kind}.html")
