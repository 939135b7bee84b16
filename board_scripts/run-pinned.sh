#!/bin/sh
# shellcheck source-path=SCRIPTDIR
# run-pinned.sh - pin the board, run a command, and always restore afterwards.
#
# Usage: run-pinned.sh [--] COMMAND [ARG...]
# This is what `rkdet deploy` runs on the board. Restore runs from a trap on EXIT, INT, TERM, HUP
# and PIPE, so Ctrl-C, a kill or a dropped SSH connection (SIGHUP with a pty; without one, SIGPIPE
# at the next write to the dead channel) still put the board back; the command gets
# SIGTERM first (then SIGKILL after RKDET_KILL_GRACE seconds: digits only, default 10). Only SIGKILL of this
# wrapper skips the restore: the saved state stays in $RKDET_STATE_DIR and restore.sh repairs.
# Output: pin's JSON lines (script "pin"), the command's own output, run-pinned's lines (script
# "run-pinned": child started/exited, signal), restore's JSON lines (script "restore").
# The command runs when pin exits 0, or 1 (some knob did not read back: the pin report says
# which), unless RKDET_PIN_STRICT=1. Settings: the environment variables of pin.sh.
# One board, one holder: before pin it takes the board lock in $RKDET_STATE_DIR (see lock.sh),
# waiting up to RKDET_LOCK_TIMEOUT seconds (digits, default 0: one try) for another pinned job to
# finish, and lets it go after restore. Records (script "run-pinned"): lock "waiting", "taken_over"
# (a stale lock of a killed job), "acquired", "busy", "released". RKDET_LOCK_HOLDER, RKDET_LOCK_BUILD
# and RKDET_LOCK_RUN name this job in the holder record (the deploying user@host, build, run id).
#
# Exit codes:
#   the command's exit status, when pin succeeded and restore verified
#   125  the board lock is held by another job (lock record "busy"; nothing changed), pin refused
#        (nothing ran) or restore failed (the board may still be pinned)
#   3    the state directory (or its lock file) is not writable: nothing changed
#   129 / 130 / 141 / 143  stopped by SIGHUP / SIGINT / SIGPIPE / SIGTERM (restored)
#   2    usage error

set -eu
RK_SCRIPT=run-pinned
RK_DIR=$(dirname -- "$0")
. "$RK_DIR/lib.sh"
. "$RK_DIR/knobs.sh"
. "$RK_DIR/lock.sh"

case ${1:-} in
    -h | --help) rk_usage "$0" ;;
    --) shift ;;
esac
[ "$#" -gt 0 ] || rk_die 2 "usage: run-pinned.sh [--] COMMAND [ARG...]"
rk_check_env
# The grace is used in shell arithmetic, which would evaluate names (and, in bash/ksh, command
# substitutions in array subscripts): only digits pass, before anything changes on the board.
rp_grace=${RKDET_KILL_GRACE:-10}
case $rp_grace in
    '' | *[!0-9]* | ?????*) rk_die 2 "RKDET_KILL_GRACE must be a whole number of seconds (0-9999), got '$rp_grace'" ;;
esac

rp_wait=${RKDET_LOCK_TIMEOUT:-0}
case $rp_wait in
    '' | *[!0-9]* | ??????*) rk_die 2 "RKDET_LOCK_TIMEOUT must be a whole number of seconds (0-99999), got '$rp_wait'" ;;
esac

rp_child=
rp_forked=
rp_done=
rp_restore_rc=0

# rp_restore: stop the child if it still runs, then restore (once). Signals are ignored inside
# so a second Ctrl-C or a hang-up cannot cut the restore in half.
rp_restore() {
    [ -z "$rp_done" ] || return 0
    rp_done=1
    # A signal can land between the fork and `rp_child=$!`; the shell has set $! by then.
    if [ -z "$rp_child" ] && [ -n "$rp_forked" ]; then rp_child=${!:-}; fi
    if [ -n "$rp_child" ]; then
        rk_stop_child "$rp_child" $((rp_grace * 10))
        rp_child=
    fi
    set +e
    (trap '' INT TERM HUP PIPE; RK_SCRIPT=restore; set -e; rk_restore_main)
    rp_restore_rc=$?
    set -e
    rk_lock_release
}

# shellcheck disable=SC2317  # called from the traps below
rp_on_signal() {
    trap '' INT TERM HUP PIPE
    rk_emit signal "\"signal\":\"$1\",\"note\":\"stopping the command and restoring\""
    rp_restore
    trap - EXIT
    exit "$2"
}

# Nothing has changed yet: wait for the board (or give up) before any trap could restore.
rk_lock_acquire "$rp_wait"

trap 'rp_restore' EXIT
trap 'rp_on_signal HUP 129' HUP
trap 'rp_on_signal INT 130' INT
trap 'rp_on_signal TERM 143' TERM
trap 'rp_on_signal PIPE 141' PIPE

set +e
(trap '' INT TERM HUP PIPE; RK_SCRIPT=pin; set -e; rk_pin_main)
rp_pin_rc=$?
set -e
if [ "$rp_pin_rc" -ge 2 ] || { [ "$rp_pin_rc" -eq 1 ] && [ "${RKDET_PIN_STRICT:-0}" = 1 ]; }; then
    rp_restore
    trap - EXIT
    rk_die 125 "pin failed (exit $rp_pin_rc); the command was not run"
fi

# A background job would get /dev/null as stdin; hand it ours through fd 3.
exec 3<&0
rp_forked=1
"$@" <&3 3<&- &
rp_child=$!
exec 3<&-
rk_emit child "\"status\":\"started\",\"pid\":$rp_child"
set +e
wait "$rp_child"
rp_rc=$?
set -e
rp_child=
rp_forked=
rk_emit child "\"status\":\"exited\",\"exit\":$rp_rc"
rp_restore
trap - EXIT
if [ "$rp_restore_rc" -ne 0 ]; then
    rk_die 125 "restore failed (exit $rp_restore_rc) after the command exited $rp_rc; run restore.sh"
fi
exit "$rp_rc"
