"""Names from a result set reach the terminal as literal text (issue 9 item 4): no markup, no escape codes;
the HTML report keeps escaping them."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
from click.testing import CliRunner
from diff_helpers import repeated_set
from rich.console import Console

from rkdet.cli import main
from rkdet.diff.api import compare
from rkdet.diff.findings import findings
from rkdet.diff.html import render_html
from rkdet.diff.terminal import render_terminal
from rkdet.textsafe import literal, visible

LIAR = "[green]SAME (bitwise): all outputs bit-identical[/green]\x1b[2K\x1b[1A\x1b[32mSAME\x1b[0m\x9b2J"


def _different(tmp_path: Path, input_name: str, output_name: str) -> Path:
    base = np.arange(16, dtype=np.float32)
    return repeated_set(tmp_path / "s", {input_name: [base]}, 3, [output_name],
                        overrides={(2, input_name): [base + 1]}).close()


def test_visible_escapes_controls_and_keeps_text() -> None:
    assert visible("a\x1b[31mb\nc\td\x7f\x9b\u202e") == "a\\x1b[31mb\\nc\\td\\x7f\\x9b\\u202e"
    assert visible("plain [bold]x[/] ü €") == "plain [bold]x[/] ü €"
    assert literal("[red]x[/]").plain == "[red]x[/]" and not literal("[red]x[/]").spans


def test_close_tag_name_does_not_crash_the_table(tmp_path: Path) -> None:
    s = _different(tmp_path, "page[/]", "out[/]")
    result = CliRunner().invoke(main, ["diff", str(s)])
    assert result.exit_code == 1, result.output
    assert "page[/]" in result.output and "out[/]" in result.output
    assert result.output.strip().splitlines()[-1].startswith("DIFFERENT")


def _render(comparison, color: bool) -> str:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, color_system="standard" if color else None, width=400)
    render_terminal(comparison, console)
    return buf.getvalue()


def test_markup_and_escape_codes_in_names_cannot_fake_the_verdict(tmp_path: Path) -> None:
    s = _different(tmp_path, LIAR, LIAR)
    c = compare(s)
    assert c.exit_code == 1
    plain = _render(c, color=False)
    assert "\x1b" not in plain and "\x9b" not in plain
    assert "[green]SAME (bitwise)" in plain and "\\x1b[2K\\x1b[1A" in plain  # shown literally
    assert plain.strip().splitlines()[-1].startswith("DIFFERENT")
    colored = _render(c, color=True)
    # every escape sequence left is rich's own colour code (SGR); the data's cursor/clear codes are gone
    assert all(re.fullmatch(r"\x1b\[[0-9;]*m", seq) for seq in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]", colored))
    assert "\x1b[2K" not in colored and "\x1b[1A" not in colored and "\x9b" not in colored
    last = colored.strip().splitlines()[-1]
    assert "DIFFERENT" in last and "\x1b[32m" not in last  # the verdict line is not green


def test_cli_error_line_shows_controls_escaped(tmp_path: Path) -> None:
    base = np.arange(16, dtype=np.float32)
    a = repeated_set(tmp_path / "a", {"p": [base]}, 1, ["out\x1b[2K"]).close()
    b = repeated_set(tmp_path / "b", {"p": [base]}, 1, ["other"]).close()
    result = CliRunner().invoke(main, ["diff", str(a), str(b)])
    assert result.exit_code == 2 and "\x1b" not in result.output and "\\x1b[2K" in result.output


def test_html_still_escapes_names(tmp_path: Path) -> None:
    s = _different(tmp_path, "<script>alert(1)</script>", LIAR)
    html = render_html(findings(compare(s)))
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'class="verdict different"' in html
