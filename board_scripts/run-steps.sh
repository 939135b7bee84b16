#!/bin/sh
# shellcheck source-path=SCRIPTDIR
# run-steps.sh - run several commands one after the other, as one job (one pinned session).
#
# Usage: run-steps.sh N1 COMMAND1 [ARG...] N2 COMMAND2 [ARG...] ...
# Each step is a count, then exactly that many words: the command and its arguments (no
# separator word, so no argument can be mistaken for one). `rkdet deploy --backends A,B` runs
# `run-pinned.sh -- run-steps.sh ...` so both backends' runners run under ONE pin and ONE restore.
# Every step runs, also after one failed (each step's result set is judged on its own); a signal
# (TERM, INT, HUP, PIPE) stops the running step (SIGTERM, then SIGKILL half a second before
# RKDET_KILL_GRACE runs out: the step never outlives this script, which run-pinned.sh gives that grace) and
# starts no other. Records (script "run-steps"): step {"index":I,"status":"started","pid":P} and
# {"index":I,"status":"exited","exit":RC} (0-based index), then result. Before and after each step a
# clocks record {"index":I,"at":"before"|"after","clocks":{"cpufreq/policy0":{"governor","min","max","cur"},
# "devfreq/<node>":{...}}} (kHz for cpufreq, Hz for devfreq; null where a node is unreadable), read from the
# nodes that exist: the state every step ran in, for a runner that takes no snapshots of its own.
#
# Exit codes:
#   0    every step exited 0
#   N    the highest exit status of a step (1 from a runner: its results differ)
#   129 / 130 / 141 / 143  stopped by SIGHUP / SIGINT / SIGPIPE / SIGTERM
#   2    usage error (nothing ran)

set -eu
RK_SCRIPT=run-steps
RK_DIR=$(dirname -- "$0")
. "$RK_DIR/lib.sh"

case ${1:-} in
    -h | --help) rk_usage "$0" ;;
esac

# Check every count before anything runs: digits only, at least 1, never past the words left.
rs_left=$#
rs_steps=0
rs_skip=0
for rs_word in "$@"; do
    if [ "$rs_skip" -gt 0 ]; then rs_skip=$((rs_skip - 1)); continue; fi
    case $rs_word in
        '' | *[!0-9]* | ?????*) rk_die 2 "usage: run-steps.sh N COMMAND [ARG...] ... (a count of words, got '$rs_word')" ;;
    esac
    rs_left=$((rs_left - 1))
    if [ "$rs_word" -lt 1 ] || [ "$rs_word" -gt "$rs_left" ]; then
        rk_die 2 "step $rs_steps: count $rs_word, but $rs_left word(s) follow"
    fi
    rs_skip=$rs_word
    rs_left=$((rs_left - rs_word))
    rs_steps=$((rs_steps + 1))
done
[ "$rs_steps" -gt 0 ] || rk_die 2 "usage: run-steps.sh N COMMAND [ARG...] ..."

rs_child=
rs_worst=0
rs_grace=${RKDET_KILL_GRACE:-10}  # run-pinned.sh's (it checked it: digits only); anything else: its default
case $rs_grace in
    '' | *[!0-9]* | ?????*) rs_grace=10 ;;
esac

# rs_clocks INDEX AT: one clocks record of every cpufreq policy and devfreq node found (by name, never by
# index), each read by lib.sh's one clock reader (the one probe.sh reads them with).
rs_clocks() {
    rs_body=
    rk_cpu_policies
    for rs_dir in $RK_V; do
        rk_clock_read cpufreq "$rs_dir"
        rs_body="$rs_body${rs_body:+,}$(rk_js "cpufreq/${rs_dir##*/}"):{$(rk_clock_json '')}"
    done
    rk_devfreq_nodes
    for rs_entry in $RK_V; do
        rs_name=${rs_entry%%:*}
        rk_clock_read devfreq "sys/class/devfreq/$rs_name"
        rs_body="$rs_body${rs_body:+,}$(rk_js "devfreq/$rs_name"):{$(rk_clock_json '')}"
    done
    rk_emit clocks "\"index\":$1,\"at\":\"$2\",\"clocks\":{$rs_body}"
}

# shellcheck disable=SC2317  # called from the traps below
rs_on_signal() {
    trap '' INT TERM HUP PIPE
    rk_emit signal "\"signal\":\"$1\",\"note\":\"stopping the running step; no further step starts\""
    if [ -n "$rs_child" ]; then
        # half a second before run-pinned.sh's own grace (for this script) runs out, so the step never
        # outlives this script and the restore after it
        rk_stop_child "$rs_child" $((rs_grace * 10 - 5))
        rs_rc=$rk_stop_rc
        rk_emit step "\"index\":$rs_index,\"status\":\"exited\",\"exit\":$rs_rc"
    fi
    rk_emit result "\"status\":\"stopped\",\"exit\":$2"
    exit "$2"
}
trap 'rs_on_signal HUP 129' HUP
trap 'rs_on_signal INT 130' INT
trap 'rs_on_signal TERM 143' TERM
trap 'rs_on_signal PIPE 141' PIPE

exec 3<&0
rs_index=0
while [ "$#" -gt 0 ]; do
    rs_n=$1
    shift
    rs_clocks "$rs_index" before
    # the step's words are the first rs_n of "$@": a subshell keeps only them (no eval), then execs
    (
        rs_total=$#
        rs_i=0
        for rs_word in "$@"; do
            if [ "$rs_i" -lt "$rs_n" ]; then set -- "$@" "$rs_word"; fi
            rs_i=$((rs_i + 1))
        done
        shift "$rs_total"
        exec "$@" <&3 3<&-
    ) &
    rs_child=$!
    rk_emit step "\"index\":$rs_index,\"status\":\"started\",\"pid\":$rs_child"
    set +e
    wait "$rs_child"
    rs_rc=$?
    set -e
    rs_child=
    rk_emit step "\"index\":$rs_index,\"status\":\"exited\",\"exit\":$rs_rc"
    rs_clocks "$rs_index" after
    [ "$rs_rc" -le "$rs_worst" ] || rs_worst=$rs_rc
    shift "$rs_n"
    rs_index=$((rs_index + 1))
done
exec 3<&-
rk_emit result "\"status\":\"ok\",\"exit\":$rs_worst"
exit "$rs_worst"
