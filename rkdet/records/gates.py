"""Did a build pass its gates? The one typed record of it (`GateRecord`), kept in `manifest.json` `gates`.

Why its own module, at the bottom of the layers: convert writes the record, and deploy, fleet deploy,
self-check install and `rkdet diff` read it, so a build kept after a failed gate (`--keep-failed`:
`build/<name>-<platform>.failed`) can never pass for a good one. Those readers sit in different rooms
(board, diff) that may not import convert, so the record and its reader live here (stdlib only).

A manifest written before the record existed is judged from its `fidelity.gates` (a binding gate whose
`passed` is false); a manifest with neither says nothing, so the build counts as passed (as before).
A build folder's record is read with its manifest, once (rkdet.records.build `load_build`): a manifest
that cannot be read refuses the build, never counts as passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = "rkdet.gates/1"
ALLOW_FLAG = "--allow-failed-build"
MAX_TEXT = 500  # a manifest is a file: its gate texts are bounded before they reach a line


@dataclass(frozen=True)
class GateRecord:
    """A build's gate verdict: passed, or the first failing gate (its kind, subject and convert's message)."""

    passed: bool
    gate: str | None = None  # decision | cosine | score_collapse | score_recall | saturation | quantization | verify
    subject: str | None = None  # e.g. an output name; None for a whole-model gate
    message: str | None = None  # convert's one-line failure

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "passed": self.passed, "failed_gate": self.gate, "subject": self.subject,
                "message": self.message}

    @property
    def what(self) -> str:
        """`the decision gate` / `the cosine gate (out0)`: how a refusal or a verdict line names it."""
        return f"the {self.gate} gate" + (f" ({self.subject})" if self.subject else "")

    def caveat(self, build: str | Path) -> str:
        """The words every verdict of a run of this build carries once the user allowed it."""
        return f"build {Path(build).name} FAILED its gates ({self.what}): this verdict does not make it a good build"

    def refusal(self, build: str | Path, what: str) -> str:
        """One line for `what` (deploy, fleet deploy, self-check install) refusing the build."""
        detail = f": {self.message}" if self.message else ""
        return (f"{build}: this build failed {self.what} at convert{detail}; {what} refuses a failed build "
                f"(fix it: rkdet layers, rkdet convert --search) or pass {ALLOW_FLAG} to run it anyway, "
                "every verdict then saying so")


PASSED = GateRecord(True)


def from_manifest(doc: Any) -> GateRecord:
    """The record in a parsed manifest: its `gates` key, else derived from `fidelity.gates`, else passed."""
    if not isinstance(doc, dict):
        return PASSED
    rec = doc.get("gates")
    if isinstance(rec, dict) and isinstance(rec.get("passed"), bool):
        text = {k: (v[:MAX_TEXT] if isinstance(v, str) else None) for k, v in
                (("gate", rec.get("failed_gate")), ("subject", rec.get("subject")), ("message", rec.get("message")))}
        if rec["passed"]:
            return PASSED
        return GateRecord(False, text["gate"] or "unnamed", text["subject"], text["message"])
    fidelity = doc.get("fidelity")
    gates = fidelity.get("gates") if isinstance(fidelity, dict) else None
    for g in gates if isinstance(gates, list) else []:
        if isinstance(g, dict) and g.get("binding") is True and g.get("passed") is False:
            gate, subject = g.get("gate"), g.get("subject")
            return GateRecord(False, gate[:MAX_TEXT] if isinstance(gate, str) else "unnamed",
                              subject[:MAX_TEXT] if isinstance(subject, str) and gate != "decision" else None)
    return PASSED
