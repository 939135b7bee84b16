"""Which detector family a model's outputs are, from their names and shapes alone (plus the input size,
where the outputs cannot say it: a PicoDet export's flattened grids read the same transposed).

Every recogniser returns a Layout or None; `detect_layout` tries them in a fixed order and ends at
"none" (numeric comparison only) with the outputs named, so nothing unrecognised is guessed.
"""

from __future__ import annotations

import math

from rkdet.decode.common import Branch, Layout

Outputs = list[tuple[str, tuple[int, ...]]]
BOX_BINS = {64: 16, 68: 17, 32: 8}  # box channels (4 sides x DFL bins): YOLOv8/YOLO11, PP-YOLOE(+), PicoDet
# YOLOv5's default anchors (w, h in input pixels) for strides 8, 16, 32 (models/yolov5s.yaml; rknn_model_zoo's
# anchors_yolov5.txt holds the same nine pairs).
YOLOV5_ANCHORS = (((10, 13), (16, 30), (33, 23)), ((30, 61), (62, 45), (59, 119)), ((116, 90), (156, 198), (373, 326)))
END_TO_END_MAX = 1000  # YOLOv10's end-to-end output keeps max_det (default 300) rows


def shapes_text(outputs: Outputs) -> str:
    return ", ".join(f"{n}{list(s)}" for n, s in outputs)


def _grid(hw: tuple[int, int], stride: int) -> tuple[int, int]:
    return (math.ceil(hw[0] / stride), math.ceil(hw[1] / stride))


def anchor_count(hw: tuple[int, int], strides: tuple[int, ...] = (8, 16, 32)) -> int:
    return sum(_grid(hw, s)[0] * _grid(hw, s)[1] for s in strides)


def _square_side(anchors: int, per_cell: int = 1) -> int | None:
    """Input side S such that strides 8/16/32 give `anchors` (x per_cell) in total, if any."""
    if anchors % (21 * per_cell):
        return None
    unit = anchors // (21 * per_cell)
    root = math.isqrt(unit)
    return 32 * root if root > 0 and root * root == unit else None


def _input_for(anchors: int, input_hw: tuple[int, int] | None, per_cell: int = 1) -> tuple[int, int] | None:
    """The input size whose 8/16/32 grids hold `anchors` cells (x per_cell): the given one, or a square."""
    if input_hw is not None:
        return input_hw if anchor_count(input_hw) * per_cell == anchors else None
    side = _square_side(anchors, per_cell)
    return (side, side) if side else None


def single_output(outputs: Outputs, input_hw: tuple[int, int] | None) -> Layout | None:
    """One [1, C, N] / [1, N, C] output: Ultralytics YOLOv8/YOLO11 (4+nc rows), YOLOv5 (5+nc, objectness,
    three anchors per cell) or YOLOv10's end-to-end [1, K, 6] (x1, y1, x2, y2, score, class; no NMS)."""
    if len(outputs) != 1 or len(outputs[0][1]) != 3 or outputs[0][1][0] != 1:
        return None
    name, (_, rows, cols) = outputs[0]
    for transposed, (channels, anchors) in ((False, (rows, cols)), (True, (cols, rows))):
        if not 4 < channels < anchors:  # anchors always outnumber the channels
            continue
        box = (slice(None), slice(None), slice(0, 4)) if transposed else (slice(None), slice(0, 4))
        rest = (slice(None), slice(None), slice(4, None)) if transposed else (slice(None), slice(4, None))
        hw = _input_for(anchors, input_hw)
        if hw:
            nc = channels - 4
            return Layout("yolov8-single", f"Ultralytics YOLOv8/YOLO11 single output {name} {list(outputs[0][1])}: "
                          f"{nc} classes, {hw[0]}x{hw[1]} input", roles={name: "boxes+cls"},
                          slices={name: {"box": box, "cls": rest}}, nc=nc, input_size=hw, transposed=transposed)
        hw = _input_for(anchors, input_hw, per_cell=3)
        if hw and channels > 5:
            nc = channels - 5
            return Layout("yolov5-single", f"YOLOv5 single output {name} {list(outputs[0][1])}: {nc} classes, "
                          f"objectness, 3 anchors per cell, {hw[0]}x{hw[1]} input", roles={name: "boxes+obj+cls"},
                          slices={name: {"box": box, "obj+cls": rest}}, nc=nc, input_size=hw, transposed=transposed)
    if cols == 6 and rows <= END_TO_END_MAX:
        return Layout("yolov10", f"YOLOv10 end-to-end output {name} {list(outputs[0][1])}: up to {rows} detections "
                      "(x1, y1, x2, y2, score, class), NMS-free", roles={name: "detections"},
                      slices={name: {"box": (slice(None), slice(None), slice(0, 4)),
                                     "score": (slice(None), slice(None), slice(4, 5))}}, input_size=input_hw)
    return None


