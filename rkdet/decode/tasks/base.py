"""What a decision task declares once: the shape every task module fills in (rkdet/decode/tasks/).

A task is what a model decides (detection, segmentation, classification; next semantic segmentation):
its layouts and decoder, its decision records (the reference summary, the diff's delta, the self-check
bundle's entry), what "the same decision" means with its thresholds (`SameDecision`), convert's
decision gate, and the lines the terminal and HTML presenters show for a changed decision. Callers ask
the registry (`rkdet.decode.tasks`) for a layout's or a record's task and never compare task names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from html import escape
from typing import Any, Protocol

import numpy as np

from rkdet.decode.common import CONF_THRESHOLD, Layout

Arrays = dict[str, np.ndarray]
Decided = Any  # what a task's decoder returns (Detections, a score vector, ...): only its task reads it


@dataclass(frozen=True)
class SameDecision:
    """What "the same decision" means for one task: how two outputs' decisions are paired."""

    task: str  # the task's name
    overlap: str  # "box IoU" | "mask IoU" | "top-k"
    min_iou: float | None  # a pair is the same object from this overlap on (None: no overlap)
    rule: str  # one phrase for reports and docs


class GateLimits(Protocol):
    """The fidelity section's limits a decision gate reads (rkdet.config.FidelitySection has them)."""

    @property
    def match_iou(self) -> float: ...

    @property
    def score_tolerance(self) -> float: ...

    @property
    def top_k(self) -> int: ...


@dataclass(frozen=True)
class GateCount:
    """Convert's decision gate on the golden inputs: per-input records, units judged, units agreeing."""

    per_input: dict[str, Any]
    units: int
    agree: int
    what: str  # "3/4 detections agree"


class DecisionFinding(Protocol):
    """One changed decision as the presenters show it (the diff's Findings tree holds these)."""

    @property
    def kind(self) -> str: ...

    @property
    def changed(self) -> bool: ...

    def terminal_text(self) -> str:
        """The terminal table's decision cell (plain text)."""

    def html(self) -> str:
        """The HTML table's decision cell (escaped HTML)."""


def marked_html(finding: DecisionFinding) -> str:
    """The HTML cell of a task with no richer one: its terminal text escaped, marked bad when it changed."""
    text = escape(finding.terminal_text())
    return f'<span class="bad">{text}</span>' if finding.changed else text


class DecisionTask(ABC):
    """One decision task; a module in rkdet/decode/tasks/ makes one and the registry lists it."""

    name: str  # the task's name in records ("task") and in SAME_DECISION
    record_kind: str  # the "kind" its diff records carry (segmentation shares detection's records)
    kinds: tuple[str, ...]  # the layouts (rkdet.decode.KINDS) whose decisions are this task's
    same: SameDecision
    decoder: str | None = None  # the --decoder value (rkdet.choices.DECODERS) that forces forced_layout

    def handles(self, layout: Layout) -> bool:
        return layout.kind in self.kinds

    def recognise(self, outputs: list[tuple[str, tuple[int, ...]]], input_hw: tuple[int, int] | None) -> Layout | None:
        """A layout of this task's own, from output names and shapes, tried after rkdet/decode/layouts.py's
        recognisers found nothing (a new task brings its layouts here); None: not this task's."""
        return None

    def forced_layout(self, outputs: list[tuple[str, tuple[int, ...]]], input_hw: tuple[int, int] | None) -> Layout | None:
        """This task's layout by shape alone, when `--decoder` names the task (`decoder`); None: does not fit."""
        return None

    @abstractmethod
    def decide(self, layout: Layout, arrays: Arrays, conf: float = CONF_THRESHOLD) -> Decided:
        """Decode one inference's outputs into this task's decision."""

    @abstractmethod
    def summary(self, decided: Decided) -> dict[str, Any]:
        """The reference decision as report.json records it (JSON-ready)."""

    @abstractmethod
    def bundle_summary(self, layout: Layout, arrays: Arrays) -> dict[str, Any]:
        """The self-check bundle's decision entry (small JSON the on-board program may read)."""

    @abstractmethod
    def compare(self, reference: Decided, candidate: Decided) -> dict[str, Any]:
        """The diff's decision delta between two decisions (JSON-ready)."""

    @abstractmethod
    def changed(self, delta: dict[str, Any]) -> bool:
        """Does a delta change the decision (what the diff's verdict counts)?"""

    @abstractmethod
    def finding(self, delta: dict[str, Any]) -> DecisionFinding:
        """The typed finding the presenters read, from a delta."""

    @abstractmethod
    def gate(self, layout: Layout, ref: dict[str, Arrays], sim: dict[str, Arrays], limits: GateLimits) -> GateCount:
        """Convert's decision gate: FP32 (`ref`) against the quantized simulator (`sim`) per golden input."""

    def gate_match_iou(self, limits: GateLimits) -> float | None:
        """The overlap the gate pairs decisions at, as fidelity.json records it."""
        return limits.match_iou

    def decided_outputs(self, layout: Layout, output_names: tuple[str, ...]) -> set[str]:
        """The outputs whose cosine gate the decision gate replaces once it judged."""
        return set(output_names)

    def plotted(self, summary: dict[str, Any]) -> Any:
        """Detections to draw over the input image from a reference summary, or None (nothing to draw)."""
        return None

    def plot_score(self, delta: dict[str, Any]) -> int | None:
        """How much a delta is worth drawing (the plot shows the worst input), or None: nothing to draw."""
        return None
