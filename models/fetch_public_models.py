"""Fetch the real public models the tests convert (issue 34): PaddleOCR's text-direction classifier and
DB text detector, as shipped in PyPI's rapidocr_onnxruntime 1.4.4 wheel (Apache-2.0).

Why a script, stdlib only: .ci/setup runs it as a file before rkdet is importable. The wheel is fetched
hash-pinned (pip download --no-deps --require-hashes, requirements/public-models.txt) and never installed
(its dependencies would enter the lock); only the members listed in models/public_models.json are unzipped,
each checked against its recorded sha256 and put in place atomically (temporary name, then rename).
Idempotent: members already there with the recorded hash are kept and nothing is downloaded.

Usage: python models/fetch_public_models.py [CACHE]   (default $RKDET_PUBLIC_MODELS, else .venv/rkdet-public-models)
Exit:  0 present; 2 download failed or a hash differs (one line naming the index and what to do).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PINS = REPO / "models" / "public_models.json"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def die(msg: str) -> None:
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple")
    print(f"fetch_public_models.py: {msg} (index {index}); check access to it or set PIP_INDEX_URL to a mirror, "
          f"then re-run .ci/setup", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str]) -> int:
    pins = json.loads(PINS.read_text())
    cache = Path(argv[1] if len(argv) > 1 else os.environ.get("RKDET_PUBLIC_MODELS", REPO / ".venv" / "rkdet-public-models"))
    members: dict[str, dict[str, str]] = pins["members"]
    missing = [n for n, m in members.items() if not (cache / n).is_file() or sha256(cache / n) != m["sha256"]]
    if not missing:
        return 0
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".fetch.") as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                               "--no-deps", "--only-binary=:all:", "--require-hashes",
                               "-r", str(REPO / pins["requirement"]), "-d", tmp],
                              capture_output=True, text=True, timeout=600)
        wheel = Path(tmp) / pins["wheel"]
        if proc.returncode != 0 or not wheel.is_file():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            die(f"pip download of {pins['wheel']} failed ({last})")
        if sha256(wheel) != pins["wheel_sha256"]:
            die(f"{pins['wheel']}: sha256 differs from models/public_models.json")
        with zipfile.ZipFile(wheel) as z:
            for name in missing:
                part = Path(tmp) / (name + ".part")
                try:
                    part.write_bytes(z.read(members[name]["path"]))
                except KeyError:
                    die(f"{pins['wheel']} has no {members[name]['path']}")
                got = sha256(part)
                if got != members[name]["sha256"]:
                    die(f"{members[name]['path']}: sha256 {got}, expected {members[name]['sha256']}; not installed")
                part.chmod(0o644)
                os.replace(part, cache / name)
    print(f"fetch_public_models.py: {', '.join(missing)} in {cache}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
