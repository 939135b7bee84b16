#!/bin/sh
# shellcheck source-path=SCRIPTDIR
# pin.sh - fix the board's clocks and memory knobs for a deterministic, comparable run.
#
# Usage: pin.sh [-h]   (settings come from the environment, so run-pinned.sh passes them through)
# Before changing anything it saves every value it will change to $RKDET_STATE_DIR/pin.state
# (temp name, then mv). A second pin while that file exists keeps the original saved values and
# only adds files not saved yet. Then it pins, reads every knob back and prints one JSON line
# per knob: status "set", "skipped" (not present / not asked for, with a reason) or "failed"
# (write refused, or read back differs from what was pinned: thermal tables can lower a clock).
# Devfreq clocks are fixed with governor `performance` plus min_freq = max_freq (see knobs.sh).
# Under a thermal cap (the node's devfreq cooling device shows cur_state > 0) max_freq reads the
# cap, so the top OPP ("no user limit") is saved instead and the state and knob records say so
# ("thermal_capped", "thermal_cap_at_save"); a user limit below a simultaneous cap is not seen.
#
# Environment:
#   RKDET_ROOT          prefix of /sys and /proc (empty on a real board; a fake tree in tests)
#   RKDET_STATE_DIR     where the saved state lives (default /run/rkdet: survives a dropped
#                       connection or a killed run, not a reboot, which resets the knobs anyway)
#   RKDET_CPU_GOVERNOR  performance (default) | userspace | keep
#   RKDET_CPU_FREQ      max (default) | kHz from scaling_available_frequencies (userspace only)
#   RKDET_NPU_FREQ      max (default) | Hz from available_frequencies (e.g. 594000000 on RK3568,
#   RKDET_GPU_FREQ                    not 600000000) | keep; the same for GPU and DDR (dmc);
#   RKDET_DDR_FREQ                    a part the board lacks (RV1126: no GPU) is skipped
#   RKDET_COMPACTION    value for vm/compaction_proactiveness: 0 (default) | 0..100 | keep
#   RKDET_THP           keep (default) | never | madvise | always  (transparent hugepages)
#   RKDET_CPUIDLE_DEEP  keep (default) | disable  (disables cpuidle state1 and deeper on every CPU)
#
# Exit codes:
#   0  every asked-for knob set and read back
#   1  pinned, but some knob failed (write refused or read back differs); state saved: run restore.sh
#   2  bad input: unknown option or setting, frequency not in the node's list, foreign state file
#   3  permission denied or state not writable: nothing was changed (or it was rolled back); or a
#      pinned job holds the board lock (lock.sh): nothing was changed

set -eu
RK_SCRIPT=pin
RK_DIR=$(dirname -- "$0")
. "$RK_DIR/lib.sh"
. "$RK_DIR/knobs.sh"
. "$RK_DIR/lock.sh"

case ${1:-} in
    -h | --help) rk_usage "$0" ;;
    '') ;;
    *) rk_die 2 "unknown argument '$1'; settings are environment variables, see pin.sh --help" ;;
esac
rk_check_env
rk_lock_refuse_if_held pin.sh
rk_pin_main
