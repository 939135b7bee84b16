#!/bin/sh
# Regenerate the shipped calibration and golden document pages from pinned, DFSG-free sources.
#
# Why a script: the PNGs are derived data; anyone must be able to rebuild them byte for byte from
# named Debian bookworm packages and a named PyPI wheel, and see exactly which page became which file.
# Authoring time only (needs the Debian archive and PyPI); rkdet and CI never run it.
#
# Usage: calibration_data/make_dataset.sh [--check]
#   (no option)  rebuild, then replace calibration/, golden/, SHA256SUMS and PROVENANCE.md
#   --check      rebuild into a temporary folder and compare with the committed SHA256SUMS
#                (exit 0 same, 1 different, 2 trouble); nothing in the repo is touched
# Needs: apt-get, dpkg-deb, pdftoppm (poppler-utils), fc-match + fonts-urw-base35 (the PDFs of
# groff/mom and ReportLab use the unembedded PostScript base-14 fonts), unzip, sha256sum, and a
# Python with Pillow (default: <repo>/.venv/bin/python; override with PYTHON=...).
# Byte-identical output also needs the same poppler-utils, fonts and Pillow versions as recorded
# in PROVENANCE.md; a different renderer gives equally valid pages with different hashes.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
PY=${PYTHON:-$repo/.venv/bin/python}
LONG_SIDE=1200   # pixels; rkdet letterboxes to the model input at convert time, so keep pages as rendered

die() { echo "make_dataset.sh: $*" >&2; exit 2; }

mode=install
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  *) die "unknown option '$1' (use --check or nothing)" ;;
esac

for tool in apt-get dpkg-deb pdftoppm fc-match unzip sha256sum gzip; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found: install it (see the header of this script)"
done
[ -x "$PY" ] || die "Python '$PY' not found: run 'bash .ci/setup' or set PYTHON=/path/to/python (with Pillow)"
"$PY" -c "import PIL" 2>/dev/null || die "Pillow is missing in '$PY': run 'bash .ci/setup'"
case "$(fc-match -f '%{family}' Times-Roman)" in
  *Nimbus*) ;;
  *) die "Times-Roman does not resolve to URW Nimbus: 'apt-get install fonts-urw-base35' first" ;;
esac

# Debian bookworm packages: key|package[:arch]=version|sha256 of the .deb|license of its documentation
# (groff keeps its copyright file in groff-base, which is fetched for that file alone)
DEBS='groff|groff:amd64=1.22.4-10|c30d56dad45ab7fe8d57f545381203297b23fabd7475e5acd133f15dcaef2355|GPL-3.0-or-later
groffbase|groff-base:amd64=1.22.4-10|3de38b55bcccbdaf56c030d5011c6afc76bf6fdc8986ae4f1b2087eef0ddcad0|GPL-3.0-or-later
asy|asymptote-doc=2.85+ds-1|b2ae6e97c64ede66c1e41cc913f790b01188d198557203a2b3c500ba3495e6ca|GPL-3.0-or-later
gnuplot|gnuplot-doc=5.4.4+dfsg1-2|73fe1816a296594cf6a1d38528f8d740fd650f57a2cb62e029f7920fcd5b31f0|gnuplot (permissive; notice in PROVENANCE.md)
rl|python-reportlab-doc=3.6.12-1+deb12u1|f7d27c209eb0c2063b604f34414681d0694a83280aa1668f0bccc685f607131c|BSD-3-Clause
xfig|xfig-doc=1:3.2.8b-2|36b17319b7c3fd7c670bd24dbce393e0776e1a4347a9467166194c8baec5644f|xfig (MIT-style)
octave|octave-doc=7.3.0-2|b27897cc7e3d688daa5cb8f8d1ea47077f3fbd205ce32e22522200ff0c1eadd5|GPL-3.0-or-later
devref|developers-reference=12.18|0dba82f6fa16e373f2a84ad07e7971aa9264ad2e7d2ae46b37edbc9c5fd57e2e|GPL-2.0-or-later'