def segmentation(outputs: Outputs, input_hw: tuple[int, int] | None) -> Layout | None:
    """YOLOv8-seg (YOLO11-seg): a [1, 4+nc+M, N] detection output and [1, M, H/4, W/4] prototypes."""
    if len(outputs) != 2:
        return None
    protos = [o for o in outputs if len(o[1]) == 4 and o[1][0] == 1]
    dets = [o for o in outputs if len(o[1]) == 3 and o[1][0] == 1]
    if len(protos) != 1 or len(dets) != 1:
        return None
    (pname, (_, m, ph, pw)), (dname, (_, rows, cols)) = protos[0], dets[0]
    hw = input_hw or (ph * 4, pw * 4)
    if _grid(hw, 4) != (ph, pw):
        return None
    for transposed, (channels, anchors) in ((False, (rows, cols)), (True, (cols, rows))):
        nc = channels - 4 - m
        if nc >= 1 and anchors == anchor_count(hw):
            ax = (slice(None), slice(None)) if transposed else (slice(None),)
            slices = {"box": (*ax, slice(0, 4)), "cls": (*ax, slice(4, 4 + nc)), "coef": (*ax, slice(4 + nc, None))}
            return Layout("yolov8-seg", f"YOLOv8/YOLO11 segmentation: {dname} {list(dets[0][1])} ({nc} classes + {m} "
                          f"mask coefficients), prototypes {pname} {list(protos[0][1])}, {hw[0]}x{hw[1]} input",
                          roles={dname: "boxes+cls+coef", pname: "proto"}, slices={dname: slices}, nc=nc,
                          input_size=hw, transposed=transposed, mask_coefs=m)
    return None


def _chain(sizes: list[tuple[int, int]]) -> bool:
    """Grids halving from one stride to the next (rounding up, as a stride-2 conv does)."""
    return all(b == (math.ceil(a[0] / 2), math.ceil(a[1] / 2)) for a, b in zip(sizes, sizes[1:]))


def _pick_box(members: list[tuple[str, int]]) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """Split one stride's outputs into box candidates (4 x DFL bins channels, not named cls/score) and the rest."""
    box = [m for m in members if m[1] in BOX_BINS and not any(w in m[0].lower() for w in ("cls", "score"))]
    if len(box) > 1:  # nc can equal a box channel count: names decide, or nothing does
        named = [m for m in box if any(w in m[0].lower() for w in ("box", "reg", "bbox", "dfl"))]
        box = named if len(named) == 1 else box
    return box, [m for m in members if m not in box]


def split_head(outputs: Outputs, input_hw: tuple[int, int] | None) -> Layout | None:
    """Per stride a DFL box map and a class map (+ rknn_model_zoo's 1-channel score_sum): YOLOv8/YOLO11
    (and YOLOv10 as rknn_model_zoo exports it), PP-YOLOE, PicoDet maps; NCHW or NHWC; 3 or 4 strides."""
    if len(outputs) < 4 or any(len(shape) != 4 or shape[0] != 1 for _, shape in outputs):
        return None
    for channels_last in (False, True):
        groups: dict[tuple[int, int], list[tuple[str, int]]] = {}
        for name, shape in outputs:
            size, channels = ((shape[1], shape[2]), shape[3]) if channels_last else ((shape[2], shape[3]), shape[1])
            groups.setdefault(size, []).append((name, channels))
        sizes = sorted(groups, reverse=True)
        if not 3 <= len(sizes) <= 4 or not _chain(sizes):
            continue
        if input_hw is not None and _grid(input_hw, 8) != sizes[0]:
            continue
        branches: list[Branch] = []
        nc = 0
        for i, size in enumerate(sizes):
            box, rest = _pick_box(groups[size])
            score = [m for m in rest if m[1] == 1 and len(rest) == 2]
            cls = [m for m in rest if m not in score]
            if len(box) != 1 or len(cls) != 1 or (nc and cls[0][1] != nc):
                branches = []
                break
            nc = cls[0][1]
            branches.append(Branch(8 << i, size, box[0][0], cls[0][0], score[0][0] if score else None,
                                   channels_last, BOX_BINS[box[0][1]]))
        if not branches or len({b.bins for b in branches}) != 1:
            continue
        roles: dict[str, str] = {}
        for b in branches:
            roles[b.box], roles[b.cls] = "box", "cls"
            if b.score_sum:
                roles[b.score_sum] = "score_sum"
        hw = input_hw or (sizes[0][0] * 8, sizes[0][1] * 8)
        bins = branches[0].bins
        kind = "yolov8-split" if bins == 16 and len(branches) == 3 else "ppyoloe-split"
        family = ("YOLOv8/YOLO11 split head" if kind == "yolov8-split" else
                  f"PP-YOLOE/PicoDet-style split head ({bins} DFL bins)")
        return Layout(kind, f"{family}: {len(branches)} branches (strides {'/'.join(str(b.stride) for b in branches)}), "
                      f"{4 * bins}-channel DFL box + {nc}-class cls{' + score_sum' if branches[0].score_sum else ''}"
                      f"{' (NHWC)' if channels_last else ''}, {hw[0]}x{hw[1]} input",
                      roles=roles, branches=branches, nc=nc, input_size=hw)
    return None


