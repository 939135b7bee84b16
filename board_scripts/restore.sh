#!/bin/sh
# shellcheck source-path=SCRIPTDIR
# restore.sh - put back exactly the values pin.sh saved, verify them, remove the state file.
#
# Usage: restore.sh [-h]
# Idempotent: without a saved state it says so and exits 0. Works after a crash, a killed run or
# a dropped connection, because pin.sh saved the state before changing anything. Writes happen in
# the kernel's order (devfreq min/max without crossing, then governors, then set_freq and the rest);
# every value is read back, one JSON line per file (status "restored" or "failed"). A devfreq
# min/max held lower by a thermal cap that is still active (read back exactly at the OPP its
# cooling device's cur_state caps at) counts as restored, with a note: the kernel lifts the cap
# when the board cools.
#
# Environment: RKDET_ROOT, RKDET_STATE_DIR (as pin.sh; the state records the RKDET_ROOT it was
# saved for and restore refuses another one).
#
# Exit codes:
#   0  restored and verified (or nothing to restore)
#   1  some value did not read back; the state file is kept: run restore.sh again
#   2  bad input: unknown option, foreign or damaged state file, state saved for another root
#   3  permission denied, or a pinned job holds the board lock (lock.sh: its own restore puts the
#      board back): nothing was changed, the state file is kept

set -eu
RK_SCRIPT=restore
RK_DIR=$(dirname -- "$0")
. "$RK_DIR/lib.sh"
. "$RK_DIR/knobs.sh"
. "$RK_DIR/lock.sh"

case ${1:-} in
    -h | --help) rk_usage "$0" ;;
    '') ;;
    *) rk_die 2 "unknown argument '$1'; see restore.sh --help" ;;
esac
rk_check_env
rk_lock_refuse_if_held restore.sh
rk_restore_main
