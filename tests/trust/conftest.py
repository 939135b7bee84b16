"""The trust tests (issue 21) use the converter's tiny models."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "convert"))
sys.path.insert(0, str(Path(__file__).parents[1] / "history"))
sys.path.insert(0, str(Path(__file__).parents[1] / "diff"))
