"""What a backend declares once, for every host-side step that runs a build with it (`Backend`).

Why a descriptor: deploy, the fleet, bisection, the self-check install, history and `rkdet diff` all
need to know, of the backend a run uses, which model file it loads, which preflight rows apply, how
its runner is started, which golden set judges it and what the emulator stages beside the model.
They ask the descriptor (rkdet.backends.registry.backend(name)); none of them compares backend names.
The facts the on-board program shares are rkdet.onboard.backend_table's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rkdet.errors import InputError

from rkdet.onboard.backend_table import NATIVE_EXEC_ENV, BackendFacts, reference

#: preflight rows a backend may need (rkdet.boardinfo.preflight implements them)
ROW_NPU_STACK = "npu-stack"  # the RKNN runtime library, its version against the toolkit, the compatibility table
ROW_LEGACY_NPU = "legacy-npu"  # a RKNPU1 SoC's legacy-runtime rows, judged before the SoC match
ROW_RUNTIME_IMPORT = "rknnlite-import"  # python3 on the board imports the runtime's Python package


@dataclass(frozen=True)
class Backend:
    """One backend: its on-board facts plus what the host does for it."""

    facts: BackendFacts
    preflight_rows: tuple[str, ...] = ()  # the rows rkdet.boardinfo.preflight checks for it
    probe_facts: tuple[str, ...] = ()  # the probe.sh facts those rows read (rkdet.records.probe.ProbeReport fields)
    emulated_double: bool = False  # the rkdet emulator has a test double of this runtime (ask the board whether it runs it)
    embeds_fingerprint: bool = False  # its model file carries rkdet's build fingerprint (`--expect-fingerprint`)
    runner_env: Mapping[str, str] = field(default_factory=dict)  # environment its runner needs on the board
    # the runner program deploy stages for it: the on-board zipapp, or a native program built per board
    # architecture (`rkdet runner build`, rkdet.backends.capi_build) that deploy pushes in its place
    runner_program: str = "rkdet-onboard.pyz"
    native_runner: bool = False  # the runner is a native program run directly (no python3, no `run` verb)
    one_mask_per_run: bool = False  # its runner takes one core mask and one context per run (a fleet splits sessions)
    # the runtime settings its runner takes from deploy (`--runner-setting KEY=VALUE`): KEY -> (flag, allowed values)
    runner_settings: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    # the run.json keys its runner records about it (rkdet.records.run_info.RunInfo reads them)
    run_json: tuple[str, ...] = ("backend", "backend_detail", "emulated", "emulates_npu", "stack", "backend_options")

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def model_file(self) -> str:
        """The build file its runner loads (model.rknn, model.onnx)."""
        return self.facts.model_file

    @property
    def takes_core_mask(self) -> bool:
        """It runs on the NPU, so an NPU core mask applies (a CPU backend runs `auto` only)."""
        return self.facts.on_npu

    @property
    def fp32_input(self) -> bool:
        """It is fed the model's float32 NCHW input (mean/std applied), not the NPU's uint8 NHWC."""
        return self.facts.fp32_input

    def reference(self, emulated: bool, emulates_npu: bool = False) -> str:
        """THE reference rule for its outputs (rkdet.onboard.backend_table.reference)."""
        return reference(self.facts, emulated, emulates_npu)

    def stages_onnx(self, emulated: bool) -> bool:
        """Whether the prepared ONNX goes to the board (with the emulator's model.emu.json): its own model,
        or what the emulated double computes."""
        return emulated or self.model_file == "model.onnx"

    def staged_models(self, emulated: bool) -> tuple[str, ...]:
        """The build's model files a board gets for it: its own, and the ONNX the emulated double computes."""
        extra = ("model.onnx",) if emulated and self.model_file != "model.onnx" else ()
        return (self.model_file, *extra)

    def runner_args(self, model: str, inputs: str, out: str, *, repeats: int, warmup: int, core_mask: str,
                    snapshot_every: int) -> list[str]:
        """The on-board runner's arguments (after `python3 rkdet-onboard.pyz run`) for one run of `model`."""
        return ["--model", model, "--inputs", inputs, "--repeats", str(repeats), "--warmup", str(warmup),
                "--core-mask", core_mask, "--backend", self.name, "--snapshot-every", str(snapshot_every),
                "--out", out]

    def setting_args(self, settings: Mapping[str, str]) -> list[str]:
        """The runner flags for `settings` (`--runner-setting KEY=VALUE`); InputError (exit 2) for a key its
        runner does not take or a value it does not allow."""
        args: list[str] = []
        for key, value in sorted(settings.items()):
            if key not in self.runner_settings:
                takes = ", ".join(self.runner_settings) or "none"
                raise InputError(f"--runner-setting {key}={value}: --backend {self.name} takes no such setting "
                                 f"(it takes: {takes})")
            flag, allowed = self.runner_settings[key]
            if value not in allowed:
                raise InputError(f"--runner-setting {key}={value}: expected {key}={' or '.join(allowed)}")
            args += [flag, value]
        return args

    def runner_command(self, program: str, args: Sequence[str]) -> list[str]:
        """The runner's full command line: the on-board program's `run` with `args`; a native runner
        directly, through the board's own launcher when the board names one (NATIVE_EXEC_ENV: the emulated
        board's qemu-user, rkdet.onboard.backend_table)."""
        if self.native_runner:
            launch = f'exec ${{{NATIVE_EXEC_ENV}:+"${NATIVE_EXEC_ENV}"}} "$0" "$@"'
            return ["sh", "-c", launch, program, *args]
        return ["python3", program, "run", *args]
