"""The board's software stack as evidence: one typed record and one line for deploy's verdict.

Where each value comes from: the kernel, the rknpu driver (with where it was found) and the librknnrt
library's own version string from probe.sh (board.json); Python, numpy, rknn-toolkit-lite and what the
runtime itself reports (get_sdk_version) from rkdet-run (run.json "stack"); the toolkit that built the
model from the build's manifest (the `.rknn` header). Board text is untrusted: the line shows it with
`rkdet.textsafe.visible` and bounded.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

from rkdet.backends.registry import backend as descriptor
from rkdet.records.build import BuildInfo
from rkdet.records.probe import ProbeReport
from rkdet.records.run_info import RunInfo
from rkdet.textsafe import visible


@dataclass(frozen=True)
class BoardStack:
    kernel: Optional[str]
    rknpu_driver: Optional[str]
    rknpu_source: Optional[str]  # "debugfs" | "sysfs" | "dmesg"
    librknnrt: Optional[str]  # the library's version string ("librknnrt version: 2.5.0 (…)")
    rknn_toolkit_lite: Optional[str]
    python: Optional[str]
    numpy: Optional[str]
    runtime_reports: Optional[str]  # RKNNLite.get_sdk_version(), one line
    model_toolkit: Optional[str]  # the toolkit that built the .rknn

    @classmethod
    def from_evidence(cls, probe: ProbeReport, run: Optional[RunInfo], model_toolkit: Optional[str]) -> BoardStack:
        stack = (run.stack if run is not None else None) or {}

        def text(value: Any) -> Optional[str]:
            return None if value is None else str(value)[:200]

        return cls(kernel=probe.kernel, rknpu_driver=probe.rknpu_version, rknpu_source=probe.rknpu_source,
                   librknnrt=probe.runtime_version,
                   rknn_toolkit_lite=text(stack.get("rknn_toolkit_lite")) or probe.rknnlite_version,
                   python=text(stack.get("python")) or probe.python_version,
                   numpy=text(stack.get("numpy")) or probe.numpy_version,
                   runtime_reports=text(stack.get("sdk_version")),
                   model_toolkit=text(stack.get("model_toolkit")) or model_toolkit)

    def to_json(self) -> dict[str, Optional[str]]:
        return asdict(self)

    def line(self) -> str:
        """`stack: kernel 5.10.160 · rknpu 0.9.8 (debugfs) · librknnrt 2.5.0 (…) · …`, unknowns said."""
        def v(value: Optional[str]) -> str:
            return visible(value, 80) if value else "unknown"

        driver = v(self.rknpu_driver) + (f" ({self.rknpu_source})" if self.rknpu_source else "")
        runtime = v(self.librknnrt).replace("librknnrt version: ", "").replace("librknn_runtime version ", "")
        return (f"stack: kernel {v(self.kernel)} · rknpu driver {driver} · librknnrt {runtime} · "
                f"rknn-toolkit-lite {v(self.rknn_toolkit_lite)} · Python {v(self.python)} · numpy {v(self.numpy)} · "
                f"model built by toolkit {v(self.model_toolkit)}")


def model_expectations(build: BuildInfo, backend: str) -> list[str]:
    """rkdet-run's identity flags for the model deploy pushes: the fingerprint the `.rknn` carries
    (`--expect-fingerprint`, checked first) and the file's sha256 (`--expect-sha256`, checked when the
    model carries no fingerprint: older builds, or the ONNX for --backend onnxruntime)."""
    if not descriptor(backend).embeds_fingerprint:  # the ONNX: its sha256 only
        return ["--expect-sha256", build.onnx_sha256] if build.onnx_sha256 else []
    args: list[str] = []
    if build.embedded_fingerprint:
        args += ["--expect-fingerprint", build.embedded_fingerprint]
    if build.rknn_sha256:
        args += ["--expect-sha256", build.rknn_sha256]
    return args
