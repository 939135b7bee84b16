"""JUnit XML of a fleet run (`--junit FILE`), so CI servers show fleet results natively.

One <testsuite> per fleet run, one <testcase> per board × cell (classname `rkdet.fleet.<board>`,
name the cell): passed when the cell is in the majority class and its deploy was within tolerance;
<failure> when it departs from the majority (message: the first difference against the majority)
or its deploy said 1; <error> when the board or cell could not be run (the reason); <skipped> for a
core mask the SoC lacks. Untrusted text (board names, reasons) is escaped by xml.etree and stripped
of characters XML 1.0 cannot carry.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from rkdet.fleets.run.records import COMPLETE, SKIPPED, CellResult, FleetResult
from rkdet.textsafe import plain_value, xml_text

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _text(value: object, limit: int = 2000) -> str:
    """The one sanitiser (`textsafe.xml_text`: controls and bidi characters made visible), cut to `limit`."""
    return _NOT_XML.sub("?", xml_text(value))[:limit]


def _failure(fleet: FleetResult, cell: CellResult) -> str | None:
    """Why a completed cell fails: outside tolerance, or not in the majority class (with the difference)."""
    reasons = []
    if cell.deploy_exit not in (0, None):
        reasons.append(f"deploy verdict: {cell.verdict}")
    majority = fleet.classes[0].name if fleet.classes else None
    if cell.klass is not None and majority is not None and cell.klass != majority:
        diff = next((d for d in fleet.differences if d.a == majority and d.b == cell.klass), None)
        reasons.append(f"determinism class {cell.klass}, not the majority {majority}"
                       + (f": {diff.line()}" if diff else ""))
    return "; ".join(reasons) or None


def render_junit(fleet: FleetResult) -> bytes:
    cases = [(b, c) for b in fleet.boards for c in b.cells]
    failures = errors = skipped = 0
    suite = ET.Element("testsuite", name=f"rkdet fleet {fleet.fleet_run_id}")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="verdict", value=_text(fleet.verdict))
    ET.SubElement(props, "property", name="exit_code", value=str(fleet.exit_code))
    for b, c in cases:
        case = ET.SubElement(suite, "testcase", classname=_text(f"rkdet.fleet.{b.board.name}", 200),
                             name=_text(c.cell.name, 200), time=f"{c.seconds:.3f}")
        if c.status == SKIPPED:
            skipped += 1
            ET.SubElement(case, "skipped", message=_text(plain_value(c.reason)))
        elif c.status != COMPLETE:
            errors += 1
            el = ET.SubElement(case, "error", message=_text(c.reason or b.reason or c.status), type=c.status)
            el.text = _text(f"board {b.board.name} ({b.board.address}): {plain_value(b.reason or c.reason)}", 8000)
        else:
            why = _failure(fleet, c)
            if why is not None:
                failures += 1
                el = ET.SubElement(case, "failure", message=_text(why), type="determinism")
                el.text = _text(f"{why}\nrun folder: {c.folder}", 8000)
        if c.folder:
            ET.SubElement(case, "system-out").text = _text(f"run folder: {c.folder}\nclass: {plain_value(c.klass)}", 4000)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    suite.set("time", f"{fleet.seconds:.3f}")
    root = ET.Element("testsuites", name="rkdet fleet deploy", tests=str(len(cases)), failures=str(failures),
                      errors=str(errors), skipped=str(skipped), time=f"{fleet.seconds:.3f}")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
