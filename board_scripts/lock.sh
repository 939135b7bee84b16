# shellcheck shell=sh
# lock.sh - one board, one holder: the board-wide lock of the pinned job. Sourced by run-pinned.sh,
# pin.sh, restore.sh and probe.sh after lib.sh; defines functions only.
#
# Two pinned jobs on one board would save, pin and restore over each other: the second pin keeps
# the first's saved state (right), but the first job's restore then unpins the board under the
# second job's run. So run-pinned.sh takes this lock before pin and lets it go after restore; a
# second job waits for it up to RKDET_LOCK_TIMEOUT seconds or gives up (nothing changed).
# The lock lives in $RKDET_STATE_DIR, beside pin.state: whoever shares the pin state shares the lock
# (/run/rkdet for root and sudo logins: the whole board).
#
# Files in $RKDET_STATE_DIR:
#   board.lock   method "flock" (flock(1) on PATH: util-linux or a busybox with the applet):
#                run-pinned.sh holds an exclusive flock on it (fd 9); its command inherits the fd,
#                so the lock is free only when no process of the job is left, and the kernel drops it
#                when they die, kill -9 included.
#   lock.holder  the holder record, written (temp name, then mv) once the lock is held, removed at
#                release. Method "link" (no flock on PATH): the record itself is the lock, created
#                with ln(1) from a complete temp file (atomic; fails when one exists).
#
# Holder record: the line "#rkdet-lock-holder 1", then key=value lines: pid (run-pinned.sh),
# pid_start (its start time in clock ticks, /proc/PID/stat field 22: a reused pid is not the holder),
# method, holder (RKDET_LOCK_HOLDER: the deploying user@workstation; never published by the host),
# board_user (SUDO_USER, else the login), build (RKDET_LOCK_BUILD), run (RKDET_LOCK_RUN), started
# (UTC, board clock). Values are single-line (control characters removed), at most 200 bytes.
#
# The lock is held when the flock is taken (flock method) or the record's pid is alive with its
# start time (either method: a job of the other method on the same board still counts); a record
# left without either is stale (its job was killed) and is taken over, said in a "lock" record
# with status "taken_over" and the previous holder. Limitation of the link method: three jobs taking
# over one stale record at the same instant could leave two holders (flock has no such window).

RK_LOCK_FILE=$RK_STATE_DIR/board.lock
RK_LOCK_HOLDER=$RK_STATE_DIR/lock.holder
RK_LOCK_MAGIC='#rkdet-lock-holder 1'
RK_LOCK_METHOD=
RK_LOCK_STATUS=
RK_LOCK_PREV=
RK_LOCK_MINE=

# rk_lock_method: RK_LOCK_METHOD := flock when flock(1) is on PATH, else link.
rk_lock_method() {
    RK_LOCK_METHOD='link'
    if command -v flock >/dev/null 2>&1; then RK_LOCK_METHOD='flock'; fi
}

# rk_clean TEXT: RK_V := TEXT without control characters, at most 200 bytes.
rk_clean() {
    RK_V=$(printf '%s' "$1" | tr -d '\000-\037\177' | cut -c 1-200)
}

# rk_pid_start PID: RK_V := the start time of live process PID; fails when it is gone or a zombie.
rk_pid_start() {
    RK_V=
    case $1 in '' | *[!0-9]*) return 1 ;; esac
    rk_ps_s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    rk_ps_s=${rk_ps_s##*) }  # past "pid (comm) ": comm may hold spaces and parentheses
    # shellcheck disable=SC2086  # split on purpose: the stat fields
    set -- $rk_ps_s
    [ "$#" -ge 20 ] && [ "$1" != Z ] && [ "$1" != X ] || return 1
    shift 19
    RK_V=$1
}

