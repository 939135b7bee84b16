# shellcheck shell=sh
# lib.sh - shared helpers of the rkdet board scripts: sourced, never run on its own.
#
# POSIX sh only (dash, busybox sh, bash --posix): POSIX has no `local`, so helpers hand results
# back in RK_* variables and use function-prefixed names for their scratch variables.
# Every sysfs/procfs path is "$RK_ROOT/<relative path>": RKDET_ROOT is empty on a real board and
# points at a fake tree in tests and in the emulator, so this machine's /sys and /proc are never
# written. Output is JSON Lines on stdout: one complete record per line, each with a "record" and
# a "script" key, so the host can pick them out of other output (run-pinned.sh mixes in the
# child's output).

# Globals used by the scripts that source this file.
# shellcheck disable=SC2034
RK_TAB=$(printf '\t')
RK_ROOT=${RKDET_ROOT:-}
RK_ROOT=${RK_ROOT%/}
RK_STATE_DIR=${RKDET_STATE_DIR:-/run/rkdet}
RK_STATE_DIR=${RK_STATE_DIR%/}
RK_STATE_FILE=$RK_STATE_DIR/pin.state
RK_STATE_MAGIC='#rkdet-pin-state 1'
RK_SCRIPT=${RK_SCRIPT:-rkdet}
RK_V=
RK_ERR=
RK_CDEV=
RK_GOV=
RK_MIN=
RK_MAX=
RK_CUR=

# ---- JSON -------------------------------------------------------------------------------------

# rk_js STRING: print STRING as a JSON string literal (control characters become spaces).
rk_js() {
    case $1 in
        *[\\\"]* | *[![:print:]]*)
            printf '"%s"' "$(printf '%s' "$1" | tr '\001-\037\177' ' ' | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g')" ;;
        *) printf '"%s"' "$1" ;;
    esac
}

# rk_jn VALUE: print VALUE as a JSON integer, or null when it is not one.
rk_jn() {
    rk_jn_v=${1#-}
    case $rk_jn_v in
        '' | *[!0-9]*) printf 'null' ;;
        *) printf '%s' "$1" ;;
    esac
}

# rk_jarr WORDS [n]: print the whitespace-separated WORDS as a JSON array (of integers with "n").
rk_jarr() {
    rk_jarr_sep=
    printf '['
    for rk_jarr_w in $1; do
        printf '%s' "$rk_jarr_sep"
        if [ "${2:-}" = n ]; then rk_jn "$rk_jarr_w"; else rk_js "$rk_jarr_w"; fi
        rk_jarr_sep=,
    done
    printf ']'
}

# rk_emit BODY: print one record {"record":...,"script":...,BODY}. Never fails: a dropped
# connection (EPIPE) must not stop a restore half-way.
rk_emit() {
    printf '{"record":"%s","script":"%s"%s}\n' "$1" "$RK_SCRIPT" "${2:+,$2}" 2>/dev/null || :
}

# rk_die EXIT_CODE REASON: emit the final error record, say REASON on stderr, exit.
rk_die() {
    rk_emit result "\"status\":\"error\",\"exit\":$1,\"reason\":$(rk_js "$2")"
    printf '%s: %s\n' "$RK_SCRIPT" "$2" >&2 || :
    exit "$1"
}

# ---- files ------------------------------------------------------------------------------------

# Stop a child of this shell: SIGTERM, then poll every 0.1 s (no timer process: a killed timer subshell
# left its `sleep` behind in the job's group) until it is gone or a zombie; SIGKILL it only when $2
# tenths of a second ran out. Its wait status goes to rk_stop_rc. run-pinned.sh stops its command and
# run-steps.sh its running step with it.
rk_stop_child() {
    rk_sc_pid=$1
    rk_sc_ticks=$2
    kill -TERM "$rk_sc_pid" 2>/dev/null || :
    while [ "$rk_sc_ticks" -gt 0 ]; do
        rk_sc_state=Z
        read -r _ _ rk_sc_state _ <"/proc/$rk_sc_pid/stat" 2>/dev/null || rk_sc_state=Z
        [ "$rk_sc_state" != Z ] || break
        sleep 0.1 2>/dev/null || sleep 1
        rk_sc_ticks=$((rk_sc_ticks - 1))
    done
    [ "$rk_sc_ticks" -gt 0 ] || kill -KILL "$rk_sc_pid" 2>/dev/null || :
    rk_stop_rc=0
    wait "$rk_sc_pid" 2>/dev/null || rk_stop_rc=$?
}

# rk_path REL: print the absolute path of REL (relative to the root prefix).
rk_path() { printf '%s/%s' "$RK_ROOT" "$1"; }

# rk_read REL: RK_V := first line of REL (no trailing newline). Fails when absent or unreadable.
rk_read() {
    RK_V=
    [ -f "$RK_ROOT/$1" ] || return 1
    IFS= read -r RK_V 2>/dev/null <"$RK_ROOT/$1" || [ -n "$RK_V" ]
}

