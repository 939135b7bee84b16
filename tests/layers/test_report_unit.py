"""Report pieces without the toolkit: the toolkit table parser and HTML escaping of untrusted names."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rkdet.layers.analysis import Metrics, read_analysis
from rkdet.layers.mapping import OnnxRef
from rkdet.layers.report import Layer, LayersReport, render_html

# An excerpt of rknn-toolkit2 2.5.0's error_analysis.txt as written (ANSI colour codes included).
TABLE = """# simulator_error: ...

layer_name                               simulator_error
                                     entire              single
                                  cos      euc        cos      euc
------------------------------------------------------------------------
[Input] x                  1.00000 | 0.00000   1.00000 | 0.00000
[Conv] c1
[Relu] r1                  0.99998 | 0.36687   0.99998 | 0.36687
[Sub] d                    \x1b[1;33m0.20347\x1b[0m | \x1b[1;33m330.68411\x1b[0m \x1b[1;33m0.20347\x1b[0m | 330.68411
"""


def test_parse_table_fused_rows_and_dumps(tmp_path: Path) -> None:
    (tmp_path / "error_analysis.txt").write_text(TABLE)
    (tmp_path / "map_name_to_file.txt").write_text("layer_name file_name\n----\nx x.txt\nc1 c1.txt\nr1 r1.txt\nd d.txt\n")
    for side in ("golden", "simulator"):
        (tmp_path / side / "npy").mkdir(parents=True)
    g = np.arange(1, 9, dtype=np.float32).reshape(1, 2, 2, 2)
    s = g.copy()
    s[0, 0, 0, 0] += 3.0
    np.save(tmp_path / "golden" / "npy" / "d.npy", g)
    np.save(tmp_path / "simulator" / "npy" / "d.npy", s)
    rows = read_analysis("in0", tmp_path).rows
    assert [(r.op, r.name, r.entire is None) for r in rows] == [
        ("Input", "x", False), ("Conv", "c1", True), ("Relu", "r1", False), ("Sub", "d", False)]
    d = rows[3]
    assert d.entire is not None and d.entire.max_abs == 3.0
    assert abs(d.entire.rel_l2 - 3.0 / float(np.linalg.norm(g))) < 1e-6
    assert d.single is not None and d.single.cosine == 0.20347
    assert abs(d.single.rel_l2 - 330.68411 / float(np.linalg.norm(g))) < 1e-6
    assert rows[2].entire is not None and rows[2].entire.cosine == 0.99998  # no dumps: the table's value


def test_html_escapes_layer_and_node_names() -> None:
    ref = OnnxRef("exact", "<t>", "<script>alert(1)</script>", "Sub", 0)
    layer = Layer(0, "Sub", "<img src=x>", ref, [], Metrics(0.2, 1.0, 3.0), Metrics(0.2, 1.0, None), "<in>")
    report = LayersReport("<src>", "rknn-toolkit2 2.5.0", "f" * 64, None, 0.9, ["<in>"], [layer], layer, [layer])
    page = render_html(report)
    assert "<script>" not in page and "<img src=x>" not in page and "&lt;script&gt;" in page
    assert "first loss" in page and "data:image/png;base64," in page