SKIMAGE_WHEEL=scikit_image-0.24.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
SKIMAGE_SHA256=fa27b3a0dbad807b966b8db2d78da734cb812ca4787f7fbb143764800ce2fa9c

# set|file stem|source key|path inside the .deb (or the wheel)|page (1-based; '-' for an image)|what the page shows
PAGES='calibration|page-001-mom|groff|usr/share/doc/groff-base/examples/mom/sample_docs.pdf.gz|1|title page
calibration|page-002-mom|groff|usr/share/doc/groff-base/examples/mom/sample_docs.pdf.gz|5|running header, section headings, body text, footer
calibration|page-003-mom|groff|usr/share/doc/groff-base/examples/mom/sample_docs.pdf.gz|10|two-column article with title block and footnote
calibration|page-004-mom|groff|usr/share/doc/groff-base/examples/mom/letter.pdf.gz|1|business letter
calibration|page-005-mom|groff|usr/share/doc/groff-base/examples/mom/slide-demo.pdf.gz|23|landscape slide: table, figure, equations
calibration|page-006-groff|groff|usr/share/doc/groff-base/pdf/pdfmark.pdf.gz|2|table of contents
calibration|page-007-asy|asy|usr/share/doc/asymptote/asymptote.pdf|1|title page with logo
calibration|page-008-asy|asy|usr/share/doc/asymptote/asymptote.pdf|16|text, code and figures
calibration|page-009-asy|asy|usr/share/doc/asymptote/asymptote.pdf|27|displayed formula and figure
calibration|page-010-asy|asy|usr/share/doc/asymptote/asymptote.pdf|45|colour chart figure
calibration|page-011-asy|asy|usr/share/doc/asymptote/asymptote.pdf|49|pattern figures with captions
calibration|page-012-gnuplot|gnuplot|usr/share/doc/gnuplot/gnuplot.pdf|21|part title, copyright text
calibration|page-013-gnuplot|gnuplot|usr/share/doc/gnuplot/gnuplot.pdf|39|ruled tables
calibration|page-014-rl|rl|usr/share/doc/python-reportlab-doc/reportlab-userguide.pdf|1|title page with logo
calibration|page-015-rl|rl|usr/share/doc/python-reportlab-doc/reportlab-userguide.pdf|6|chapter start, headings, text
calibration|page-016-rl|rl|usr/share/doc/python-reportlab-doc/reportlab-userguide.pdf|24|colour figures with captions, code
calibration|page-017-rl|rl|usr/share/doc/python-reportlab-doc/reportlab-userguide.pdf|59|tables
calibration|page-018-xfig|xfig|usr/share/doc/xfig/xfig_ref_en.pdf|3|introduction with screenshots
calibration|page-019-xfig|xfig|usr/share/doc/xfig/xfig_ref_en.pdf|29|symbol table
calibration|page-020-octave|octave|usr/share/doc/octave/octave.pdf|735|formulas, chapter heading
calibration|page-021-octave|octave|usr/share/doc/octave/octave.pdf|578|function reference with formulas
calibration|page-022-devref|devref|usr/share/developers-reference/developers-reference.pdf|13|chapter opening page
calibration|page-023-skimage|skimage|skimage/data/page.png|-|photographed book page, uneven light (gray source)
calibration|page-024-skimage|skimage|skimage/data/text.png|-|photographed handwritten formulas (gray source)
golden|page-101-rl|rl|usr/share/doc/python-reportlab-doc/reportlab-userguide.pdf|61|tables with headers
golden|page-102-asy|asy|usr/share/doc/asymptote/asymptote.pdf|26|large picture, text
golden|page-103-gnuplot|gnuplot|usr/share/doc/gnuplot/gnuplot.pdf|22|dense body text, section headers
golden|page-104-xfig|xfig|usr/share/doc/xfig/xfig_ref_en.pdf|4|screenshots and text
golden|page-105-octave|octave|usr/share/doc/octave/octave.pdf|744|formulas and text
golden|page-106-mom|groff|usr/share/doc/groff-base/examples/mom/sample_docs.pdf.gz|11|two-column article, page header
golden|page-107-devref|devref|usr/share/developers-reference/developers-reference.pdf|14|section headers, body text, page header
golden|page-108-groff|groff|usr/share/doc/groff-base/pdf/pdfmark.pdf.gz|3|introduction, body text'