def yolov5_split(outputs: Outputs, input_hw: tuple[int, int] | None) -> Layout | None:
    """YOLOv5 (rknn_model_zoo's export): per stride one [1, 3*(5+nc), H, W] map (or NHWC), anchors from
    YOLOV5_ANCHORS."""
    if len(outputs) != 3 or any(len(shape) != 4 or shape[0] != 1 for _, shape in outputs):
        return None
    for channels_last in (False, True):
        maps = sorted(((((s[1], s[2]), s[3]) if channels_last else ((s[2], s[3]), s[1])) + (n,) for n, s in outputs),
                      reverse=True)
        sizes = [m[0] for m in maps]
        channels = {m[1] for m in maps}
        if len(channels) != 1 or len(set(sizes)) != 3 or not _chain(sizes):
            continue
        (c,) = channels
        if c % 3 or c // 3 < 6 or (input_hw is not None and _grid(input_hw, 8) != sizes[0]):
            continue
        nc = c // 3 - 5
        branches = [Branch(8 << i, m[0], m[2], m[2], None, channels_last) for i, m in enumerate(maps)]
        hw = input_hw or (sizes[0][0] * 8, sizes[0][1] * 8)
        return Layout("yolov5-split", f"YOLOv5 per-stride maps ({', '.join(m[2] for m in maps)}): 3 anchors x "
                      f"(5+{nc}) channels, strides 8/16/32, default anchors, {hw[0]}x{hw[1]} input",
                      roles={m[2]: "boxes+obj+cls" for m in maps}, branches=branches, nc=nc, input_size=hw,
                      anchors=YOLOV5_ANCHORS)
    return None


def picodet_flat(outputs: Outputs, input_hw: tuple[int, int] | None) -> Layout | None:
    """PP-PicoDet's Paddle export without post-processing: per stride (8, 16, 32, 64) class scores [1, HW, nc]
    and box distributions [1, HW, 4*(reg_max+1)] (often 8 outputs: the four score outputs, then the four box
    outputs). The grids are flattened, so the input size names their shape (a square input is inferred)."""
    if len(outputs) < 6 or len(outputs) % 2 or any(len(s) != 3 or s[0] != 1 for _, s in outputs):
        return None
    groups: dict[int, list[tuple[str, int]]] = {}
    for name, (_, cells, channels) in outputs:
        groups.setdefault(cells, []).append((name, channels))
    counts = sorted(groups, reverse=True)
    if not 3 <= len(counts) <= 4 or any(len(groups[c]) != 2 for c in counts):
        return None
    if input_hw is None:
        side = math.isqrt(counts[0])
        if side * side != counts[0]:
            return None
        input_hw = (8 * side, 8 * side)
    sizes = [_grid(input_hw, 8 << i) for i in range(len(counts))]
    if [h * w for h, w in sizes] != counts:
        return None
    branches: list[Branch] = []
    nc = 0
    for i, cells in enumerate(counts):
        box, cls = _pick_box(groups[cells])
        if len(box) != 1 or len(cls) != 1 or (nc and cls[0][1] != nc):
            return None
        nc = cls[0][1]
        branches.append(Branch(8 << i, sizes[i], box[0][0], cls[0][0], None, True, BOX_BINS[box[0][1]], flat=True))
    if len({b.bins for b in branches}) != 1:
        return None
    roles = {}
    for b in branches:
        roles[b.box], roles[b.cls] = "box", "cls"
    return Layout("picodet", f"PP-PicoDet-style head: {len(branches)} strides ({'/'.join(str(b.stride) for b in branches)}), "
                  f"{nc}-class scores + {4 * branches[0].bins}-channel GFL box distributions per stride (flattened), "
                  f"{input_hw[0]}x{input_hw[1]} input", roles=roles, branches=branches, nc=nc, input_size=input_hw)


def classification(outputs: Outputs) -> Layout | None:
    """One output [C], [1, C] or [1, C, 1, 1]."""
    if len(outputs) != 1:
        return None
    name, shape = outputs[0]
    dims = [d for d in shape if d != 1]
    if len(dims) == 1 and dims[0] > 1 and (len(shape) <= 2 or tuple(shape[-2:]) == (1, 1)):
        return Layout("classification", f"classification: {dims[0]} classes in {name}", roles={name: "scores"},
                      nc=dims[0])
    return None
