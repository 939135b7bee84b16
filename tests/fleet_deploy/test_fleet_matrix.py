"""The matrix of `rkdet fleet deploy`: cells from --matrix, and the core masks each SoC can run."""

from __future__ import annotations

import pytest

from rkdet.errors import InputError
from rkdet.fleets.run.matrix import parse_matrix, plan
from rkdet.fleets.run.records import MatrixCell

DEFAULT = MatrixCell("auto", "rknnlite")


def test_cells_are_masks_times_backends_and_onnxruntime_is_one_cell() -> None:
    cells = parse_matrix(("core_mask=auto,0,1,2,0_1_2", "backend=rknnlite,onnxruntime"), DEFAULT)
    assert [c.name for c in cells] == ["auto/rknnlite", "0/rknnlite", "1/rknnlite", "2/rknnlite", "0_1_2/rknnlite",
                                       "auto/onnxruntime"]
    assert parse_matrix((), MatrixCell("0", "rknnlite")) == [MatrixCell("0", "rknnlite")]  # the config's one cell
    assert parse_matrix(("backend=onnxruntime",), MatrixCell("0_1", "rknnlite")) == [MatrixCell("auto", "onnxruntime")]


@pytest.mark.parametrize("soc, runs", [
    ("rk3588", ["auto", "0", "1", "2", "0_1", "0_1_2"]),
    ("rk3576", ["auto", "0", "1", "0_1"]),
    ("rk3568", ["auto", "0"]),
    ("rv1126", ["auto", "0"]),
    (None, ["auto", "0"]),
])
def test_a_core_the_soc_lacks_is_skipped_and_said(soc, runs) -> None:  # type: ignore[no-untyped-def]
    cells = parse_matrix(("core_mask=auto,0,1,2,0_1,0_1_2", "backend=rknnlite,onnxruntime"), DEFAULT)
    planned = plan(cells, soc)
    assert [p.cell.core_mask for p in planned if not p.skip and p.cell.backend == "rknnlite"] == runs
    assert all(not p.skip for p in planned if p.cell.backend == "onnxruntime")
    skipped = [p for p in planned if p.skip]
    assert all("NPU core" in p.skip and p.cell.core_mask in p.skip for p in skipped)
    if soc == "rk3568":
        assert next(p.skip for p in skipped if p.cell.core_mask == "0_1_2") == "rk3568 has 1 NPU core; core mask 0_1_2 needs 3"


@pytest.mark.parametrize("specs, message", [
    (("core_mask=0,3",), "--matrix core_mask: '3'; allowed"),
    (("core_mask=0", "core_mask=1"), "core_mask is given twice"),
    (("backend=tflite",), "--matrix backend: 'tflite'"),
    (("threads=4",), "AXIS one of core_mask, backend"),
    (("core_mask=0,0",), "listed twice"),
    (("core_mask=",), "no value"),
])
def test_bad_matrix_is_input_error(specs, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match=message):
        parse_matrix(specs, DEFAULT)