# rk_write REL VALUE: write VALUE and a newline to REL. On failure RK_ERR := the kernel's reason
# (e.g. "Invalid argument", "Permission denied").
rk_write() {
    RK_ERR=
    if RK_ERR=$(printf '%s\n' "$2" 2>&1 >"$RK_ROOT/$1"); then
        return 0
    fi
    RK_ERR=${RK_ERR##*: }
    [ -n "$RK_ERR" ] || RK_ERR="write failed"
    return 1
}

# rk_canon REL_NAME VALUE: RK_V := the comparable form of a value. Choice files such as THP's
# "always [madvise] never" compare by their selected (bracketed) word.
rk_canon() {
    RK_V=$2
    case $2 in
        *\[*\]*)
            RK_V=${2#*\[}
            RK_V=${RK_V%%\]*} ;;
    esac
}

# rk_in_list WORD LIST: succeed when WORD is one of the whitespace-separated LIST.
rk_in_list() {
    for rk_in_list_w in $2; do
        [ "$rk_in_list_w" = "$1" ] && return 0
    done
    return 1
}

# rk_max_of LIST: RK_V := the largest integer of LIST.
rk_max_of() {
    RK_V=
    for rk_max_of_w in $1; do
        if [ -z "$RK_V" ] || [ "$rk_max_of_w" -gt "$RK_V" ]; then RK_V=$rk_max_of_w; fi
    done
}

# rk_no_compaction_reason: RK_V := why compaction_proactiveness is absent: kernels before 5.9 lack
# the sysctl; later ones were built without CONFIG_COMPACTION (Rockchip's defconfig says
# "# CONFIG_COMPACTION is not set").
rk_no_compaction_reason() {
    rk_read proc/sys/kernel/osrelease || RK_V=unknown
    rk_nc_rel=$RK_V
    rk_nc_maj=${rk_nc_rel%%.*}
    rk_nc_min=${rk_nc_rel#*.}
    rk_nc_min=${rk_nc_min%%[!0-9]*}
    case $rk_nc_maj$rk_nc_min in
        '' | *[!0-9]*) RK_V="not present: kernel $rk_nc_rel has no compaction_proactiveness" ;;
        *)
            if [ "$rk_nc_maj" -gt 5 ] || { [ "$rk_nc_maj" -eq 5 ] && [ "$rk_nc_min" -ge 9 ]; }; then
                RK_V="not present: kernel $rk_nc_rel built without CONFIG_COMPACTION"
            else
                RK_V="not present: kernel $rk_nc_rel has no compaction_proactiveness (added in 5.9)"
            fi ;;
    esac
}

# rk_is_perm_error: succeed when RK_ERR says the write was refused for lack of privilege.
rk_is_perm_error() {
    case $RK_ERR in
        *ermission* | *ead-only* | *not\ permitted*) return 0 ;;
    esac
    return 1
}

# rk_check_env: refuse a relative root prefix (it would silently point at the wrong tree).
rk_check_env() {
    case $RK_ROOT in
        '' | /*) ;;
        *) rk_die 2 "RKDET_ROOT must be an absolute path, got '$RK_ROOT'" ;;
    esac
    case $RK_STATE_DIR in
        /*) ;;
        *) rk_die 2 "RKDET_STATE_DIR must be an absolute path, got '$RK_STATE_DIR'" ;;
    esac
}

# rk_usage SCRIPT_PATH: print the script's header comment (its documentation) and exit 0.
rk_usage() {
    sed -n -e '/^# shellcheck /d' -e '2,/^$/s/^# \{0,1\}//p' "$1"
    exit 0
}

# ---- discovery --------------------------------------------------------------------------------

# rk_devfreq_nodes: RK_V := "name:kind ..." for every devfreq node, found by name, never by index:
# *.npu / *npu* -> npu, *.gpu / *gpu* -> gpu, dmc / *dmc* -> ddr, others -> other; when no node is
# named like an NPU, a node called devfreq0 (vendor kernels without a named OPP table) is the NPU.
rk_devfreq_nodes() {
    rk_dn_out=
    rk_dn_npu=
    rk_dn_d0=
    for rk_dn_p in "$RK_ROOT"/sys/class/devfreq/*; do
        [ -e "$rk_dn_p" ] || continue
        rk_dn_name=${rk_dn_p##*/}
        case $rk_dn_name in
            *npu*) rk_dn_kind=npu; rk_dn_npu=1 ;;
            *gpu* | *mali*) rk_dn_kind=gpu ;;
            dmc | *dmc*) rk_dn_kind=ddr ;;
            devfreq0) rk_dn_kind=other; rk_dn_d0=1 ;;
            *) rk_dn_kind=other ;;
        esac
        rk_dn_out="$rk_dn_out $rk_dn_name:$rk_dn_kind"
    done
    if [ -z "$rk_dn_npu" ] && [ -n "$rk_dn_d0" ]; then
        rk_dn_out=$(printf '%s' "$rk_dn_out" | sed 's/ devfreq0:other/ devfreq0:npu/')
    fi
    RK_V=${rk_dn_out# }
}

