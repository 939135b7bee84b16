"""How a board runs a build (`RunSettings`): built from a config in one place, stored whole in a run.

Why its own module: `rkdet deploy`, `rkdet demo` and a fleet scheduler all turn a config's `run`,
`board` and `tolerances` sections (plus flags) into the same record (`RunSettings.from_config`), and
`--resume` restores it whole from the run's record (`to_json` / `from_json`), not field by field.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from rkdet.backends.registry import backend as descriptor
from rkdet.onboard.backend_table import DEFAULT_BACKEND
from rkdet.config import DEFAULT_CONFIG, DeploySettings, build_deploy_settings, deploy_settings, load_config
from rkdet.errors import InputError
from rkdet.records.build import BuildRecord, load_build
from rkdet.tolerance import Tolerance

if TYPE_CHECKING:
    from rkdet.config import BoardSection


def pin_env_from_config(board_section: BoardSection) -> dict[str, str]:
    """pin.sh settings (environment variables) from the config's `board` section."""
    env = {
        "RKDET_CPU_GOVERNOR": board_section.cpu_governor,
        "RKDET_NPU_FREQ": str(board_section.npu_freq_hz or "max"),
        "RKDET_GPU_FREQ": str(board_section.gpu_freq_hz or "max"),
        "RKDET_DDR_FREQ": str(board_section.ddr_freq_hz or "max"),
        "RKDET_COMPACTION": "0" if board_section.compaction_off else "keep",
        "RKDET_THP": "never" if board_section.thp_never else "keep",
        "RKDET_CPUIDLE_DEEP": "disable" if board_section.cpuidle_deep_off else "keep",
    }
    if board_section.cpu_freq_khz:
        env["RKDET_CPU_FREQ"] = str(board_section.cpu_freq_khz)
    return env


@dataclass(frozen=True)
class RunOverrides:
    """The run flags a command was given (`--repeats --warmup --core-mask ... --lock-timeout`): each one
    given (not None) wins over the config's value in `RunSettings.from_config`. One record, so `rkdet
    deploy`, every board of `rkdet fleet deploy` and `rkdet demo` pass them whole, never field by field."""

    repeats: int | None = None
    warmup: int | None = None
    core_mask: str | None = None
    contexts: int | None = None
    backend: str | None = None
    no_pin: bool = False
    sudo: bool | None = None
    workdir: str | None = None
    state_dir: str | None = None
    keep: bool = False
    fault: str | None = None  # --emulator-fault
    emulate_npu: int | None = None  # --emulator-npu
    timeout: float = 3600.0
    lock_timeout: int = 0
    runner_settings: tuple[str, ...] = ()  # --runner-setting KEY=VALUE (the backend's runner's own settings)
    inputs: Path | None = None  # --inputs FOLDER: run these fed tensors instead of the build's golden inputs

    # the click option names that differ from the field names
    _FLAGS: ClassVar[dict[str, str]] = {"fault": "emulator_fault", "emulate_npu": "emulator_npu",
                                        "runner_settings": "runner_setting"}

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> RunOverrides:
        """The record from parsed click options (absent or None ones keep their defaults)."""
        values = {f.name: options.get(cls._FLAGS.get(f.name, f.name)) for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if v is not None})


#: said when a run asks for core mask auto (config run.core_mask or --core-mask): rkdet's default is core 0
AUTO_WARNING = ("warning: core mask auto: rknn_api.h documents RKNN_NPU_CORE_AUTO as \"run on NPU core randomly\"; "
                "which core ran is not recorded, so a difference between runs may be a different core. "
                "Name one (run.core_mask: \"0\") to repeat a run where it ran")


