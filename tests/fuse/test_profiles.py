"""SoC profiles carry their sources; variants are well-formed and survive the daemon's JSON hand-over."""

from __future__ import annotations

import re

import pytest

from rkdet.emulator.sysfs_fuse import profile_from_json, profile_to_json
from rkdet.emulator.soc_sources import CHOICE
from rkdet.emulator.socs import RK3588_SPEED_BINS, all_variants, missing_sources, rk3588, source_of, value_keys

CITES = re.compile(r"\.dtsi?|\.c\b|defconfig|Kconfig|dump|dmesg|board|issue|TRM|rknn-toolkit2|uname|RKNPU2|kernel 4\.19|SDK"
                   r"|datasheet")


@pytest.mark.parametrize("profile", all_variants(), ids=lambda p: p.label)
def test_every_value_has_a_source(profile) -> None:
    assert missing_sources(profile) == []
    for key in value_keys(profile):
        source = source_of(profile, key)
        assert source.startswith(CHOICE) or CITES.search(source), (key, source)


def test_a_profile_without_a_source_is_caught() -> None:
    bare = rk3588()
    bare.sources.pop("cap.fdab0000.npu")
    assert missing_sources(bare) == ["cap.fdab0000.npu"]


@pytest.mark.parametrize("speed_bin", RK3588_SPEED_BINS)
def test_speed_bins_change_only_the_big_cores_top_opp(speed_bin: int) -> None:
    prof = rk3588(speed_bin=speed_bin)
    little, big4, big6 = prof.cpu_policies
    assert big4.frequencies_khz == big6.frequencies_khz and big4.frequencies_khz[-2:] == (2208000, speed_bin)
    assert little.frequencies_khz[-1] == 1800000
    assert f"opp-{speed_bin * 1000}" in source_of(prof, "cpufreq.policy4.frequencies_khz")


def test_unknown_speed_bin_is_refused() -> None:
    with pytest.raises(ValueError, match="2256000"):
        rk3588(speed_bin=2500000)


@pytest.mark.parametrize("profile", all_variants(), ids=lambda p: p.label)
def test_variants_survive_the_daemons_json(profile) -> None:
    assert profile_from_json(profile_to_json(profile)) == profile


@pytest.mark.parametrize("profile", all_variants(), ids=lambda p: p.label)
def test_plain_tree_shows_cpuidle_governors_and_image_options_as_sourced(profile, tmp_path) -> None:
    from rkdet.emulator.fake_tree import build_fake_tree

    root = build_fake_tree(profile, tmp_path / "root")
    idle = root / "sys/devices/system/cpu/cpu0/cpuidle"
    assert sorted(p.name for p in idle.iterdir()) == ["state0", "state1"]  # no cluster-sleep
    assert [(idle / s / "name").read_text() for s in ("state0", "state1")] == ["WFI\n", "cpu-sleep\n"]
    policy0 = root / "sys/devices/system/cpu/cpufreq/policy0"
    governors = (policy0 / "scaling_available_governors").read_text().split()
    if profile.kernel.startswith("5.10"):  # Rockchip's 5.10 defconfig: interactive, the default
        assert "interactive" in governors and (policy0 / "scaling_governor").read_text() == "interactive\n"
    elif profile.kernel.startswith("6.1"):  # RK3576/RK3562 BSP 6.1: schedutil (an emulator choice, sourced so)
        assert "schedutil" in governors and (policy0 / "scaling_governor").read_text() == "schedutil\n"
    else:  # RV1126 4.19
        assert governors == ["ondemand", "userspace", "performance"]
        assert (policy0 / "scaling_governor").read_text() == "ondemand\n"
    assert (root / "proc/sys/vm/compaction_proactiveness").exists() == profile.has_compaction_proactiveness
    assert (root / "sys/kernel/mm/transparent_hugepage/enabled").exists() == (profile.thp_enabled is not None)


def test_rk3576_npu_boot_variant_and_unverified_values_say_so() -> None:
    """The vendor kernel that boots RK3576's NPU at 300 MHz (issue 34) is a variant of the dtsi's OPP table
    (300 MHz..1 GHz); values checked against a file cite it (repository@commit path), and the ones no file
    was found for are marked unverified, never presented as verified."""
    from rkdet.emulator.soc_sources import UNVERIFIED
    from rkdet.emulator.socs import rk3562, rk3576

    slow = rk3576(npu_boot_hz=300000000)
    npu = slow.devfreq_of("npu")
    assert npu is not None and npu.boot_hz == 300000000 and slow.label == "rk3576[npu-boot-300]"
    assert rk3576().devfreq_of("npu").boot_hz == 1000000000  # type: ignore[union-attr]
    assert rk3576().devfreq_of("npu").frequencies_hz[-1] == 1000000000  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="1000000000"):
        rk3576(npu_boot_hz=950000000)  # issue 34's 950 MHz is not an OPP of rk3576.dtsi
    for prof, commit in ((rk3576(), "b66be74e62a6a8d7e9e8ff3e2713c438f010a928"),
                         (rk3562(), "8529d2cbe05efec239d92946a10cf02ec6d9b0d0")):
        node = prof.devfreq_of("npu")
        cited = source_of(prof, f"devfreq.{node.name}.frequencies_hz")  # type: ignore[union-attr]
        assert cited is not None and cited.startswith(f"armbian/linux-rockchip@{commit} ")
        assert not cited.startswith(UNVERIFIED) and prof.devfreq_of("gpu") is not None
        unverified = sorted(k for k in value_keys(prof) if (source_of(prof, k) or "").startswith(UNVERIFIED))
        assert unverified == [], unverified  # every value cites a file, or says it is an emulator choice
    assert rk3562().devfreq_of("npu").boot_hz == 1000000000  # type: ignore[union-attr]  # rockchip,init-freq
    assert [p.cpus for p in rk3576().cpu_policies] == [(0, 1, 2, 3), (4, 5, 6, 7)]
