"""A search that finishes: the budget on an injected clock, the cheapest-first order, the toolkit's own
progress/ETA parsed from its log, and the "loss accumulates" reading that swaps single-layer hybrids for a
labelled float build. Pure parts here (no toolkit); the real-toolkit search is in test_convert_search.py."""

from __future__ import annotations

import pytest

from rkdet.convert import toolkit_progress
from rkdet.errors import InputError
from rkdet.search.budget import Budget, cheapest_first, format_duration, parse_duration, relative_cost
from rkdet.search.run import loss_shape
from rkdet.search.space import FLOAT_LABEL, Space, float_variant, quantize_variants

A, N = "quantize.algorithm", "quantize.max_images"


class FakeClock:
    """A clock the test moves; nothing reads the wall clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("text, seconds", [("20m", 1200), ("1h30m", 5400), ("90s", 90), ("45", 2700),
                                           ("1h 5m", 3900), ("2.5m", 150)])
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "20x", "0m", "-5m", "m20"])
def test_bad_durations_are_one_line_input_errors(text: str) -> None:
    with pytest.raises(InputError, match="--search-budget"):
        parse_duration(text)


def test_cheapest_first_puts_mmse_last_and_keeps_the_config_first() -> None:
    variants = cheapest_first(quantize_variants(Space(), "normal", "channel", 24), "normal", 24)
    assert variants[0].changes == {} and [v.index for v in variants] == list(range(len(variants)))
    costs = [relative_cost(v, "normal", 24) for v in variants[1:]]
    assert costs == sorted(costs)
    first_mmse = next(i for i, v in enumerate(variants) if v.changes.get(A) == "mmse")
    assert all(v.changes.get(A) == "mmse" for v in variants[first_mmse:]) and first_mmse >= 12
    assert variants[1].changes == {N: 6}  # normal on a quarter of the images: the cheapest change
    # the same config always gives the same order (an estimate, not a measurement, orders)
    assert variants == cheapest_first(quantize_variants(Space(), "normal", "channel", 24), "normal", 24)


def test_a_config_that_is_mmse_already_tries_normal_next() -> None:
    variants = cheapest_first(quantize_variants(Space(), "mmse", "channel", 8), "mmse", 8)
    assert variants[0].changes == {} and variants[1].changes.get(A) == "normal"
    assert relative_cost(variants[1], "mmse", 8) < 1.0


def test_the_budget_measures_on_its_clock_and_predicts_from_what_ran() -> None:
    clock = FakeClock()
    budget = Budget(1200, clock).start()
    v0, v1 = quantize_variants(Space(), "normal", "channel", 24)[:2]
    assert budget.estimate(1.0) is None and budget.fits(20.0)  # nothing measured: it may start
    clock.now += 300
    budget.record(v0, 300, 1.0)
    assert budget.estimate(1.0) == 300 and budget.estimate(20.0) == 6000
    assert budget.fits(1.0) and not budget.fits(20.0)  # 900 s left: a normal build fits, an mmse one does not
    clock.now += 600
    budget.record(v1, 600, 1.0)
    assert budget.estimate(1.0) == 450 and budget.remaining() == 300 and not budget.fits(1.0)
    clock.now += 400
    assert budget.remaining() < 0 and not budget.fits(0.01)


def test_durations_format_for_the_progress_line() -> None:
    assert [format_duration(s) for s in (5, 150, 1500, 6360)] == ["5s", "2m30s", "25m", "1h46m"]


def test_the_toolkits_own_progress_and_eta_are_parsed_from_its_log(tmp_path) -> None:
    log = tmp_path / "worker.log"
    log.write_bytes(b"I Loading : 100%|\xe2\x96\x88\xe2\x96\x88| 128/128 [00:00<00:00, 27848.89it/s]\n"
                    b"I Quantizating :   2%|\xe2\x96\x8e     | 3/157 [24:51<2:07:40, 49.7s/it]\r"
                    b"I Quantizating :   3%|\xe2\x96\x8e     | 5/157 [25:00<1:46:00, 41.8s/it]\r")
    state = toolkit_progress.read(log)
    assert state is not None and (state.stage, state.done, state.total, state.percent) == ("Quantizating", 5, 157, 3)
    assert state.remaining == "1:46:00" and state.elapsed == "25:00"
    assert state.line() == "toolkit: Quantizating 5/157 (3%), 25:00 elapsed, about 1:46:00 left (the toolkit's estimate)"
    assert toolkit_progress.parse("I OpFusing 0:   0%|    | 0/100 [00:00<?, ?it/s]").remaining is None
    assert toolkit_progress.parse("W RKNN: nothing to see\n") is None
    assert toolkit_progress.read(tmp_path / "missing.log") is None


def test_an_accumulating_loss_is_told_from_a_single_bad_layer() -> None:
    # issue 24's detector: no single layer below 0.986, the entire model at 0.859 from hardswish_33
    acc = loss_shape([0.999, 0.986, 0.995], ("hardswish_33", 0.859), [0.53], 0.9)
    assert acc.accumulates and "accumulates" in acc.sentence() and "hardswish_33" in acc.sentence()
    one = loss_shape([0.999, 0.20, 0.995], ("Sub_3", 0.21), [0.5], 0.9)  # the fragile conv: one layer's fault
    assert not one.accumulates
    clean = loss_shape([0.999, 0.998], None, [0.99], 0.9)
    assert not clean.accumulates
    assert loss_shape([0.99, 0.95], None, [0.7], 0.9).accumulates  # only the outputs show it
    # per-layer cosines all fine, yet the gate fails (a detector's decisions are sensitive): nothing to single out
    spread = loss_shape([0.9998, 0.9999], None, [0.9996], 0.9, gate_failed=True)
    assert spread.accumulates and "the gate fails on the whole model's decisions" in spread.sentence()
    assert not loss_shape([0.9998, 0.20], None, [0.9996], 0.9, gate_failed=True).accumulates


def test_the_float_remedy_is_labelled_as_a_float_build() -> None:
    v = float_variant(7, clear_float_layers=True)
    assert v.stage == "float" and v.changes == {"quantize.force_fp16": True, "quantize.float_layers": []}
    assert v.label() == FLOAT_LABEL and "not INT8" in v.label()
    assert float_variant(7, clear_float_layers=False).changes == {"quantize.force_fp16": True}


_FAKE_TOOLKIT = """import os, sys, time
sys.stdin.readline()  # the host's "go"
sys.stdout.write("I Quantizating :   3%|#    | 5/157 [25:00<1:46:00, 41.8s/it]\\r")
sys.stdout.flush()
while not os.path.exists("release"):  # the test releases it once the host has reported the line
    time.sleep(0.02)