# rk_cpu_policies: RK_V := relative dirs of every cpufreq policy.
rk_cpu_policies() {
    RK_V=
    for rk_cp_p in "$RK_ROOT"/sys/devices/system/cpu/cpufreq/policy*; do
        [ -d "$rk_cp_p" ] || continue
        RK_V="$RK_V sys/devices/system/cpu/cpufreq/${rk_cp_p##*/}"
    done
    RK_V=${RK_V# }
}

# rk_clock_read KIND REL_DIR: THE reader of a clock node (probe.sh's report and run-steps.sh's clocks
# records read it the same way): RK_GOV, RK_MIN, RK_MAX, RK_CUR := the node's governor, min, max and current
# frequency, each empty where its file is absent or unreadable. KIND cpufreq: a policy's scaling_* files (kHz);
# devfreq: a devfreq node's governor, min_freq, max_freq, cur_freq (Hz). REL_DIR is a node the caller found
# by existence (rk_cpu_policies, rk_devfreq_nodes), never by index.
rk_clock_read() {
    case $1 in
        cpufreq) rk_cr_pre=scaling_ ;;
        *) rk_cr_pre= ;;
    esac
    RK_GOV=
    RK_MIN=
    RK_MAX=
    RK_CUR=
    if rk_read "$2/${rk_cr_pre}governor"; then RK_GOV=$RK_V; fi
    if rk_read "$2/${rk_cr_pre}min_freq"; then RK_MIN=$RK_V; fi
    if rk_read "$2/${rk_cr_pre}max_freq"; then RK_MAX=$RK_V; fi
    if rk_read "$2/${rk_cr_pre}cur_freq"; then RK_CUR=$RK_V; fi
}

# rk_clock_json UNIT: print what rk_clock_read read as JSON members: "governor" (a string, null where
# unreadable), then "min", "max" and "cur" with UNIT appended to the name ("", "_khz", "_hz"), integers or null.
rk_clock_json() {
    if [ -n "$RK_GOV" ]; then printf '"governor":%s' "$(rk_js "$RK_GOV")"; else printf '"governor":null'; fi
    printf ',"min%s":%s,"max%s":%s,"cur%s":%s' "$1" "$(rk_jn "$RK_MIN")" "$1" "$(rk_jn "$RK_MAX")" \
        "$1" "$(rk_jn "$RK_CUR")"
}

# rk_cooling_of NODE: RK_V := cur_state of the devfreq cooling device of devfreq node NODE,
# RK_CDEV := its directory name (cooling_deviceN). Found by type, never by index: the kernel types
# it "devfreq-<device name>" (drivers/thermal/devfreq_cooling.c since 5.13, backported by vendor
# BSP kernels). Fails when the node has none, or only an older "thermal-devfreq-<n>" that cannot
# be tied to a node: the callers then behave as on a board without cooling devices.
rk_cooling_of() {
    RK_CDEV=
    for rk_co_d in "$RK_ROOT"/sys/class/thermal/cooling_device*; do
        [ -d "$rk_co_d" ] || continue
        rk_read "sys/class/thermal/${rk_co_d##*/}/type" || continue
        [ "$RK_V" = "devfreq-$1" ] || continue
        RK_CDEV=${rk_co_d##*/}
        rk_read "sys/class/thermal/$RK_CDEV/cur_state" || RK_V=
        case $RK_V in '' | *[!0-9]*) RK_V=0 ;; esac
        return 0
    done
    RK_V=
    return 1
}

# rk_capped NODE: succeed when NODE's cooling device shows a thermal cap (cur_state > 0); then
# RK_V := cur_state and RK_CDEV := the device.
rk_capped() {
    rk_cooling_of "$1" && [ "$RK_V" -gt 0 ]
}

# rk_state_freq LIST STATE: RK_V := the frequency a cooling state caps at: the STATE-th of LIST
# counted down from the top (state 0 is the top OPP), as devfreq cooling indexes its table.
rk_state_freq() {
    rk_sf_hit=
    for rk_sf_f in $1; do
        rk_sf_n=0
        for rk_sf_g in $1; do
            if [ "$rk_sf_g" -gt "$rk_sf_f" ]; then rk_sf_n=$((rk_sf_n + 1)); fi
        done
        if [ "$rk_sf_n" -eq "$2" ]; then rk_sf_hit=$rk_sf_f; fi
    done
    RK_V=$rk_sf_hit
    [ -n "$RK_V" ]
}
