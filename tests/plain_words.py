"""What a reader must never see in a report: Python's spellings of values (issue 36 §2).

`python_spellings(text)` lists every `None`, `True`, `False`, `[]`, `{}` and repr-quoted word
(`'emulated'`) in the human-readable text of a terminal log, an HTML page (its visible text: tags,
styles, scripts and embedded images left out) or a JUnit file's attributes and text. The scan tests call
it on the reports of a demo-like deploy, a failed build's deploy and a fleet run.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET

SPELLINGS = re.compile(r"\bNone\b|\bTrue\b|\bFalse\b|\[\s*\]|\{\s*\}|(?<![\w'])'[\w.\-/ ]+'(?![\w'])")


def html_visible_text(page: str) -> str:
    """The text a browser shows (alt texts and titles included), markup removed."""
    page = re.sub(r"(?is)<(style|script)\b.*?</\1>", " ", page)
    page = re.sub(r'src="data:[^"]*"', "", page)
    attrs = " ".join(m.group(2) for m in re.finditer(r'\b(alt|title)="([^"]*)"', page))
    return html.unescape(re.sub(r"<[^>]+>", " ", page) + " " + attrs)


def junit_text(xml: str) -> str:
    """Every attribute value and text node of a JUnit file."""
    root = ET.fromstring(xml)
    parts = []
    for el in root.iter():
        parts.extend(str(v) for v in el.attrib.values())
        parts.extend(t for t in (el.text, el.tail) if t and t.strip())
    return "\n".join(parts)


def python_spellings(text: str) -> list[str]:
    """Each Python spelling in `text`, with a little context (empty when the text reads as prose)."""
    return [text[max(m.start() - 40, 0): m.end() + 20].replace("\n", " ") for m in SPELLINGS.finditer(text)]
