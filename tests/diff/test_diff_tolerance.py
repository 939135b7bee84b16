"""One tolerance (issue 10): config, `rkdet diff --config`, --tolerance and deploy read the same typed value
with the same rules; a YAML alias bomb under `tolerances` is one line, exit 2, in seconds (issue 9 item 3)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from diff_helpers import repeated_set

from rkdet.config import load_config, load_tolerances
from rkdet.errors import ConfigError, InputError
from rkdet.tolerance import Tolerance
from bounds import ended_within

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, tolerances: str) -> Path:
    text = (ROOT / "configs" / "yolov8.yaml").read_text()
    head, _, tail = text.partition("tolerances:")
    rest = tail.split("\n\n", 1)[1] if "\n\n" in tail else ""
    path = tmp_path / "cfg.yaml"
    path.write_text(f"{head}tolerances:\n{tolerances}\n\n{rest}")
    return path


def _cli(*args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "rkdet.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)


def test_one_definition() -> None:
    from rkdet.config import RkdetConfig

    import rkdet.diff

    assert not hasattr(rkdet.diff, "tolerance")  # no second name for it (the shim is gone)
    assert RkdetConfig.model_fields["tolerances"].annotation is Tolerance


@pytest.mark.parametrize("line,key", [("  max_abs: .inf", "max_abs"), ("  max_ulp: true", "max_ulp"),
                                      ("  max_ulp: 1.5", "max_ulp"), ("  min_cosine: 2", "min_cosine"),
                                      ("  max_ulps: 1", "max_ulps")])
def test_bad_tolerance_is_refused_the_same_way_everywhere(tmp_path: Path, line: str, key: str) -> None:
    cfg = _config(tmp_path, line)
    with pytest.raises(ConfigError) as full:
        load_config(cfg)
    with pytest.raises(ConfigError) as section:
        load_tolerances(cfg)
    assert str(full.value) == str(section.value)
    assert f"tolerances.{key}" in str(full.value) and str(cfg) in str(full.value) and "\n" not in str(full.value)
    raw = line.split(":", 1)[1].strip()
    value = {".inf": float("inf"), "true": True}.get(raw, raw)
    with pytest.raises(InputError):
        Tolerance.from_mapping({key: value})  # what deploy's record would hold


def test_good_tolerance_reads_the_same_everywhere(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "  max_abs: 1e-3\n  max_ulp: 2\n  min_cosine: 0.999")
    t = load_config(cfg).tolerances
    assert t == load_tolerances(cfg) == Tolerance.from_mapping(t.model_dump())
    assert (t.max_abs, t.max_ulp, t.min_cosine, t.max_rel_l2) == (1e-3, 2, 0.999, None)


def test_diff_config_bad_tolerance_is_one_line_exit_2(tmp_path: Path) -> None:
    s = repeated_set(tmp_path / "s", {"p": [np.arange(4, dtype=np.float32)]}, 2, ["out"]).close()
    cfg = tmp_path / "t.yaml"
    cfg.write_text("tolerances:\n  max_ulp: true\n")
    proc = _cli("diff", str(s), "--config", str(cfg))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "tolerances.max_ulp" in proc.stderr and str(cfg) in proc.stderr


def test_yaml_alias_bomb_under_tolerances_is_exit_2_in_seconds(tmp_path: Path) -> None:
    s = repeated_set(tmp_path / "s", {"p": [np.arange(4, dtype=np.float32)]}, 2, ["out"]).close()
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    lines.append("tolerances:\n  max_abs: *a9\n  max_ulp: *a9")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    t = time.monotonic()
    proc = _cli("diff", str(s), "--config", str(bomb), timeout=60)
    assert ended_within(t)
    assert proc.returncode == 2, proc.stderr
    lines_out = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines_out) == 1 and "tolerances.max_abs" in lines_out[0] and len(lines_out[0]) < 400


def test_deploy_refuses_a_bad_tolerance_before_connecting(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "  max_ulp: true")
    t = time.monotonic()
    # port 9 on 127.0.0.1: nothing listens; a deploy that got as far as connecting would exit 3
    proc = _cli("deploy", "--board", "127.0.0.1", "--port", "9", "--config", str(cfg), "--build",
                str(tmp_path / "nobuild"), cwd=tmp_path)
    assert proc.returncode == 2 and "tolerances.max_ulp" in proc.stderr, proc.stderr
    assert ended_within(t)