# rk_holder_read FILE: RK_H_* := the holder record's fields; fails when FILE is absent or not one.
rk_holder_read() {
    RK_H_PID=''; RK_H_START=''; RK_H_METHOD=''; RK_H_HOLDER=''; RK_H_USER=''; RK_H_BUILD=''; RK_H_RUN=''; RK_H_STARTED=''
    rk_hr_text=$(cat "$1" 2>/dev/null) || return 1
    case $rk_hr_text in "$RK_LOCK_MAGIC"*) ;; *) return 1 ;; esac
    while IFS= read -r rk_hr_line; do
        case $rk_hr_line in
            pid=*) RK_H_PID=${rk_hr_line#*=} ;;
            pid_start=*) RK_H_START=${rk_hr_line#*=} ;;
            method=*) RK_H_METHOD=${rk_hr_line#*=} ;;
            holder=*) RK_H_HOLDER=${rk_hr_line#*=} ;;
            board_user=*) RK_H_USER=${rk_hr_line#*=} ;;
            build=*) RK_H_BUILD=${rk_hr_line#*=} ;;
            run=*) RK_H_RUN=${rk_hr_line#*=} ;;
            started=*) RK_H_STARTED=${rk_hr_line#*=} ;;
        esac
    done <<EOF
$rk_hr_text
EOF
    return 0
}

# rk_holder_alive: succeed when the process of the record just read still runs (same start time).
rk_holder_alive() {
    rk_pid_start "$RK_H_PID" || return 1
    [ -z "$RK_H_START" ] || [ "$RK_V" = "$RK_H_START" ]
}

# rk_holder_json: print the record just read as JSON fields (no braces).
rk_holder_json() {
    printf '"pid":%s,"pid_start":%s,"method":%s,"holder":%s,"board_user":%s,"build":%s,"run":%s,"started":%s' \
        "$(rk_jn "$RK_H_PID")" "$(rk_jn "$RK_H_START")" "$(rk_js "$RK_H_METHOD")" "$(rk_js "$RK_H_HOLDER")" \
        "$(rk_js "$RK_H_USER")" "$(rk_js "$RK_H_BUILD")" "$(rk_js "$RK_H_RUN")" "$(rk_js "$RK_H_STARTED")"
}

