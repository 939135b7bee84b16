"""`rkdet compare-builds`: the comparison as one record, its JSON (schema rkdet.compare-builds/1) and an
offline HTML page in rkdet diff's style (its CSS; each reference kind's full diff report beside it,
written by rkdet diff's own presenter)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from rkdet.textsafe import html_text as escape  # the one sanitiser: controls and bidi made visible, then escaped
from pathlib import Path
from typing import Any

from rkdet.buildcompare.content import ContentDiff, compare_content
from rkdet.buildcompare.outputs import BuildFacts, OutputsComparison, compare_outputs
from rkdet.errors import EXIT_DIFFERENT, EXIT_OK

SCHEMA = "rkdet.compare-builds/1"


@dataclass
class BuildComparison:
    a: BuildFacts
    b: BuildFacts
    content: ContentDiff
    outputs: list[OutputsComparison]

    @property
    def same(self) -> bool:
        """Same model content and, where there are golden outputs, bit-identical outputs."""
        return self.content.fingerprint_identical and all(o.bitwise_identical for o in self.outputs if o.applicable)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.same else EXIT_DIFFERENT

    def decisions_changed(self) -> int | None:
        """Decisions changed over the outputs a decoder judged; None where none was judged (unknown, not 0)."""
        counts = [o.comparison.agrees.decisions_changed for o in self.outputs
                  if o.applicable and o.comparison is not None and o.comparison.agrees is not None]
        judged = [c for c in counts if c is not None]
        return sum(judged) if judged else None

    def verdict(self) -> str:
        if self.same:
            return "SAME: identical model content and bit-identical outputs"
        changed = self.decisions_changed()
        tail = "" if changed is None else f"; decisions changed: {changed}"
        outs = "; ".join(o.line() for o in self.outputs)
        return f"DIFFERENT: {self.content.summary()}; {outs}{tail}"

    def lines(self) -> list[str]:
        tk = f"A rknn-toolkit2 {self.content.a.toolkit_version}, B rknn-toolkit2 {self.content.b.toolkit_version}"
        return [tk, f"content: {self.content.summary()}"] + [o.line() for o in self.outputs] + [self.verdict()]

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "a": str(self.a.folder), "b": str(self.b.folder), "same": self.same,
                "exit_code": self.exit_code, "verdict": self.verdict(), "content": self.content.to_json(),
                "outputs": [o.to_json() for o in self.outputs], "decisions_changed": self.decisions_changed()}


def compare_builds(a: Path, b: Path, decoder: str = "auto") -> BuildComparison:
    fa, fb = BuildFacts.load(a), BuildFacts.load(b)
    for f in (fa, fb):
        if not (f.folder / "model.rknn").is_file():
            from rkdet.errors import InputError

            raise InputError(f"{f.folder}: model.rknn missing; the build folder is incomplete")
    content = compare_content(a / "model.rknn", b / "model.rknn")  # unreadable: one line, exit 2
    return BuildComparison(fa, fb, content, compare_outputs(fa, fb, decoder))


def json_text(c: BuildComparison) -> str:
    from rkdet.diff.report import _finite, _json_default

    return json.dumps(_finite(c.to_json()), indent=2, sort_keys=True, allow_nan=False, default=_json_default) + "\n"


def render_html(c: BuildComparison, diff_pages: dict[str, str]) -> str:
    from rkdet.diff.html import _CSS

    rows = "".join(f"<tr><td>{escape(ch.category)}</td><td><code>{escape(ch.name)}</code></td><td>{escape(ch.detail)}</td></tr>"
                   for ch in c.content.changes) or '<tr><td colspan=3 class="ok">no change</td></tr>'
    outs = "".join(f"<li>{escape(o.line())}" + (f' — <a href="{escape(diff_pages[o.kind])}">full diff report</a>'
                                                 if o.kind in diff_pages else "") + "</li>" for o in c.outputs)
    klass = "same" if c.same else "different"
    return (f"<!doctype html><html><head><meta charset=utf-8><title>rkdet compare-builds</title><style>{_CSS}</style>"
            f"</head><body><div class=\"verdict {klass}\">{escape(c.verdict())}</div>"
            f"<p>A <code>{escape(str(c.a.folder))}</code> (rknn-toolkit2 {escape(c.content.a.toolkit_version)}) · "
            f"B <code>{escape(str(c.b.folder))}</code> (rknn-toolkit2 {escape(c.content.b.toolkit_version)})</p>"
            f"<h2>Model content</h2><p>{escape(c.content.summary())}; {c.content.volatile_differing} volatile range(s) "
            f"differ as they do between identical builds (left out)</p><table><tr><th>what</th><th>where</th>"
            f"<th>change</th></tr>{rows}</table><h2>Outputs on the same golden inputs</h2><ul>{outs}</ul></body></html>\n")


def write_html(c: BuildComparison, path: Path) -> Path:
    from rkdet.buildcompare.names import diff_page_path
    from rkdet.diff.report import write_html as write_diff_html, write_report_file

    pages = {}
    for o in c.outputs:
        if o.comparison is not None:
            page = diff_page_path(path, o.kind)
            write_diff_html(o.comparison, page)
            pages[o.kind] = page.name
    return write_report_file(path, render_html(c, pages))
