"""THE pinned-run recipe (rkdet.deploy.pinned_run.pinned_command / pinned_env): deploy's runs and the
bisection's are the same command line and environment, built from the backend's descriptor."""

from __future__ import annotations

from rkdet.backends.registry import REGISTRY
from rkdet.deploy.layout import RemoteLayout
from rkdet.deploy.pinned_run import job_env, output_to, pinned_command, pinned_env, runner_argv
from rkdet.deploy.settings import RunSettings

FP = "ab" * 32


def test_deploy_runs_the_backend_runner_inside_run_pinned() -> None:
    for name, desc in REGISTRY.items():
        layout = RemoteLayout.for_run("/w", FP, "run-1", name)
        s = RunSettings(backend=name, repeats=3, warmup=1, cpu_affinity=(4, 5), pin=True)
        argv = runner_argv(layout, s, ["--expect-sha256", "0" * 64])
        assert argv[:3] == ["sh", "/w/scripts/run-pinned.sh", "--"]
        # the runner's own output to its run folder's runner.log (never the job's log, which keeps the records)
        assert argv[3:8] == output_to(layout.runner_log, []) and layout.runner_log == "/w/runs/run-1/runner.log"
        assert layout.runner == f"/w/{desc.runner_program}"
        if desc.native_runner:  # rkdet-run-c: run directly (through the board's launcher if it names one), no python3
            assert argv[8:10] == ["sh", "-c"] and argv[11] == layout.runner and argv[12] == "--model"
        else:
            assert argv[8:11] == ["python3", layout.runner, "run"]
        assert argv[argv.index("--model") + 1] == f"{layout.model_dir}/{desc.model_file}"
        assert argv[argv.index("--backend") + 1] == name
        assert argv[-4:] == ["--cpu-affinity", "4,5", "--expect-sha256", "0" * 64]
        assert layout.fp32_inputs is desc.fp32_input
        unpinned = runner_argv(layout, RunSettings(backend=name, pin=False), [])
        assert unpinned[:5] == output_to(layout.runner_log, [])
        assert unpinned[5] == ("python3" if not desc.native_runner else "sh")
        assert "run-pinned.sh" not in " ".join(unpinned)


def test_a_native_runner_runs_itself_unless_the_board_names_a_launcher() -> None:
    """The native runner's command under a real sh: the program with its arguments as given (quoted), or, on
    a board whose session names NATIVE_EXEC_ENV (the emulated board's qemu-user launcher), that launcher
    with the program and its arguments."""
    import os
    import subprocess

    from rkdet.onboard.backend_table import NATIVE_EXEC_ENV

    native = next(d for d in REGISTRY.values() if d.native_runner)
    argv = native.runner_command("/bin/echo", ["a b", "$HOME", "'c"])
    env = {k: v for k, v in os.environ.items() if k != NATIVE_EXEC_ENV}
    assert subprocess.run(argv, capture_output=True, text=True, env=env).stdout == "a b $HOME 'c\n"
    launched = subprocess.run(argv, capture_output=True, text=True, env={**env, NATIVE_EXEC_ENV: "/bin/echo"})
    assert launched.stdout == "/bin/echo a b $HOME 'c\n"


def test_runner_settings_go_to_a_runner_that_takes_them_and_nowhere_else() -> None:
    """--runner-setting KEY=VALUE: the backend's declared flag with an allowed value; a key its runner does
    not take, a value it does not allow or a malformed item is one line (exit 2)."""
    import pytest

    from rkdet.deploy.settings import runner_settings
    from rkdet.errors import InputError

    takers = [d for d in REGISTRY.values() if d.runner_settings]
    others = [d for d in REGISTRY.values() if not d.runner_settings]
    assert takers and others
    for desc in takers:
        key, (flag, allowed) = next(iter(desc.runner_settings.items()))
        s = RunSettings(backend=desc.name, runner_settings=runner_settings(desc.name, (f"{key}={allowed[-1]}",)))
        argv = runner_argv(RemoteLayout.for_run("/w", FP, "run-1", desc.name), s)
        assert argv[argv.index(flag) + 1] == allowed[-1]
        assert RunSettings.from_json(s.to_json()) == s  # kept for --resume
        with pytest.raises(InputError, match=f"expected {key}="):
            runner_settings(desc.name, (f"{key}=bogus",))
        with pytest.raises(InputError, match="expected KEY=VALUE"):
            runner_settings(desc.name, (key,))
    for desc in others:
        with pytest.raises(InputError, match=f"--backend {desc.name} takes no such setting"):
            runner_settings(desc.name, ("want_float=0",))


def test_the_bisection_gets_the_same_recipe_with_its_fault_control() -> None:
    s = RunSettings(repeats=2, pin=True, pin_env={"RKDET_PIN_CPU": "max"}, fault="hang-after:1")
    argv = pinned_command("/w/bisect/rkdet-onboard.pyz", "/w/scripts", s, "/w/bisect/x/model.rknn", "/w/in", "/w/out",
                          core_mask="0_1", warmup=0, snapshot_every=0, affinity=False)
    assert argv == ["sh", "/w/scripts/run-pinned.sh", "--", "python3", "/w/bisect/rkdet-onboard.pyz", "run",
                    "--model", "/w/bisect/x/model.rknn", "--inputs", "/w/in", "--repeats", "2", "--warmup", "0",
                    "--core-mask", "0_1", "--backend", "rknnlite", "--snapshot-every", "0", "--out", "/w/out"]
    env = pinned_env(s, "/w", "/state")
    assert env == {"RKDET_PIN_CPU": "max", "RKDET_STATE_DIR": "/state", "RKDET_WORK_DIR": "/w",
                   "RKDET_EMU_FAULT": "hang-after:1"}
    layout = RemoteLayout.for_run("/w", FP, "run-1")
    assert job_env(s, layout, "/state") == env  # deploy's job environment is the same function's