# rk_holder_write FILE: write this shell's holder record to FILE.
rk_holder_write() {
    rk_hw_start=
    if rk_pid_start "$$"; then rk_hw_start=$RK_V; fi
    rk_hw_user=${SUDO_USER:-}
    [ -n "$rk_hw_user" ] || rk_hw_user=$(id -un 2>/dev/null) || rk_hw_user=
    {
        printf '%s\n' "$RK_LOCK_MAGIC"
        printf 'pid=%s\npid_start=%s\nmethod=%s\n' "$$" "$rk_hw_start" "$RK_LOCK_METHOD"
        rk_clean "${RKDET_LOCK_HOLDER:-unknown}"; printf 'holder=%s\n' "$RK_V"
        rk_clean "$rk_hw_user"; printf 'board_user=%s\n' "$RK_V"
        rk_clean "${RKDET_LOCK_BUILD:-}"; printf 'build=%s\n' "$RK_V"
        rk_clean "${RKDET_LOCK_RUN:-}"; printf 'run=%s\n' "$RK_V"
        printf 'started=%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    } >"$1"
}

# rk_flock_free: succeed when nobody holds the flock on board.lock (tested on a read-only fd in a
# subshell, so the test's own lock is gone when it returns). Only asked when a record exists.
rk_flock_free() {
    [ -f "$RK_LOCK_FILE" ] || return 0
    (exec 8<"$RK_LOCK_FILE" && flock -n 8) 2>/dev/null
}

# rk_lock_state: RK_LOCK_STATUS := free | held | stale (RK_H_* := the record, when there is one).
rk_lock_state() {
    rk_lock_method
    RK_LOCK_STATUS=free
    rk_ls_rec=
    if rk_holder_read "$RK_LOCK_HOLDER"; then rk_ls_rec=1; fi
    if [ "$RK_LOCK_METHOD" = flock ] && [ -n "$rk_ls_rec" ] && ! rk_flock_free; then
        RK_LOCK_STATUS=held
    elif [ -n "$rk_ls_rec" ]; then
        if rk_holder_alive; then RK_LOCK_STATUS=held; else RK_LOCK_STATUS=stale; fi
    fi
}

# rk_lock_emit: the "lock" record of rk_lock_state (probe.sh).
rk_lock_emit() {
    rk_lock_state
    if [ "$RK_LOCK_STATUS" = free ]; then
        rk_emit lock "\"status\":\"free\",\"method\":\"$RK_LOCK_METHOD\",\"path\":$(rk_js "$RK_LOCK_HOLDER")"
    else
        rk_emit lock "\"status\":\"$RK_LOCK_STATUS\",\"method\":\"$RK_LOCK_METHOD\",\"path\":$(rk_js "$RK_LOCK_HOLDER"),$(rk_holder_json)"
    fi
}

# rk_lock_refuse_if_held WHAT: pin.sh and restore.sh on their own must not change a board that a
# pinned job holds (its restore puts the board back): exit 3, nothing changed.
rk_lock_refuse_if_held() {
    rk_lock_state
    [ "$RK_LOCK_STATUS" = held ] || return 0
    rk_emit lock "\"status\":\"held\",\"method\":\"$RK_LOCK_METHOD\",$(rk_holder_json)"
    rk_die 3 "the board is held by a pinned job (pid $RK_H_PID, build ${RK_H_BUILD:-?}, run ${RK_H_RUN:-?}, since ${RK_H_STARTED:-?}); $1 would change it under that run; nothing was changed: wait for it (its restore puts the board back)"
}

# rk_lock_try TMP: one attempt; succeed when this shell now holds the lock. A stale record taken
# over leaves its JSON fields in RK_LOCK_PREV.
rk_lock_try() {
    if [ "$RK_LOCK_METHOD" = flock ]; then
        flock -n 9 || return 1
        if rk_holder_read "$RK_LOCK_HOLDER"; then
            if rk_holder_alive; then  # a live holder of the link method (no flock of its own)
                flock -u 9
                return 1
            fi
            RK_LOCK_PREV=$(rk_holder_json)
        fi
        mv -f "$1" "$RK_LOCK_HOLDER" || { flock -u 9; return 1; }
        return 0
    fi
    if ln "$1" "$RK_LOCK_HOLDER" 2>/dev/null; then
        rm -f "$1"
        return 0
    fi
    rk_holder_read "$RK_LOCK_HOLDER" || return 1  # released meanwhile: the next round takes it
    ! rk_holder_alive || return 1
    rk_lt_dead=$RK_H_PID
    rk_lt_prev=$(rk_holder_json)
    rk_lt_moved="$RK_STATE_DIR/.lock.stale.$$"
    mv -f "$RK_LOCK_HOLDER" "$rk_lt_moved" 2>/dev/null || return 1
    if ! rk_holder_read "$rk_lt_moved" || [ "$RK_H_PID" != "$rk_lt_dead" ]; then
        # another job took the stale record over first and this moved its live one: put it back
        ln "$rk_lt_moved" "$RK_LOCK_HOLDER" 2>/dev/null || :
        rm -f "$rk_lt_moved"
        return 1
    fi
    rm -f "$rk_lt_moved"
    if ln "$1" "$RK_LOCK_HOLDER" 2>/dev/null; then
        rm -f "$1"
        RK_LOCK_PREV=$rk_lt_prev
        return 0
    fi
    return 1
}

# rk_lock_acquire TIMEOUT: take the board lock, waiting up to TIMEOUT seconds (digits; 0 = one
# try). Records: "waiting" (once, with the holder), then "acquired" (with "taken_over" before it
# when a stale record was replaced), or "busy" and exit 125: nothing was changed.
rk_lock_acquire() {
    if ! mkdir -p "$RK_STATE_DIR" 2>/dev/null || [ ! -w "$RK_STATE_DIR" ]; then
        rk_die 3 "cannot write the state directory $RK_STATE_DIR (the board lock and pin state live there; run as root or set RKDET_STATE_DIR); nothing was changed"
    fi
    rk_lock_method
    rk_la_tmp="$RK_STATE_DIR/.lock.holder.$$"
    rk_holder_write "$rk_la_tmp" 2>/dev/null || rk_die 3 "cannot write $rk_la_tmp; nothing was changed"
    if [ "$RK_LOCK_METHOD" = flock ]; then
        if { [ -e "$RK_LOCK_FILE" ] && [ ! -w "$RK_LOCK_FILE" ]; } || ! command exec 9>>"$RK_LOCK_FILE"; then
            rm -f "$rk_la_tmp"
            rk_die 3 "cannot open the board lock $RK_LOCK_FILE; nothing was changed"
        fi
    fi
    rk_la_t0=$(date +%s)
    rk_la_said=
    while ! rk_lock_try "$rk_la_tmp"; do
        rk_la_now=$(date +%s)
        rk_la_waited=$((rk_la_now - rk_la_t0))
        if [ "$rk_la_waited" -ge "$1" ]; then
            rm -f "$rk_la_tmp"
            if rk_holder_read "$RK_LOCK_HOLDER"; then rk_la_who=$(rk_holder_json); else rk_la_who='"pid":null'; fi
            rk_emit lock "\"status\":\"busy\",\"method\":\"$RK_LOCK_METHOD\",\"waited_s\":$rk_la_waited,$rk_la_who"
            rk_die 125 "the board is busy: another pinned job holds its lock (pid ${RK_H_PID:-?}, build ${RK_H_BUILD:-?}, run ${RK_H_RUN:-?}, since ${RK_H_STARTED:-?}); waited $rk_la_waited s; nothing was changed"
        fi
        if [ -z "$rk_la_said" ] && rk_holder_read "$RK_LOCK_HOLDER"; then
            rk_la_said=1
            rk_emit lock "\"status\":\"waiting\",\"method\":\"$RK_LOCK_METHOD\",\"timeout_s\":$1,$(rk_holder_json)"
        fi
        sleep 0.2 2>/dev/null || sleep 1
    done
    rk_la_waited=$(($(date +%s) - rk_la_t0))
    if [ -n "$RK_LOCK_PREV" ]; then
        rk_emit lock "\"status\":\"taken_over\",\"method\":\"$RK_LOCK_METHOD\",\"note\":\"a stale lock (its job is gone) was taken over\",\"previous\":{$RK_LOCK_PREV}"
    fi
    RK_LOCK_MINE=1
    for rk_la_left in "$RK_STATE_DIR"/.lock.holder.* "$RK_STATE_DIR"/.lock.stale.*; do  # of jobs killed mid-way
        [ -f "$rk_la_left" ] || continue
        rk_pid_start "${rk_la_left##*.}" || rm -f "$rk_la_left"
    done
    rk_holder_read "$RK_LOCK_HOLDER" || :
    rk_emit lock "\"status\":\"acquired\",\"method\":\"$RK_LOCK_METHOD\",\"waited_s\":$rk_la_waited,$(rk_holder_json)"
}

# rk_lock_release: drop this shell's record and lock (idempotent; never fails).
rk_lock_release() {
    [ -n "$RK_LOCK_MINE" ] || return 0
    RK_LOCK_MINE=
    if rk_holder_read "$RK_LOCK_HOLDER" && [ "$RK_H_PID" = "$$" ]; then rm -f "$RK_LOCK_HOLDER" || :; fi
    if [ "$RK_LOCK_METHOD" = flock ]; then exec 9>&- || :; fi
    rk_emit lock '"status":"released"'
}