"""


def _fake_worker(tmp_path):
    import sys

    from rkdet.convert.hermetic import Worker

    (tmp_path / "home").mkdir()
    script = tmp_path / "fake_toolkit.py"
    script.write_text(_FAKE_TOOLKIT)
    return Worker(tmp_path, sys.executable, script, "job.json")


def test_a_watched_build_reports_the_toolkits_progress_line(tmp_path) -> None:
    from rkdet.convert.hermetic import BuildWatch

    seen: list[str] = []

    def progress(line: str) -> None:
        seen.append(line)
        (tmp_path / "release").write_text("")

    run = _fake_worker(tmp_path).go(timeout=120, watch=BuildWatch(progress=progress, interval=0.05))
    assert run.returncode == 0
    assert seen == ["toolkit: Quantizating 5/157 (3%), 25:00 elapsed, about 1:46:00 left (the toolkit's estimate)"]


def test_a_watched_build_is_stopped_at_its_deadline(tmp_path) -> None:
    from rkdet.convert.hermetic import BuildWatch, DeadlineReached

    clock = FakeClock()
    worker = _fake_worker(tmp_path)
    with pytest.raises(DeadlineReached, match="budget ran out during this build") as err:
        worker.go(timeout=120, watch=BuildWatch(deadline=clock.now, clock=clock, interval=0.05))
    assert err.value.exit_code == 4 and worker.proc.poll() is not None  # the worker is gone, not left running
