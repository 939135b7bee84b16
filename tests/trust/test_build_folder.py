"""Issue 21 §1, §3, §5 (host): a build folder is input. Its identifiers become paths, its manifest is
read through the one bounded reader, its .rknn is checked against the manifest before any push."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rkdet.records.build import BuildInfo
from rkdet.deploy.layout import RemoteLayout
from rkdet.deploy.stage import check_model
from rkdet.errors import InputError
from rkdet.onboard.hashing import file_sha256
from trust_helpers import GOOD_FP, fake_build, manifest, one_line, rkdet, tree

CRAFTED = ["/var/tmp/x/" + "0" * 48, "../../../escaped" + "0" * 48, "AB" * 32, "ab" * 31, 12, None, "ab" * 32 + "\n"]


@pytest.mark.parametrize("fingerprint", CRAFTED, ids=range(len(CRAFTED)))
def test_crafted_fingerprint_is_refused_where_the_manifest_is_read(tmp_path: Path, fingerprint: object) -> None:
    build = fake_build(tmp_path / "b", manifest(fingerprint=fingerprint))
    with pytest.raises(InputError) as err:
        BuildInfo.load(build)
    assert str(build / "manifest.json") in str(err.value) and "fingerprint" in str(err.value)
    assert "64 lowercase hex" in str(err.value)


@pytest.mark.parametrize("field", ["embedded_fingerprint", "rknn.sha256", "inputs.onnx_prepared.sha256"])
def test_every_identifier_of_the_manifest_is_checked(tmp_path: Path, field: str) -> None:
    doc = manifest()
    bad = "../" + "0" * 61
    if field == "embedded_fingerprint":
        doc["embedded_fingerprint"] = bad
    elif field == "rknn.sha256":
        doc["rknn"]["sha256"] = bad
    else:
        doc["inputs"] = {"onnx_prepared": {"sha256": bad, "outputs": []}}
    build = fake_build(tmp_path / "b", doc)
    with pytest.raises(InputError, match=field.replace(".", r"\.")):
        BuildInfo.load(build)


def test_deploy_with_a_path_fingerprint_writes_nothing_outside_out(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    build = fake_build(tmp_path / "b", manifest(fingerprint=f"{victim}/" + "0" * 48))
    out = tmp_path / "res"
    before = tree(tmp_path)
    proc = rkdet(["deploy", "--board", "127.0.0.1:9", "--build", build, "--out", out, "--connect-timeout", "1"])
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc)
    assert "manifest.json" in line and "fingerprint" in line
    assert tree(tmp_path) == before  # no run folder under the victim, none under --out


def test_the_board_layout_refuses_a_fingerprint_that_is_not_hex() -> None:
    with pytest.raises(InputError, match="fingerprint"):
        RemoteLayout.for_run("/w", "../../../../tmp/" + "0" * 48, "20260101T000000Z-abcd")
    with pytest.raises(InputError, match="run id"):
        RemoteLayout.for_run("/w", GOOD_FP, "../x")
    layout = RemoteLayout.for_run("/w", GOOD_FP, "20260101T000000Z-abcd")
    assert layout.inputs.startswith("/w/inputs/") and ".." not in layout.inputs


def test_cut_cache_and_layers_refuse_a_crafted_fingerprint(tmp_path: Path) -> None:
    from rkdet.layers.rebuild import NEEDED, from_build

    build = tmp_path / "b"
    build.mkdir()
    for name in NEEDED:
        (build / name).parent.mkdir(parents=True, exist_ok=True)
        (build / name).write_text("{}")
    import json
    (build / "manifest.json").write_text(json.dumps(manifest(fingerprint="../../" + "0" * 60)))
    with pytest.raises(InputError, match="fingerprint"):
        from_build(build)


# -- §3: the manifest through the one bounded reader --

@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "deep", "huge-int", "sparse-big"])
def test_manifest_bounded(tmp_path: Path, kind: str) -> None:
    build = fake_build(tmp_path / "b")
    path = build / "manifest.json"
    if kind == "fifo":
        os.mkfifo(path)
        want = "a FIFO"
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
        want = "a character device"
    elif kind == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
        want = "nested deeper"
    elif kind == "huge-int":
        path.write_text('{"fingerprint": "%s", "platform": "rk3588", "x": %s}' % (GOOD_FP, "1" + "0" * 4000))
        want = "integer literal"
    else:
        with path.open("wb") as fh:  # 1 GiB, sparse: refused after at most the cap is read
            fh.truncate(1 << 30)
        want = "larger than"
    with pytest.raises(InputError) as err:
        BuildInfo.load(build)
    assert str(path) in str(err.value) and want in str(err.value)


@pytest.mark.parametrize("command", ["deploy", "diff"])
def test_fifo_manifest_is_one_line_exit_2(tmp_path: Path, command: str) -> None:
    build = fake_build(tmp_path / "b")
    os.mkfifo(build / "manifest.json")
    if command == "deploy":
        args = ["deploy", "--board", "127.0.0.1:9", "--build", build, "--out", tmp_path / "res"]
    else:
        (build / "golden" / "simulator").mkdir(parents=True)
        args = ["diff", build, build]
    proc = rkdet(args)  # did hang for ever on the FIFO
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc)
    assert str(build) in line


# -- §5 (host): the .rknn is checked against the manifest before anything is pushed --

def test_swapped_model_is_refused_before_any_push(tmp_path: Path) -> None:
    build = fake_build(tmp_path / "b")
    right = file_sha256(str(build / "model.rknn"))
    import json
    (build / "manifest.json").write_text(json.dumps(manifest(rknn={"sha256": right, "header": {}})))
    check_model(BuildInfo.load(build))  # the right one passes
    (build / "model.rknn").write_bytes(b"RKNN\0\0\0\0another model")
    with pytest.raises(InputError) as err:
        check_model(BuildInfo.load(build))
    assert str(build / "model.rknn") in str(err.value) and "rknn.sha256" in str(err.value)