mkdir -p "$here"
tmp=$(mktemp -d "$here/.make_dataset.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir -p "$tmp/debs" "$tmp/x" "$tmp/raw" "$tmp/out/calibration" "$tmp/out/golden" "$tmp/out/LICENSES" "$tmp/whl"

field() { printf '%s\n' "$1" | cut -d'|' -f"$2"; }

echo "downloading and verifying Debian packages" >&2
printf '%s\n' "$DEBS" | while IFS= read -r row; do
  key=$(field "$row" 1); spec=$(field "$row" 2); want=$(field "$row" 3)
  pkg=${spec%%=*}; pkg=${pkg%%:*}
  (cd "$tmp/debs" && apt-get download -q "$spec" >/dev/null 2>&1) \
    || die "apt-get download $spec failed: run 'apt-get update' on Debian bookworm (or fetch that version from snapshot.debian.org)"
  deb=$(ls "$tmp/debs/${pkg}"_*.deb)
  got=$(sha256sum "$deb" | cut -d' ' -f1)
  [ "$got" = "$want" ] || die "$spec: .deb sha256 $got, expected $want (a different build; refusing to continue)"
  mkdir -p "$tmp/x/$key" && dpkg-deb -x "$deb" "$tmp/x/$key"
  # Ship each package's copyright file: it carries the notices the licenses require to travel along.
  if [ -f "$tmp/x/$key/usr/share/doc/$pkg/copyright" ] && [ ! -L "$tmp/x/$key/usr/share/doc/$pkg" ]; then
    cp "$tmp/x/$key/usr/share/doc/$pkg/copyright" "$tmp/out/LICENSES/debian-$pkg.copyright"
  fi
done
[ -f "$tmp/out/LICENSES/debian-groff-base.copyright" ] || die "groff-base has no copyright file"
for lic in GPL-2 GPL-3; do
  [ -f "/usr/share/common-licenses/$lic" ] || die "/usr/share/common-licenses/$lic missing (Debian base-files)"
  cp "/usr/share/common-licenses/$lic" "$tmp/out/LICENSES/$lic"
done

echo "downloading and verifying $SKIMAGE_WHEEL" >&2
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --platform manylinux2014_x86_64 --python-version 3.11 -d "$tmp/whl" scikit-image==0.24.0 >/dev/null 2>&1 \
  || die "pip download scikit-image==0.24.0 failed: check access to PyPI"
got=$(sha256sum "$tmp/whl/$SKIMAGE_WHEEL" | cut -d' ' -f1)
[ "$got" = "$SKIMAGE_SHA256" ] || die "$SKIMAGE_WHEEL: sha256 $got, expected $SKIMAGE_SHA256"
mkdir -p "$tmp/x/skimage" && unzip -q "$tmp/whl/$SKIMAGE_WHEEL" 'skimage/data/page.png' 'skimage/data/text.png' \
  'scikit_image-0.24.0.dist-info/LICENSE.txt' -d "$tmp/x/skimage"
cp "$tmp/x/skimage/scikit_image-0.24.0.dist-info/LICENSE.txt" "$tmp/out/LICENSES/scikit-image-0.24.0.LICENSE.txt"

echo "rendering pages" >&2
printf '%s\n' "$PAGES" | while IFS= read -r row; do
  set_=$(field "$row" 1); stem=$(field "$row" 2); key=$(field "$row" 3)
  path=$(field "$row" 4); page=$(field "$row" 5)
  src="$tmp/x/$key/$path"
  [ -f "$src" ] || die "$path not found in source '$key'"
  case "$src" in
    *.pdf.gz) gzip -dc "$src" >"$tmp/raw/$stem.pdf"; src="$tmp/raw/$stem.pdf" ;;
  esac
  if [ "$page" = "-" ]; then
    cp "$src" "$tmp/raw/$stem.png"
  else
    pdftoppm -q -f "$page" -l "$page" -singlefile -scale-to "$LONG_SIDE" -png "$src" "$tmp/raw/$stem"
  fi
  printf '%s %s\n' "$tmp/raw/$stem.png" "$tmp/out/$set_/$stem.png"
