"""What a published build folder may say about the machine it was built on: versions, not paths.

Why: build folders are shared in reviews and audits. The toolkit's environment names the venv, the
hermetic folder (which holds the uid) and the user's home; the resolved config names where the model
and images sat; toolkit.log repeats the venv's site-packages path in every warning. Here those become
stable placeholders (`<work>` for the hermetic build folder, `<toolkit-python>` for the toolkit
interpreter's folder, `<venv>`, `<home>`, `<tmp>`) and config paths become bare file or folder names
(their contents are hashed in the manifest anyway).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from rkdet.config import PATH_KEYS, RkdetConfig


def _replacements(work: Path | None, python: str | None) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    if work is not None:
        pairs.append((str(work), "<work>"))
    if python:
        pairs.append((str(Path(python).parent), "<toolkit-python>"))
    for prefix in {sys.prefix, os.path.realpath(sys.prefix), sys.base_prefix}:
        pairs.append((prefix, "<venv>" if prefix != sys.base_prefix else "<python>"))
    pairs += [(tempfile.gettempdir(), "<tmp>"), (os.path.expanduser("~"), "<home>")]
    # longest first, so a path inside another is replaced as a whole
    return sorted({(a, b) for a, b in pairs if a and a != "/"}, key=lambda p: -len(p[0]))


def scrub(text: str, work: Path | None = None, python: str | None = None) -> str:
    """`text` with machine paths replaced by placeholders."""
    for path, placeholder in _replacements(work, python):
        text = text.replace(path, placeholder)
    return text


def environment(env: dict[str, str], wrappers: tuple[str, ...], work: Path, python: str) -> dict[str, Any]:
    """The hermetic environment as recorded: every value scrubbed, the work folder as `<work>`."""
    return {"env": {k: scrub(v, work, python) for k, v in sorted(env.items())},
            "wrappers": [scrub(w, work, python) for w in wrappers], "cwd": "<work>",
            "work": "a private folder under the temp dir whose path depends only on the build's inputs"}


def config_dict(cfg: RkdetConfig) -> dict[str, Any]:
    """The resolved config with its paths reduced to file or folder names."""
    doc = cfg.resolved_dict()
    for section, key in PATH_KEYS:
        if doc.get(section, {}).get(key):
            doc[section][key] = Path(doc[section][key]).name
    return doc
