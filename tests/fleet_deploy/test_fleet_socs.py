"""A fleet mixing RK3588, RK3576 and RK3562 (issue 34): real emulated boards of each SoC (rkdet.emulator.socs
profiles), the tiny model converted for the three platforms in one convert, `rkdet fleet deploy` with core
masks 0, 1 and 0_1_2. Proves: every board deploys and runs pinned (one pinned session per board), each board
runs exactly the masks its NPU has (rkdet.socs: 3, 2 and 1 cores) and says why it skips the others, and every
board ran the build of its own SoC."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fleet_helpers import Lab, fleet_deploy, lab, rkdet

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "convert"))
from tiny_models import conv_model, image_folder, write_config  # noqa: E402

SOCS = (("big", "rk3588"), ("mid", "rk3576"), ("small", "rk3562"))


@pytest.fixture(scope="module")
def tiny_builds(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("socs")
    cfg = write_config(root / "tiny.yaml", conv_model(root / "tiny.onnx"), image_folder(root / "cal", 4, seed=1),
                       image_folder(root / "gold", 1, seed=2), target={"platforms": [s for _, s in SOCS]})
    proc = rkdet(["convert", "--config", cfg, "--out", root / "out", "--json"], timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    builds = json.loads(proc.stdout)["builds"]
    assert sorted(json.loads((Path(b["folder"]) / "manifest.json").read_text())["platform"] for b in builds) == \
        sorted(s for _, s in SOCS)
    return [a for b in builds for a in ("--build", b["folder"])]


@pytest.fixture(scope="module")
def three_socs(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    with lab(tmp_path_factory.mktemp("lab3socs"), list(SOCS)) as running:
        yield running


def test_rk3588_rk3576_rk3562_fleet_deploys_pinned_with_masks_per_soc(three_socs: Lab, tiny_builds: list[str],
                                                                      tmp_path: Path) -> None:
    proc = fleet_deploy(three_socs, three_socs.inventory(), tmp_path, "--matrix", "core_mask=0,1,0_1_2", "--json",
                        builds=tiny_builds)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(proc.stdout)
    boards = {b["name"]: b for b in doc["boards"]}
    assert {n: b["board"]["soc"] for n, b in boards.items()} == dict(SOCS)
    assert all(b["status"] == "complete" for b in boards.values())
    ran = {n: [c["cell"] for c in b["cells"] if c["status"] == "complete"] for n, b in boards.items()}
    assert ran == {"big": ["0/rknnlite", "1/rknnlite", "0_1_2/rknnlite"], "mid": ["0/rknnlite", "1/rknnlite"],
                   "small": ["0/rknnlite"]}
    skipped = {(n, c["cell"]): c["reason"] for n, b in boards.items() for c in b["cells"] if c["status"] == "skipped"}
    assert skipped == {("mid", "0_1_2/rknnlite"): "rk3576 has 2 NPU cores; core mask 0_1_2 needs 3",
                       ("small", "1/rknnlite"): "rk3562 has 1 NPU core; core mask 1 needs 2",
                       ("small", "0_1_2/rknnlite"): "rk3562 has 1 NPU core; core mask 0_1_2 needs 3"}
    folder = next((tmp_path / "fleet").glob("*/fleet.json")).parent
    for name, soc in SOCS:
        cell = next(c for c in boards[name]["cells"] if c["status"] == "complete")
        run = folder / cell["run_folder"]
        assert json.loads((folder / boards[name]["build"] / "manifest.json").read_text())["platform"] == soc
        assert (run / "deploy.json").is_file()
        assert (run / "job.log").read_text().count('"record":"state"') == 1  # pinned once, restored after
