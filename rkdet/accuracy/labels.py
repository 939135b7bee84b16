"""Ground-truth labels for `rkdet accuracy`, read without trusting them: one typed `LabelSet` per format.

Formats (docs/ACCURACY.md): COCO JSON (detection, optionally instance masks), a folder per class or a CSV
of `file,class` (classification), a folder of PNG label maps (semantic segmentation, 255 = ignore). A
labels file may come from anyone: it is read bounded (rkdet.records.io), every entry is checked, and a bad
one is one line naming the file and the entry (InputError, exit 2) before anything is computed.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rkdet.convert.images import IMAGE_SUFFIXES
from rkdet.errors import InputError
from rkdet.onboard.hashing import file_sha256
from rkdet.records.accuracy import MAX_SAMPLES  # images in one labelled set (the record's bound too)
from rkdet.records.io import read_capped, read_json

LABELS_DIGEST = "rkdet.labels/1"  # what labels_digest covers, named so a later change cannot pass as the same
MAX_LABELS_BYTES = 256 << 20  # a COCO JSON or CSV file
MAX_CLASSES = 100_000
POLYGONS_KEY = "segmentation"  # COCO's annotation key for instance polygons (a file format's name, not a task)
IGNORE = 255  # a label-map pixel not judged (the ADE20K / Cityscapes / PaddleSeg convention)


@dataclass(frozen=True)
class Sample:
    """One labelled image: its name (file stem, the result sets' input name) and its file."""

    name: str
    image: Path


@dataclass(frozen=True)
class ClassLabels:
    """Classification: the true class index of each image."""

    source: Path
    samples: tuple[Sample, ...]
    truth: dict[str, int]  # sample name -> class index


@dataclass(frozen=True)
class MapLabels:
    """Semantic segmentation: a PNG label map per image (pixel value = class index, IGNORE = not judged)."""

    source: Path
    samples: tuple[Sample, ...]
    maps: dict[str, Path]  # sample name -> label map file


@dataclass(frozen=True)
class CocoLabels:
    """Detection (and instance masks): a checked COCO ground-truth document and which image each sample is."""

    source: Path
    samples: tuple[Sample, ...]
    image_ids: dict[str, int]  # sample name -> COCO image id
    sizes: dict[str, tuple[int, int]]  # sample name -> (height, width) as the file declares it
    category_ids: tuple[int, ...]  # model class index i -> COCO category id category_ids[i] (sorted ids)
    document: dict[str, Any] = field(repr=False)  # the checked ground truth, as pycocotools reads it
    has_masks: bool = False


LabelSet = ClassLabels | MapLabels | CocoLabels


def _images_in(folder: Path, where: str) -> dict[str, Path]:
    if not folder.is_dir():
        raise InputError(f"{folder}: {where} is not a folder; pass the folder of the labelled images with --images")
    found: dict[str, Path] = {}
    for p in sorted(folder.iterdir(), key=lambda q: q.name.encode()):
        if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file() and not p.is_symlink():
            if p.stem in found:
                raise InputError(f"{p}: shares the name stem {p.stem!r} with {found[p.stem].name}; rename one")
            found[p.stem] = p
            if len(found) > MAX_SAMPLES:
                raise InputError(f"{folder}: more than {MAX_SAMPLES} images; evaluate a subset")
    return found


def _class_index(text: str, where: str, classes: int | None) -> int:
    value = text.strip()
    if not value.isdigit() or int(value) >= MAX_CLASSES:
        raise InputError(f"{where}: class {value[:40]!r} is not a class index (0, 1, ...); "
                         "name classes by the model's output index")
    if classes is not None and int(value) >= classes:
        raise InputError(f"{where}: class {int(value)} is outside the model's {classes} classes (0..{classes - 1})")
    return int(value)


def class_folders(folder: Path, classes: int | None) -> ClassLabels:
    """A folder per class, named by the class index (`0/`, `1/`, ... or `003-cat/`: the digits before '-')."""
    samples, truth = [], {}
    subfolders = sorted((p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()),
                        key=lambda q: q.name.encode())
    if not subfolders:
        raise InputError(f"{folder}: no class folders; put each class's images in a folder named by its index")
    for sub in subfolders:
        index = _class_index(sub.name.split("-", 1)[0], f"{sub}", classes)
        for name, path in _images_in(sub, "a class folder").items():
            if name in truth:
                raise InputError(f"{path}: image name {name!r} is also in another class folder; names must be unique")
            truth[name] = index
            samples.append(Sample(name, path))
    if not samples:
        raise InputError(f"{folder}: the class folders hold no images ({', '.join(IMAGE_SUFFIXES)})")
    return ClassLabels(folder, tuple(sorted(samples, key=lambda s: s.name.encode())), truth)


def class_csv(path: Path, images: Path | None, classes: int | None) -> ClassLabels:
    """A CSV of `file,class` rows (a header row `file,class` allowed); files relative to --images, else to the CSV."""
    base = images if images is not None else path.parent
    found = _images_in(base, "--images")
    text = read_capped(path, MAX_LABELS_BYTES).decode("utf-8", errors="replace")
    samples, truth = [], {}
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or (lineno == 1 and [c.strip().lower() for c in row[:2]] == ["file", "class"]):
            continue
        where = f"{path}:{lineno}"
        if len(row) != 2:
            raise InputError(f"{where}: expected 2 fields (file,class), found {len(row)}")
        stem = Path(row[0].strip()).stem
        if Path(row[0].strip()).name != row[0].strip() or stem not in found:
            raise InputError(f"{where}: image {row[0].strip()[:80]!r} is not in {base}; name a file in that folder")
        if stem in truth:
            raise InputError(f"{where}: image {row[0].strip()[:80]!r} is labelled twice")
        truth[stem] = _class_index(row[1], where, classes)
        samples.append(Sample(stem, found[stem]))
    if not samples:
        raise InputError(f"{path}: no labelled rows; write one `file,class` row per image")
    return ClassLabels(path, tuple(sorted(samples, key=lambda s: s.name.encode())), truth)


def label_maps(folder: Path, images: Path | None) -> MapLabels:
    """PNG label maps named as their images (`page-01.png` labels `page-01.jpg` in --images)."""
    if images is None:
        raise InputError(f"{folder}: label maps need their images: pass --images FOLDER")
    found = _images_in(images, "--images")
    maps = {p.stem: p for p in sorted(folder.glob("*.png"), key=lambda q: q.name.encode()) if p.is_file()}
    if not maps:
        raise InputError(f"{folder}: no PNG label maps; write one 8-bit PNG per image (pixel = class index)")
    missing = sorted(set(maps) - set(found))
    if missing:
        raise InputError(f"{maps[missing[0]]}: no image named {missing[0]!r} in {images}; name each map as its image")
    return MapLabels(folder, tuple(Sample(n, found[n]) for n in maps), maps)


def read_label_map(path: Path, shape: tuple[int, int], classes: int) -> np.ndarray:
    """A label map as uint8 (H, W): 8-bit single channel, the image's size, values < classes or IGNORE."""
    import cv2

    data = np.frombuffer(read_capped(path, MAX_LABELS_BYTES), dtype=np.uint8)
    image = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
    if image is None or image.dtype != np.uint8 or image.ndim != 2:
        raise InputError(f"{path}: not an 8-bit single-channel PNG label map (pixel = class index, {IGNORE} = ignore)")
    if image.shape != shape:
        raise InputError(f"{path}: label map is {image.shape[1]}x{image.shape[0]}, its image {shape[1]}x{shape[0]}; "
                         "a map has its image's size")
    bad = image[(image >= classes) & (image != IGNORE)]
    if bad.size:
        raise InputError(f"{path}: pixel value {int(bad[0])} is not a class (the model has {classes}: 0..{classes - 1}, "
                         f"{IGNORE} = ignore)")
    return image


def _entry(doc: dict[str, Any], key: str, path: Path) -> list[Any]:
    value = doc.get(key)
    if not isinstance(value, list):
        raise InputError(f"{path}: key {key!r} is missing or not a list; a COCO file has images, annotations, categories")
    return value


def _number(value: Any, where: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise InputError(f"{where}: {what} {str(value)[:40]!r} is not a finite number")
    return float(value)


def _int_id(value: Any, where: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 53:
        raise InputError(f"{where}: {what} {str(value)[:40]!r} is not a non-negative integer id")
    return value


def coco(path: Path, images: Path | None, classes: int | None) -> CocoLabels:
    """A COCO detection file; its images found in --images (else beside the file) by `file_name`."""
    doc = read_json(path, limit=MAX_LABELS_BYTES)
    if not isinstance(doc, dict):
        raise InputError(f"{path}: not a COCO object (images, annotations, categories)")
    base = images if images is not None else path.parent
    found = _images_in(base, "--images")
    cats = _entry(doc, "categories", path)
    cat_ids = sorted({_int_id(c.get("id") if isinstance(c, dict) else None, f"{path}: categories[{i}]", "id")
                      for i, c in enumerate(cats)})
    if not cat_ids or len(cat_ids) != len(cats):
        raise InputError(f"{path}: categories must list each category id once")
    if classes is not None and len(cat_ids) != classes:
        raise InputError(f"{path}: {len(cat_ids)} categories, the model has {classes} classes; list one category per "
                         "class (model class i = the i-th smallest category id)")
    samples, image_ids, clean_images = [], {}, []
    for i, im in enumerate(_entry(doc, "images", path)):
        where = f"{path}: images[{i}]"
        if not isinstance(im, dict) or not isinstance(im.get("file_name"), str):
            raise InputError(f"{where}: needs id, file_name, width, height")
        name = im["file_name"]
        image_id = _int_id(im.get("id"), where, "id")
        width, height = (_int_id(im.get(k), where, k) for k in ("width", "height"))
        stem = Path(name).stem
        if Path(name).name != name or stem not in found:
            raise InputError(f"{where}: file_name {name[:80]!r} is not in {base}; name a file in that folder")
        if stem in image_ids or image_id in image_ids.values():
            raise InputError(f"{where}: image {name[:80]!r} (id {image_id}) is listed twice")
        image_ids[stem] = image_id
        samples.append(Sample(stem, found[stem]))
        clean_images.append({"id": image_id, "file_name": name, "width": width, "height": height})
    if not samples:
        raise InputError(f"{path}: no images listed")
    known = set(image_ids.values())
    sizes = {im["id"]: (im["width"], im["height"]) for im in clean_images}
    clean_anns, masks = [], False
    for i, ann in enumerate(_entry(doc, "annotations", path)):
        where = f"{path}: annotations[{i}]"
        if not isinstance(ann, dict):
            raise InputError(f"{where}: not an object")
        image_id = _int_id(ann.get("image_id"), where, "image_id")
        if image_id not in known:
            raise InputError(f"{where}: image_id {image_id} is not in images")
        cat = _int_id(ann.get("category_id"), where, "category_id")
        if cat not in cat_ids:
            raise InputError(f"{where}: category_id {cat} is not in categories")
        bbox = ann.get("bbox")
        if not isinstance(bbox, list) or len(bbox) != 4:
            raise InputError(f"{where}: bbox must be [x, y, width, height]")
        x, y, w, h = (_number(v, where, "bbox value") for v in bbox)
        iw, ih = sizes[image_id]
        if w <= 0 or h <= 0 or x < 0 or y < 0 or x + w > iw + 1 or y + h > ih + 1:
            raise InputError(f"{where}: bbox {[x, y, w, h]} is empty or outside its {iw:g}x{ih:g} image")
        crowd = ann.get("iscrowd", 0)
        if crowd not in (0, 1):
            raise InputError(f"{where}: iscrowd must be 0 or 1")
        clean = {"id": i + 1, "image_id": image_id, "category_id": cat, "bbox": [x, y, w, h],
                 "area": _number(ann.get("area", w * h), where, "area"), "iscrowd": crowd}
        if POLYGONS_KEY in ann:
            seg = ann[POLYGONS_KEY]
            if not (isinstance(seg, list) and seg and all(isinstance(p, list) and len(p) >= 6 and len(p) % 2 == 0
                                                           for p in seg)):
                raise InputError(f"{where}: segmentation must be a list of polygons [x1, y1, x2, y2, ...]")
            clean[POLYGONS_KEY] = [[_number(v, where, "polygon value") for v in p] for p in seg]
            masks = True
        clean_anns.append(clean)
    document = {"images": clean_images, "annotations": clean_anns,
                "categories": [{"id": c, "name": str(c)} for c in cat_ids]}
    every_mask = masks and all(POLYGONS_KEY in a for a in clean_anns)
    if masks and not every_mask:
        first = next(i for i, a in enumerate(clean_anns) if POLYGONS_KEY not in a)
        raise InputError(f"{path}: annotations[{first}] has no segmentation while others do; give every annotation "
                         "its polygons (mask AP) or none (box AP)")
    names = {im["id"]: Path(im["file_name"]).stem for im in clean_images}
    return CocoLabels(path, tuple(sorted(samples, key=lambda s: s.name.encode())), image_ids,
                      {names[i]: (int(h), int(w)) for i, (w, h) in sizes.items()}, tuple(cat_ids), document, every_mask)


def read_labels(path: Path, images: Path | None, *, classes: int | None, per_pixel: bool) -> LabelSet:
    """The labels at `path` by their form: a .json (COCO), a .csv, a folder of PNG maps (`per_pixel`: the
    model decides a label per pixel), or a folder of class folders."""
    if not path.exists():
        raise InputError(f"{path}: labels not found; pass a COCO .json, a classification .csv or folder, or label maps")
    if path.is_file() and path.suffix.lower() == ".json":
        return coco(path, images, classes)
    if path.is_file() and path.suffix.lower() == ".csv":
        return class_csv(path, images, classes)
    if path.is_dir() and per_pixel:
        return label_maps(path, images)
    if path.is_dir():
        return class_folders(path, classes)
    raise InputError(f"{path}: labels are a COCO .json, a .csv (file,class), a folder per class or a folder of "
                     "PNG label maps")


def labels_digest(labels: LabelSet) -> str:
    """The labels' hash (`accuracy.json` `labels_sha256`, `rkdet history`'s key for "the same labelled set"):
    sha256 over the labels file's bytes (COCO JSON, CSV) or, for each image in name order, its name, its
    file's sha256 and its truth (a class index, or its label map file's sha256). Same labels and same
    images give the same hash on any machine: no path, no time is in it."""
    import hashlib

    digest = hashlib.sha256(f"{LABELS_DIGEST}\n".encode())
    if labels.source.is_file():
        digest.update(f"file {file_sha256(str(labels.source))}\n".encode())
    for s in sorted(labels.samples, key=lambda x: x.name.encode()):
        if isinstance(labels, ClassLabels):
            truth = f"class {labels.truth[s.name]}"
        elif isinstance(labels, MapLabels):
            truth = f"map {file_sha256(str(labels.maps[s.name]))}"
        else:
            truth = f"image {labels.image_ids[s.name]}"
        digest.update(f"{s.name}\t{file_sha256(str(s.image))}\t{truth}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()
