"""Issue 21 §4: rkdet-selfcheck runs on a board before a service starts; its bundle is untrusted text.
The board side cannot import rkdet/textsafe.py, so rkdet/onboard/bounded.py carries a copy of `visible`: both agree."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rkdet import textsafe
from rkdet.onboard import bounded as runner  # the board side's copy of `visible`
from rkdet.onboard import selfcheck

HOSTILE = "rk3588\x1b[2J\x1b]0;owned\x07\u202e"


def test_board_and_host_sanitisers_agree_on_every_control_and_bidi_char() -> None:
    chars = [chr(c) for c in range(0x00, 0x2070)] + ["\u2066", "\u2069", "\U0001f600"]
    for ch in chars:
        assert runner.visible(ch) == textsafe.visible(ch), repr(ch)
    assert runner.visible(HOSTILE) == textsafe.visible(HOSTILE)
    assert "\x1b" not in runner.visible(HOSTILE) and "\u202e" not in runner.visible(HOSTILE)


@settings(max_examples=200, deadline=None, database=None)
@given(st.text())
def test_sanitisers_agree_on_any_text(text: str) -> None:
    assert runner.visible(text) == textsafe.visible(text)


def _bundle(default_build: Path, tmp_path: Path, **changes: object) -> Path:
    doc = json.loads((default_build / "selfcheck.json").read_text())
    doc.update(changes)
    path = tmp_path / "selfcheck.json"
    path.write_text(json.dumps(doc))
    return path


def _main(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str]:
    code = selfcheck.main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_platform_is_printed_literally_on_the_identical_line(default_build: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    bundle = _bundle(default_build, tmp_path, platform=HOSTILE)
    code, text = _main(capsys, str(bundle), "--model", str(default_build / "model.onnx"), "--backend", "onnxruntime")
    assert code == 0, text
    assert "IDENTICAL" in text and "rk3588\\x1b[2J\\x1b]0;owned\\x07\\u202e" in text
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text and text.count("\n") == 1


def test_platform_is_printed_literally_on_the_wrong_model_line(default_build: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    bundle = _bundle(default_build, tmp_path, platform=HOSTILE)
    code, text = _main(capsys, str(bundle), "--model", str(default_build / "model.rknn"), "--backend", "onnxruntime")
    assert code == 3 and "wrong model" in text, text
    assert "\x1b" not in text and "\x07" not in text and "\\x1b[2J" in text


def test_a_deep_bundle_is_a_bad_bundle_exit_2(default_build: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    bundle = tmp_path / "deep.json"
    bundle.write_text("[" * 100_000 + "]" * 100_000)
    code, text = _main(capsys, str(bundle), "--model", str(default_build / "model.onnx"), "--backend", "onnxruntime")
    assert code == 2, text  # was 3, "runtime problem"
    assert str(bundle) in text and "nested deeper than 64" in text and text.count("\n") == 1


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_fifo_or_device_bundle_is_refused(default_build: Path, tmp_path: Path, kind: str,
                                            capsys: pytest.CaptureFixture) -> None:
    bundle = tmp_path / "selfcheck.json"
    if kind == "fifo":
        os.mkfifo(bundle)  # opened O_NONBLOCK, refused by fstat: it never blocks
    else:
        bundle.symlink_to("/dev/zero")
    code, text = _main(capsys, str(bundle), "--model", str(default_build / "model.onnx"), "--backend", "onnxruntime")
    assert code == 2, text
    assert str(bundle) in text and "not a regular file" in text
