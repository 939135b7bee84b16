#!/usr/bin/env python3
"""Render the labelled document pages for `rkdet accuracy` (calibration_data/labelled/): pages whose layout
boxes are known because this script drew them, with a COCO file (`labels.json`) of those boxes.

Why synthetic: a labelled set must ship with the project under a clear licence, small; DocLayNet's own pages
are CDLA-Permissive but large. Every block (title, section header, text, list item, table, picture, caption,
formula, footnote, page header and footer: the DocLayNet classes the default model was trained on) is drawn at
a chosen place with Pillow and the DejaVu fonts, and its box is the union of what was drawn (Pillow's
`textbbox` per line, the grid or figure's extent), so the labels are exact by construction.

Usage: .venv/bin/python calibration_data/make_labelled.py [--check]
  (no option)  write calibration_data/labelled/ (pages, labels.json, SHA256SUMS)
  --check      render into a temporary folder and compare with the committed SHA256SUMS (exit 0 same, 1 not)
Needs Pillow and fonts-dejavu-core (Debian); byte-identical pages need the versions PROVENANCE.md names.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import tempfile
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

HERE = Path(__file__).resolve().parent
OUT = HERE / "labelled"
FONTS = Path("/usr/share/fonts/truetype/dejavu")
PAGES = 6
SIZE = (850, 1100)  # US letter at 100 dpi
MARGIN = 70
CLASSES = ("Caption", "Footnote", "Formula", "List-item", "Page-footer", "Page-header", "Picture",
           "Section-header", "Table", "Text", "Title")  # the model's class order (its metadata `names`)
WORDS = ("the model converts each layer with its own scale so the outputs stay close to the float reference "
         "while every board gives the same bits for the same input when the clocks are pinned and the runtime "
         "is the one recorded in the manifest measured against labelled pages of known layout").split()


def font(name: str, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(FONTS / name), size)


class Page:
    def __init__(self, number: int, rng: random.Random) -> None:
        self.image = Image.new("RGB", SIZE, (255, 255, 255))
        self.draw = ImageDraw.Draw(self.image)
        self.rng, self.number, self.boxes = rng, number, []
        self.y = MARGIN

    def add(self, cls: str, box: tuple[float, float, float, float]) -> None:
        x1, y1, x2, y2 = box
        self.boxes.append((CLASSES.index(cls), [round(x1, 1), round(y1, 1), round(x2 - x1, 1), round(y2 - y1, 1)]))

    def lines(self, texts: list[str], f: ImageFont.FreeTypeFont, x: float, y: float, gap: int,
              center: bool = False) -> tuple[float, float, float, float]:
        """Draw lines of text; the union of their ink boxes."""
        box = [1e9, 1e9, -1e9, -1e9]
        for t in texts:
            tx = x
            if center:
                w = self.draw.textlength(t, font=f)
                tx = (SIZE[0] - w) / 2
            b = self.draw.textbbox((tx, y), t, font=f)
            self.draw.text((tx, y), t, font=f, fill=(20, 20, 20))
            box = [min(box[0], b[0]), min(box[1], b[1]), max(box[2], b[2]), max(box[3], b[3])]
            y += f.size + gap
        return box[0], box[1], box[2], box[3]

    def sentence(self, n: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(n))

    def wrap(self, words: int, f: ImageFont.FreeTypeFont, width: float) -> list[str]:
        out, line = [], ""
        for w in self.sentence(words).split():
            trial = (line + " " + w).strip()
            if self.draw.textlength(trial, font=f) > width and line:
                out.append(line)
                line = w
            else:
                line = trial
        return out + ([line] if line else [])

    def block(self, cls: str, texts: list[str], f: ImageFont.FreeTypeFont, x: float = MARGIN, gap: int = 5,
              after: int = 18, center: bool = False) -> None:
        box = self.lines(texts, f, x, self.y, gap, center)
        self.add(cls, box)
        self.y = box[3] + after

    def table(self, rows: int, cols: int) -> None:
        f = font("DejaVuSans.ttf", 14)
        width = SIZE[0] - 2 * MARGIN
        cw, rh = width / cols, 26
        x0, y0 = MARGIN, self.y
        for r in range(rows + 1):
            self.draw.line([(x0, y0 + r * rh), (x0 + width, y0 + r * rh)], fill=(40, 40, 40), width=1)
        for c in range(cols + 1):
            self.draw.line([(x0 + c * cw, y0), (x0 + c * cw, y0 + rows * rh)], fill=(40, 40, 40), width=1)
        for r in range(rows):
            for c in range(cols):
                text = f"{self.rng.randint(1, 999)}.{self.rng.randint(0, 9)}" if r and c else self.rng.choice(WORDS)
                self.draw.text((x0 + c * cw + 6, y0 + r * rh + 5), text, font=f, fill=(20, 20, 20))
        self.add("Table", (x0, y0, x0 + width + 1, y0 + rows * rh + 1))
        self.y = y0 + rows * rh + 14

    def picture(self) -> None:
        w, h = self.rng.randint(300, 520), self.rng.randint(160, 240)
        x0, y0 = (SIZE[0] - w) / 2, self.y
        self.draw.rectangle([x0, y0, x0 + w, y0 + h], outline=(60, 60, 60), width=2, fill=(235, 240, 250))
        bars = self.rng.randint(4, 9)
        for i in range(bars):
            bh = self.rng.uniform(0.2, 0.9) * (h - 20)
            bx = x0 + 15 + i * (w - 30) / bars
            self.draw.rectangle([bx, y0 + h - 10 - bh, bx + (w - 30) / bars * 0.7, y0 + h - 10],
                                fill=(self.rng.randint(30, 200), 90, 160))
        self.add("Picture", (x0, y0, x0 + w + 1, y0 + h + 1))
        self.y = y0 + h + 10
        self.block("Caption", [f"Figure {self.number}: " + self.sentence(8)], font("DejaVuSans-Oblique.ttf", 14),
                   center=True, after=22)

    def render(self) -> None:
        body, width = font("DejaVuSerif.ttf", 16), SIZE[0] - 2 * MARGIN
        header = self.lines([f"rkdet labelled pages  -  page {self.number}"], font("DejaVuSans.ttf", 12), MARGIN, 30, 0)
        self.add("Page-header", header)
        if self.number % 2:
            self.block("Title", [self.sentence(5).title()], font("DejaVuSans-Bold.ttf", 30), center=True, after=28)
        pieces = ["text", "section", "text", "list", "picture", "text", "formula", "table", "text"]
        self.rng.shuffle(pieces)
        for piece in pieces:
            if self.y > SIZE[1] - 260:
                break
            if piece == "text":
                self.block("Text", self.wrap(self.rng.randint(30, 60), body, width), body)
            elif piece == "section":
                self.block("Section-header", [f"{self.number}.{self.rng.randint(1, 9)} " + self.sentence(4).title()],
                           font("DejaVuSans-Bold.ttf", 20), after=14)
            elif piece == "list":
                for _ in range(self.rng.randint(2, 3)):
                    self.block("List-item", ["\u2022 " + line for line in self.wrap(self.rng.randint(8, 16), body,
                                                                                   width - 30)][:2],
                               body, x=MARGIN + 20, after=8)
                self.y += 10
            elif piece == "picture":
                self.picture()
            elif piece == "formula":
                self.block("Formula", [f"y = sum_i w_i * x_i + b,  i = 1 .. {self.rng.randint(3, 99)}"],
                           font("DejaVuSerif-Italic.ttf", 20), center=True, after=20)
            elif piece == "table":
                self.table(self.rng.randint(3, 6), self.rng.randint(3, 5))
        foot = font("DejaVuSans.ttf", 11)
        self.add("Footnote", self.lines(["1 " + self.sentence(10)], foot, MARGIN, SIZE[1] - 110, 0))
        footer = self.lines([str(self.number)], font("DejaVuSans.ttf", 13), MARGIN, SIZE[1] - 55, 0, center=True)
        self.add("Page-footer", footer)


def write(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for n in range(1, PAGES + 1):
        page = Page(n, random.Random(1000 + n))
        page.render()
        name = f"page-{n:02d}.png"
        page.image.save(folder / name, optimize=True)
        images.append({"id": n, "file_name": name, "width": SIZE[0], "height": SIZE[1]})
        for cls, bbox in page.boxes:
            annotations.append({"id": len(annotations) + 1, "image_id": n, "category_id": cls, "bbox": bbox,
                                "area": round(bbox[2] * bbox[3], 1), "iscrowd": 0})
    doc = {"info": {"description": "rkdet labelled pages (calibration_data/make_labelled.py)", "version": "1"},
           "images": images, "annotations": annotations,
           "categories": [{"id": i, "name": c} for i, c in enumerate(CLASSES)]}
    (folder / "labels.json").write_text(json.dumps(doc, indent=1) + "\n")
    sums = [f"{hashlib.sha256((folder / p).read_bytes()).hexdigest()}  {p}"
            for p in sorted(q.name for q in folder.iterdir() if q.suffix in (".png", ".json"))]
    (folder / "SHA256SUMS").write_text("\n".join(sums) + "\n")


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:
        with tempfile.TemporaryDirectory() as tmp:
            write(Path(tmp))
            same = (Path(tmp) / "SHA256SUMS").read_text() == (OUT / "SHA256SUMS").read_text()
        print("same" if same else "different")
        return 0 if same else 1
    if argv[1:]:
        print("usage: make_labelled.py [--check]", file=sys.stderr)
        return 2
    write(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