done >"$tmp/pairs"

# Store every page as plain 8-bit RGB (gray sources too: rkdet rejects grayscale inputs), with
# no ICC profile, text chunks or timestamps, so the bytes depend only on the pixels and the Pillow
# version (and libpng stops warning about the malformed iCCP chunk of skimage's page.png).
"$PY" - "$tmp/pairs" <<'EOF'
import sys
from PIL import Image
for line in open(sys.argv[1], encoding="utf-8"):
    src, dst = line.split()
    with Image.open(src) as im:
        rgb = im.convert("RGB")
    rgb.info.clear()
    rgb.save(dst, format="PNG", optimize=True)
EOF

(cd "$tmp/out" && sha256sum calibration/*.png golden/*.png) >"$tmp/SHA256SUMS"

if [ "$mode" = check ]; then
  if cmp -s "$tmp/SHA256SUMS" "$here/SHA256SUMS"; then
    echo "make_dataset.sh: rebuilt images match SHA256SUMS"; exit 0
  fi
  diff "$here/SHA256SUMS" "$tmp/SHA256SUMS" >&2 || true
  echo "make_dataset.sh: rebuilt images differ from SHA256SUMS (see above)" >&2; exit 1
fi

# PROVENANCE.md: one row per file, generated from the same tables, so it cannot drift.
poppler=$(dpkg-query -W -f='${Version}' poppler-utils 2>/dev/null || pdftoppm -v 2>&1 | head -n1)
urw=$(dpkg-query -W -f='${Version}' fonts-urw-base35 2>/dev/null || echo unknown)
pillow=$("$PY" -c 'import PIL; print(PIL.__version__)')
{
  cat <<EOT
# calibration_data: provenance

Generated by \`calibration_data/make_dataset.sh\` (do not edit by hand; edit the tables in the script).

Real document pages for the default document-layout model (\`models/yolov8n-doclaynet.onnx\`):
\`calibration/\` (24 pages) is the quantization calibration set; \`golden/\` (8 pages) are held-out
inputs for golden references and are never used for calibration. Every file is 8-bit RGB PNG.
PDF pages were rendered with \`pdftoppm -scale-to $LONG_SIDE -png\` (long side $LONG_SIDE px, as rendered;
rkdet letterboxes to the model input at convert time) and re-encoded with Pillow as RGB without
metadata (no ICC profile, text chunks or timestamps). The two scikit-image pictures are stored at
their native size, converted from gray to RGB.

Renderer: poppler-utils $poppler, fonts-urw-base35 $urw (substitutes for the unembedded base-14
fonts), Pillow $pillow. \`SHA256SUMS\` covers every image; \`make_dataset.sh --check\` rebuilds and compares.

## Licenses

Every source is in Debian main (DFSG-free) or is BSD / public domain. The rendered pages are
unmodified renderings of the named pages; the corresponding source of each document is the Debian
source package of the named version (\`apt-get source <package>=<version>\`). \`LICENSES/\` holds each
package's Debian copyright file verbatim (\`debian-<package>.copyright\`, with all notices), the GPL-2
and GPL-3 texts (Debian base-files) and scikit-image's \`LICENSE.txt\`.

- groff 1.22.4 (mom examples, pdfmark manual): GPL-3.0-or-later, Copyright Free Software Foundation, Inc.
  (the groff package keeps its copyright file in groff-base: \`LICENSES/debian-groff-base.copyright\`).
- asymptote-doc 2.85: GPL-3.0-or-later, Copyright (C) 2004-2021 Andy Hammerlindl, John Bowman, Tom Prince.
- gnuplot-doc 5.4.4: the gnuplot license. Notice required with copies:
  "Copyright 1986-1993, 1998, 2004 Thomas Williams, Colin Kelley. Permission to use, copy, and
  distribute this software and its documentation for any purpose with or without fee is hereby
  granted, provided that the above copyright notice appear in all copies and that both that
  copyright notice and this permission notice appear in supporting documentation." (modified
  versions may be distributed only as patches; these pages are unmodified renderings).
- python-reportlab-doc 3.6.12: BSD-3-Clause, Copyright (c) 2000-2008, ReportLab Inc.
- xfig-doc 3.2.8b: the xfig license (MIT-style: use, copy, modify, distribute, with the copyright
  and permission notice kept), Copyright (c) 1985-1988 Supoj Sutanthavibul, 1989-2016 Brian V. Smith,
  2016-2021 Thomas Loimer and others.
- octave-doc 7.3.0: GPL-3.0-or-later, Copyright 1989-2022 The Octave Project Developers.
- developers-reference 12.18: GPL-2.0-or-later, Copyright 1997-2023 Christian Schwarz, Adam Di Carlo,
  Raphaël Hertzog, Andreas Barth, Lucas Nussbaum, Hideki Yamane, Holger Levsen.
- scikit-image 0.24.0 \`skimage/data/page.png\`: BSD-3-Clause, Copyright 2009-2022 the scikit-image
  team (wheel \`LICENSE.txt\`, "Files: *"); \`skimage/data/text.png\`: "No known copyright restrictions,
  released into the public domain" (docstring of \`skimage.data.text\`; originally Wikipedia "Corner.png").

## Files
EOT
  echo
  echo "| file | source | original file, page | shows | license | sha256 |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "$PAGES" | while IFS= read -r row; do
    set_=$(field "$row" 1); stem=$(field "$row" 2); key=$(field "$row" 3)
    path=$(field "$row" 4); page=$(field "$row" 5); what=$(field "$row" 6)
    if [ "$key" = skimage ]; then
      source="PyPI scikit-image 0.24.0 (wheel $SKIMAGE_WHEEL)"
      case "$path" in
        *page.png) lic="BSD-3-Clause (scikit-image team)" ;;
        *) lic="public domain (per skimage.data.text docstring)" ;;
      esac
      where="/$path"
    else
      drow=$(printf '%s\n' "$DEBS" | grep "^$key|")
      spec=$(field "$drow" 2); lic=$(field "$drow" 4)
      source="Debian bookworm ${spec%%=*} ${spec#*=}"
      source=$(printf '%s' "$source" | sed 's/:amd64//')
      where="/$path, page $page"
    fi
    sum=$(grep " $set_/$stem.png\$" "$tmp/SHA256SUMS" | cut -d' ' -f1)
    echo "| $set_/$stem.png | $source | $where | $what | $lic | \`$sum\` |"
  done
} >"$tmp/PROVENANCE.md"

# Install: each step is a rename inside calibration_data/, so a reader never sees half a set.
for d in calibration golden LICENSES; do
  [ -d "$here/$d" ] && mv "$here/$d" "$tmp/old-$d"
  mv "$tmp/out/$d" "$here/$d"
done
mv "$tmp/SHA256SUMS" "$here/SHA256SUMS"
mv "$tmp/PROVENANCE.md" "$here/PROVENANCE.md"
echo "make_dataset.sh: wrote $(wc -l <"$here/SHA256SUMS") images, SHA256SUMS and PROVENANCE.md" >&2