@dataclass(frozen=True)
class RunSettings:
    """How the board runs the model; defaults come from the config's `run` and `board` sections."""

    repeats: int = 10
    warmup: int = 2
    core_mask: str = "0"  # one mask, or a comma list (cells of one pinned session); core 0 unless asked (config.RunSection)
    contexts: int = 1  # > 1: threaded runtime contexts checked against the sequential run
    backend: str = DEFAULT_BACKEND
    snapshot_every: int = 5
    cpu_affinity: tuple[int, ...] | None = None
    pin: bool = True
    pin_env: dict[str, str] = field(default_factory=dict)
    sudo: bool = False
    workdir: str | None = None
    state_dir: str | None = None
    keep: bool = False
    fault: str | None = None  # TEST CONTROL for the emulated runtime (RKDET_EMU_FAULT), never on real boards
    emulate_npu: int | None = None  # TEST CONTROL: the emulated runtime's NPU mode, K elements one LSB off
    timeout: float = 3600.0
    lock_timeout: int = 0  # seconds the pinned job waits for the board lock (rkdet.boardinfo.lock)
    tolerances: Tolerance = field(default_factory=Tolerance)
    runner_settings: dict[str, str] = field(default_factory=dict)  # the backend's runner settings (descriptor)
    inputs: str | None = None  # --inputs: a host folder of fed tensors run instead of the golden inputs (no reference)

    @classmethod
    def from_config(cls, sections: DeploySettings, overrides: RunOverrides | None = None) -> RunSettings:
        """The one constructor from a config's run/board/tolerances sections; a flag given (not None)
        wins over its config value."""
        run, board = sections.run, sections.board
        o = overrides or RunOverrides()
        chosen = o.backend or run.backend
        # the config's NPU core mask is the NPU's: `--backend onnxruntime` runs on the CPU, which has none
        # (a --core-mask given with it is still passed on, and refused by rkdet-run in one line)
        config_mask = run.core_mask if descriptor(chosen).takes_core_mask else "auto"
        return cls(repeats=o.repeats or run.repeats, warmup=run.warmup if o.warmup is None else o.warmup,
                   core_mask=o.core_mask or config_mask, contexts=o.contexts or run.contexts,
                   backend=chosen,
                   snapshot_every=run.snapshot_every,
                   cpu_affinity=tuple(run.cpu_affinity) if run.cpu_affinity else None,
                   pin=board.pin and not o.no_pin, pin_env=pin_env_from_config(board),
                   sudo=board.sudo if o.sudo is None else o.sudo, workdir=o.workdir or board.workdir,
                   state_dir=o.state_dir, keep=o.keep, fault=o.fault, emulate_npu=o.emulate_npu,
                   timeout=o.timeout, lock_timeout=o.lock_timeout, tolerances=sections.tolerances,
                   runner_settings=runner_settings(chosen, o.runner_settings),
                   inputs=None if o.inputs is None else str(o.inputs))

    def to_json(self) -> dict[str, Any]:
        """Every field, JSON-ready (`from_json` gives back an equal record)."""
        doc = asdict(self)
        doc["cpu_affinity"] = list(self.cpu_affinity) if self.cpu_affinity is not None else None
        doc["pin_env"] = dict(self.pin_env)
        doc["runner_settings"] = dict(self.runner_settings)
        doc["tolerances"] = self.tolerances.to_json()
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], *, base: RunSettings | None = None,
                  where: str = "settings") -> RunSettings:
        """A record from `to_json`'s mapping; fields it lacks (an older record) come from `base`.
        A wrong type is InputError naming `where` and the field."""
        if not isinstance(doc, Mapping):
            raise InputError(f"{where}: expected a JSON object, got {type(doc).__name__}")
        base = base or cls()
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {k: v for k, v in doc.items() if k in known}
        if "tolerances" in values:
            values["tolerances"] = Tolerance.from_mapping(values["tolerances"], where=f"{where}: tolerances")
        if values.get("cpu_affinity") is not None:
            values["cpu_affinity"] = tuple(values["cpu_affinity"])
        settings = replace(base, **values)
        settings._check(where)
        return settings

    def _check(self, where: str) -> None:
        expected: dict[str, tuple[type, ...]] = {
            "repeats": (int,), "warmup": (int,), "core_mask": (str,), "contexts": (int,), "backend": (str,), "snapshot_every": (int,),
            "pin": (bool,), "pin_env": (dict,), "sudo": (bool,), "keep": (bool,), "timeout": (int, float),
            "lock_timeout": (int,),
        }
        optional: dict[str, tuple[type, ...]] = {"cpu_affinity": (tuple,), "workdir": (str,), "state_dir": (str,),
                                                 "fault": (str,), "emulate_npu": (int,), "inputs": (str,)}
        for name, types in expected.items():
            value = getattr(self, name)
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                raise InputError(f"{where}: {name} has the wrong type ({type(value).__name__})")
        for name, types in optional.items():
            value = getattr(self, name)
            if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
                raise InputError(f"{where}: {name} has the wrong type ({type(value).__name__})")
        for name in ("pin_env", "runner_settings"):
            value = getattr(self, name)
            if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
                raise InputError(f"{where}: {name} must map names to strings")
        descriptor(self.backend).setting_args(self.runner_settings)  # a setting its runner takes, an allowed value


def runner_settings(backend: str, given: tuple[str, ...]) -> dict[str, str]:
    """`--runner-setting KEY=VALUE` flags as a mapping, checked against the backend's runner (exit 2 naming
    the flag otherwise)."""
    found: dict[str, str] = {}
    for item in given:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"--runner-setting {item!r}: expected KEY=VALUE")
        found[key.strip()] = value.strip()
    descriptor(backend).setting_args(found)
    return found


def resolve_build(config_path: Path | None, build: Path | BuildRecord | None) -> tuple[BuildRecord, DeploySettings]:
    """THE resolution of a build and its settings for `rkdet deploy`, `rkdet fleet deploy` and `rkdet
    layers --board`: the build folder loaded once (rkdet.records.build: a missing, unreadable or invalid
    manifest, or an incomplete folder, is one line naming it, exit 2) and the run/board/tolerances
    settings: --config when given, else the build's own resolved config (read from its record), else
    the default config (whose name and first platform also name the build). A given --build without
    --config is checked before its settings are read; a build already loaded (`rkdet layers --board`:
    its rebuild loaded it) is not read again."""
    if config_path is None and build is not None:
        record = build if isinstance(build, BuildRecord) else load_build(build)
        return record, build_deploy_settings(record)
    settings, folder = settings_source(config_path, build.folder if isinstance(build, BuildRecord) else build)
    return build if isinstance(build, BuildRecord) else load_build(folder), settings


def settings_source(config_path: Path | None, build: Path | None) -> tuple[DeploySettings, Path]:
    """Run/board/tolerances settings and the build folder: --config when given, else the build's own
    resolved config, else the default config (whose name and first platform also name the build)."""
    if config_path is None and build is not None:
        return build_deploy_settings(build), build
    cfg = load_config(config_path or DEFAULT_CONFIG)
    return deploy_settings(cfg, config_path or DEFAULT_CONFIG), build or Path("build") / f"{cfg.name}-{cfg.target.platforms[0]}"
