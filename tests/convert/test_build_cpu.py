"""`RKDET_BUILD_CPU`: which one CPU a hermetic toolkit build is pinned to (recorded, never fingerprinted)."""

from __future__ import annotations

import os
import shutil

import pytest

from rkdet.convert import hermetic
from rkdet.errors import ConversionError


def test_unset_pins_the_lowest_allowed_cpu(monkeypatch):
    monkeypatch.delenv(hermetic.BUILD_CPU_VAR, raising=False)
    assert hermetic.build_cpu() == min(os.sched_getaffinity(0))


def test_a_named_allowed_cpu_is_the_one_in_the_wrapper(monkeypatch):
    highest = max(os.sched_getaffinity(0))
    monkeypatch.setenv(hermetic.BUILD_CPU_VAR, str(highest))
    assert hermetic.build_cpu() == highest
    if shutil.which("taskset"):
        prefix = hermetic._wrappers()
        assert prefix[prefix.index("taskset"):] == ("taskset", "-c", str(highest))


@pytest.mark.parametrize("value", ["9999", "one", "-1", "0,1"])
def test_a_cpu_this_process_may_not_use_is_one_line_naming_the_variable(monkeypatch, value):
    if value == "9999":
        assert 9999 not in os.sched_getaffinity(0)
    monkeypatch.setenv(hermetic.BUILD_CPU_VAR, value)
    with pytest.raises(ConversionError) as caught:
        hermetic.build_cpu()
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"RKDET_BUILD_CPU={value!r}")
    assert ",".join(map(str, sorted(os.sched_getaffinity(0)))) in message
