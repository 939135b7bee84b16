# shellcheck shell=sh
# knobs.sh - the pin and restore logic, one small unit per knob kind (after pyperf's system
# tune/reset): plan (is it present? what value?), files (what to save and check), apply, report.
# Sourced by pin.sh, restore.sh and run-pinned.sh after lib.sh; defines functions only.
#
# Units (RK_PLAN lines: unit TAB class TAB knob TAB relative-path TAB wanted):
#   cpufreq  class cpu          one per cpufreq policy; wanted "performance" or "userspace:<kHz>"
#   devfreq  class npu|gpu|ddr  one per devfreq node found by name; wanted "<Hz>"
#   file     class compaction|cpuidle   a plain value file; wanted is the value
#   choice   class thp          a "[selected]" choice file; wanted is the word
#   skip     any class          not present or not asked for; wanted is the reason
#
# Fixing a devfreq clock: governor `performance` (when the node offers it), then min_freq and
# max_freq both set to the wanted frequency, in the order that never makes min > max (kernels
# before 5.4 reject such a write with EINVAL). We do not use `userspace` + `userspace/set_freq`:
# that node only exists while the governor is userspace, and min=max clamps every governor,
# including the vendor's rknpu_ondemand if `performance` is missing.
#
# State file ($RKDET_STATE_DIR/pin.state): a magic line, "#root=<RKDET_ROOT>", then one
# "relative-path TAB saved-value" line per file pin may change, written before anything changes
# (temp name, then mv); a devfreq node's cur_freq is saved too (never written: see below).
# Restore order: each devfreq node is first held at its saved cur_freq (min_freq = max_freq = it),
# then governors, then the rest (userspace/set_freq, scaling_setspeed, plain files), then the
# devfreq min/max pairs (clamp-safe; a saved max below the top OPP is first tried as the top, see
# rk_restore_range). The hold is for governors that keep the frequency they take over instead of
# following load: Rockchip's rknpu_ondemand, and userspace before any set_freq ("undefined"):
# switched back while the node runs at the pinned clock, they would stay there. For those
# governors a cur_freq that does not read back as saved fails the restore; for load-driven ones
# it is only noted. A value the kernel refuses to take back
# verbatim (e.g. "<unsupported>" in scaling_setspeed, "always [madvise] never" in a choice file) is
# retried in its selected form and counts as restored when it reads back equal.
#
# Thermal caps. On Linux >= 5.5 a devfreq node's max_freq (and min_freq, which max wins over)
# shows the *effective* limit: the user's PM-QoS request combined with the thermal one. Saved
# as read under a cap, it would come back as a user limit that outlives the heat. A thermal cap
# is told from a user limit by the node's devfreq cooling device (type "devfreq-<node>", see
# rk_cooling_of): cur_state k > 0 means the cap holds the node k OPPs below the top. Then pin saves
# the top OPP ("no user limit") instead of the capped max_freq, and says so in the node's knob
# record ("thermal_cap_at_save") and the state record ("thermal_capped"). Limitation: a user limit
# set *below* a simultaneous cap reads as the cap and is not seen, so it is not restored (the
# node comes back unlimited). On restore, a node with a cooling device gets its saved values
# verbatim (no top-OPP probe, which exists for boards without one); a min_freq/max_freq that then
# reads lower than saved, exactly at the OPP its cooling device's cur_state caps at, counts as
# restored ("restored (thermal cap active: reads X)"), since the kernel drops the cap by itself
# once the board cools. pin never writes cur_state (root may: that is a user override).
# A node without a cooling device tied to it (RK3588's NPU, capped by Rockchip's system monitor;
# kernels that name cooling devices thermal-devfreq-N) is probed at save instead: when its
# max_freq reads below the top OPP, pin writes the top and reads again; a value that does not move
# is a limit that is not ours (the top is saved), one that moves was a user limit (written straight
# back and saved). At restore, such a node's max_freq (and min_freq, cur_freq) reading lower than
# what restore just wrote, exactly at the max_freq now shown, counts as restored under that limit.

RK_PLAN=
RK_WERR=
RK_PERM=
RK_CAPPED=

rk_plan_add() {
    RK_PLAN="$RK_PLAN$1$RK_TAB$2$RK_TAB$3$RK_TAB$4$RK_TAB$5
"
}

# rk_freq_setting NAME VALUE: validate a frequency setting (max, keep or digits), or die.
rk_freq_setting() {
    case $2 in
        max | keep) ;;
        '' | *[!0-9]*) rk_die 2 "$1=$2: use max, keep or a frequency from the node's available list" ;;
    esac
}

# ---- cpufreq unit -------------------------------------------------------------------------------

rk_plan_cpu() {
    rk_pc_gov=${RKDET_CPU_GOVERNOR:-performance}
    rk_pc_freq=${RKDET_CPU_FREQ:-max}
    case $rk_pc_gov in
        keep) rk_plan_add skip cpu cpufreq - "RKDET_CPU_GOVERNOR=keep"; return 0 ;;
        performance | userspace) ;;
        *) rk_die 2 "RKDET_CPU_GOVERNOR=$rk_pc_gov: use performance, userspace or keep" ;;
    esac
    rk_freq_setting RKDET_CPU_FREQ "$rk_pc_freq"
    if [ "$rk_pc_gov" = performance ] && [ "$rk_pc_freq" != max ]; then
        rk_die 2 "RKDET_CPU_FREQ=$rk_pc_freq needs RKDET_CPU_GOVERNOR=userspace"
    fi
    rk_cpu_policies
    if [ -z "$RK_V" ]; then
        rk_plan_add skip cpu cpufreq - "no cpufreq policy under /sys/devices/system/cpu/cpufreq"
        return 0
    fi
    for rk_pc_rel in $RK_V; do
        rk_pc_name=${rk_pc_rel##*/}
        rk_read "$rk_pc_rel/scaling_available_governors" || RK_V=
        rk_in_list "$rk_pc_gov" "$RK_V" ||
            rk_die 2 "$rk_pc_name has no $rk_pc_gov governor (available: ${RK_V:-none}); set RKDET_CPU_GOVERNOR"
        rk_pc_want=performance
        if [ "$rk_pc_gov" = userspace ]; then
            rk_read "$rk_pc_rel/scaling_available_frequencies" || rk_read "$rk_pc_rel/cpuinfo_max_freq" || RK_V=
            rk_pc_list=$RK_V
            if [ "$rk_pc_freq" = max ]; then
                rk_max_of "$rk_pc_list"
                rk_pc_f=$RK_V
            else
                rk_in_list "$rk_pc_freq" "$rk_pc_list" ||
                    rk_die 2 "RKDET_CPU_FREQ=$rk_pc_freq kHz is not an available frequency of $rk_pc_name ($rk_pc_list); use one of those"
                rk_pc_f=$rk_pc_freq
            fi
            [ -n "$rk_pc_f" ] || rk_die 2 "$rk_pc_name lists no frequencies; cannot use RKDET_CPU_GOVERNOR=userspace"
            rk_pc_want=userspace:$rk_pc_f
        fi
        rk_plan_add cpufreq cpu "cpufreq/$rk_pc_name" "$rk_pc_rel" "$rk_pc_want"
    done
}

# ---- devfreq unit -------------------------------------------------------------------------------

rk_plan_devfreq() {
    rk_devfreq_nodes
    rk_pd_nodes=$RK_V
    for rk_pd_kind in npu gpu ddr; do
        case $rk_pd_kind in
            npu) rk_pd_var=RKDET_NPU_FREQ; rk_pd_set=${RKDET_NPU_FREQ:-max} ;;
            gpu) rk_pd_var=RKDET_GPU_FREQ; rk_pd_set=${RKDET_GPU_FREQ:-max} ;;
            ddr) rk_pd_var=RKDET_DDR_FREQ; rk_pd_set=${RKDET_DDR_FREQ:-max} ;;
        esac
        rk_freq_setting "$rk_pd_var" "$rk_pd_set"
        rk_pd_found=
        for rk_pd_nk in $rk_pd_nodes; do
            [ "${rk_pd_nk##*:}" = "$rk_pd_kind" ] || continue
            rk_pd_found=1
            rk_pd_name=${rk_pd_nk%:*}
            rk_pd_rel=sys/class/devfreq/$rk_pd_name
            if [ "$rk_pd_set" = keep ]; then
                rk_plan_add skip "$rk_pd_kind" "devfreq/$rk_pd_name" - "$rk_pd_var=keep"
                continue
            fi
            rk_read "$rk_pd_rel/available_frequencies" || RK_V=
            rk_pd_list=$RK_V
            if [ -z "$rk_pd_list" ]; then
                rk_plan_add skip "$rk_pd_kind" "devfreq/$rk_pd_name" - "no readable available_frequencies"
                continue
            fi
            if [ "$rk_pd_set" = max ]; then
                rk_max_of "$rk_pd_list"
                rk_pd_f=$RK_V
            else
                rk_in_list "$rk_pd_set" "$rk_pd_list" ||
                    rk_die 2 "$rk_pd_var=$rk_pd_set Hz is not an available frequency of $rk_pd_name ($rk_pd_list); use one of those"
                rk_pd_f=$rk_pd_set
            fi
            rk_plan_add devfreq "$rk_pd_kind" "devfreq/$rk_pd_name" "$rk_pd_rel" "$rk_pd_f"
        done
        if [ -z "$rk_pd_found" ]; then
            rk_plan_add skip "$rk_pd_kind" "devfreq/$rk_pd_kind" - "not present: no $rk_pd_kind devfreq node under /sys/class/devfreq"
        fi
    done
}

# ---- memory and idle units ----------------------------------------------------------------------

rk_plan_vm() {
    rk_pv_set=${RKDET_COMPACTION:-0}
    rk_pv_rel=proc/sys/vm/compaction_proactiveness
    case $rk_pv_set in
        keep) rk_plan_add skip compaction vm/compaction_proactiveness - "RKDET_COMPACTION=keep" ;;
        '' | *[!0-9]*) rk_die 2 "RKDET_COMPACTION=$rk_pv_set: use 0..100 or keep" ;;
        *)
            if [ -f "$RK_ROOT/$rk_pv_rel" ]; then
                rk_plan_add file compaction vm/compaction_proactiveness "$rk_pv_rel" "$rk_pv_set"
            else
                rk_no_compaction_reason
                rk_plan_add skip compaction vm/compaction_proactiveness - "$RK_V"
            fi ;;
    esac

    rk_pv_thp=${RKDET_THP:-keep}
    rk_pv_rel=sys/kernel/mm/transparent_hugepage/enabled
    if [ "$rk_pv_thp" = keep ]; then
        rk_plan_add skip thp thp/enabled - "RKDET_THP=keep"
    elif ! rk_read "$rk_pv_rel"; then
        rk_plan_add skip thp thp/enabled - "not present: kernel built without transparent hugepages"
    else
        rk_pv_choices=$(printf '%s' "$RK_V" | tr -d '[]')
        rk_in_list "$rk_pv_thp" "$rk_pv_choices" || rk_die 2 "RKDET_THP=$rk_pv_thp: use one of $rk_pv_choices, or keep"
        rk_plan_add choice thp thp/enabled "$rk_pv_rel" "$rk_pv_thp"
    fi

    rk_pv_idle=${RKDET_CPUIDLE_DEEP:-keep}
    case $rk_pv_idle in
        keep) rk_plan_add skip cpuidle cpuidle - "RKDET_CPUIDLE_DEEP=keep"; return 0 ;;
        disable) ;;
        *) rk_die 2 "RKDET_CPUIDLE_DEEP=$rk_pv_idle: use disable or keep" ;;
    esac
    rk_pv_n=0
    for rk_pv_s in "$RK_ROOT"/sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[1-9]*; do
        [ -f "$rk_pv_s/disable" ] || continue
        rk_pv_cpu=${rk_pv_s%/cpuidle/*}
        rk_pv_cpu=${rk_pv_cpu##*/}
        rk_plan_add file cpuidle "cpuidle/$rk_pv_cpu/${rk_pv_s##*/}" "sys/devices/system/cpu/$rk_pv_cpu/cpuidle/${rk_pv_s##*/}/disable" 1
        rk_pv_n=$((rk_pv_n + 1))
    done
    [ "$rk_pv_n" -gt 0 ] || rk_plan_add skip cpuidle cpuidle - "not present: no deep cpuidle states (state1 and up)"
}

# ---- per-unit files ------------------------------------------------------------------------------

# rk_unit_files UNIT REL: RK_V := relative paths this unit saves (and may write).
rk_unit_files() {
    case $1 in
        cpufreq) RK_V="$2/scaling_governor $2/scaling_setspeed" ;;
        devfreq) RK_V="$2/governor $2/min_freq $2/max_freq $2/userspace/set_freq $2/cur_freq" ;;
        file | choice) RK_V=$2 ;;
        *) RK_V= ;;
    esac
}

# rk_unit_writes UNIT REL WANTED: RK_V := relative paths apply will write (for the permission check).
rk_unit_writes() {
    case $1 in
        cpufreq)
            RK_V=$2/scaling_governor
            case $3 in userspace:*) RK_V="$RK_V $2/scaling_setspeed" ;; esac ;;
        devfreq) RK_V="$2/governor $2/min_freq $2/max_freq" ;;
        file | choice) RK_V=$2 ;;
        *) RK_V= ;;
    esac
}

# rk_set_range REL_DIR MIN MAX: set a devfreq node's min_freq/max_freq so that min never exceeds
# max in between: raise max first when the new max is not below the current min, else lower min first.
rk_set_range() {
    rk_sr_ok=0
    rk_read "$1/min_freq" || RK_V=
    case $RK_V in '' | *[!0-9]*) RK_V=0 ;; esac
    case $3 in '' | *[!0-9]*) rk_sr_max=0 ;; *) rk_sr_max=$3 ;; esac
    if [ "$rk_sr_max" -ge "$RK_V" ]; then
        rk_write "$1/max_freq" "$3" || rk_sr_ok=1
        rk_write "$1/min_freq" "$2" || rk_sr_ok=1
    else
        rk_write "$1/min_freq" "$2" || rk_sr_ok=1
        rk_write "$1/max_freq" "$3" || rk_sr_ok=1
    fi
    return "$rk_sr_ok"
}

# rk_restore_range REL_DIR MIN MAX: put a devfreq node's saved min/max back. A node with a devfreq
# cooling device had its cap told apart at pin time (see the header): its values go back verbatim.
# Without one (no way to tell): on kernels >= 5.5 max_freq reads as the *effective* limit (user
# request, thermal cap), so a saved value below the top OPP may be a thermal cap over "no user
# limit". So try the top OPP first: if max_freq then reads the saved value, that value came from
# the cap and writing it would leave a user limit behind.
rk_restore_range() {
    if rk_cooling_of "${1##*/}"; then  # pin saved the un-capped limit: write it back as it is
        rk_set_range "$1" "$2" "$3"
        return
    fi
    rk_read "$1/available_frequencies" || RK_V=
    rk_max_of "$RK_V"
    rk_rr_top=$RK_V
    case $3 in
        '' | *[!0-9]*) ;;
        *)
            if [ -n "$rk_rr_top" ] && [ "$3" -lt "$rk_rr_top" ]; then
                rk_set_range "$1" "$2" "$rk_rr_top" || :
                if rk_read "$1/max_freq" && [ "$RK_V" = "$3" ]; then return 0; fi
            fi ;;
    esac
    rk_set_range "$1" "$2" "$3"
}

# rk_note_werr KNOB: remember the write error of a knob for its report; flag privilege errors.
rk_note_werr() {
    RK_WERR="$RK_WERR$1$RK_TAB$RK_ERR
"
    if rk_is_perm_error; then RK_PERM=$1; fi
}

# rk_werr_of KNOB: RK_V := the remembered write error of KNOB, or empty.
rk_werr_of() {
    RK_V=
    while IFS="$RK_TAB" read -r rk_we_k rk_we_e; do
        if [ "$rk_we_k" = "$1" ]; then RK_V=$rk_we_e; fi
    done <<EOF
$RK_WERR
EOF
}

# rk_apply UNIT KNOB REL WANTED: change one knob (the kernel's order: governor, then clocks).
rk_apply() {
    case $1 in
        cpufreq)
            rk_write "$3/scaling_governor" "${4%%:*}" || rk_note_werr "$2"
            case $4 in
                userspace:*) rk_write "$3/scaling_setspeed" "${4#userspace:}" || rk_note_werr "$2" ;;
            esac ;;
        devfreq)
            rk_read "$3/available_governors" || RK_V=
            if rk_in_list performance "$RK_V"; then
                rk_write "$3/governor" performance || rk_note_werr "$2"
            fi
            rk_set_range "$3" "$4" "$4" || rk_note_werr "$2"
            ;;
        file | choice) rk_write "$3" "$4" || rk_note_werr "$2" ;;
    esac
}

# rk_report UNIT CLASS KNOB REL WANTED: read the knob back and emit its record.
rk_report() {
    rk_rp_status='set'
    rk_rp_extra=
    rk_rp_warn=
    case $1 in
        cpufreq)
            rk_read "$4/scaling_governor" || RK_V=
            rk_rp_actual=$RK_V
            rk_rp_wgov=${5%%:*}
            [ "$RK_V" = "$rk_rp_wgov" ] || rk_rp_status=failed
            rk_read "$4/scaling_cur_freq" || RK_V=
            rk_rp_cur=$RK_V
            case $5 in
                userspace:*)
                    rk_rp_want=${5#userspace:}
                    rk_read "$4/scaling_setspeed" || RK_V=
                    [ "$RK_V" = "$rk_rp_want" ] || rk_rp_status=failed
                    rk_rp_actual="$rk_rp_actual:$RK_V" ;;
                *)
                    rk_read "$4/scaling_max_freq" || RK_V=
                    rk_rp_want=$RK_V ;;
            esac
            rk_rp_extra=",\"governor\":$(rk_js "$rk_rp_wgov"),\"wanted_khz\":$(rk_jn "$rk_rp_want"),\"cur_khz\":$(rk_jn "$rk_rp_cur")"
            if [ "$rk_rp_cur" != "$rk_rp_want" ]; then
                rk_rp_warn="scaling_cur_freq $rk_rp_cur kHz differs from $rk_rp_want kHz (thermal limit?)"
            fi ;;
        devfreq)
            rk_read "$4/governor" || RK_V=
            rk_rp_gov=$RK_V
            rk_read "$4/min_freq" || RK_V=
            rk_rp_min=$RK_V
            rk_read "$4/max_freq" || RK_V=
            rk_rp_max=$RK_V
            rk_read "$4/cur_freq" || RK_V=
            rk_rp_cur=$RK_V
            rk_rp_actual="$rk_rp_min..$rk_rp_max"
            [ "$rk_rp_min" = "$5" ] && [ "$rk_rp_max" = "$5" ] || rk_rp_status=failed
            rk_read "$4/available_governors" || RK_V=
            if rk_in_list performance "$RK_V" && [ "$rk_rp_gov" != performance ]; then rk_rp_status=failed; fi
            rk_rp_extra=",\"device\":$(rk_js "${4##*/}"),\"governor\":$(rk_js "$rk_rp_gov"),\"wanted_hz\":$(rk_jn "$5"),\"min_hz\":$(rk_jn "$rk_rp_min"),\"max_hz\":$(rk_jn "$rk_rp_max"),\"cur_hz\":$(rk_jn "$rk_rp_cur")"
            rk_rp_why="thermal limit?"
            if rk_capped "${4##*/}"; then
                rk_rp_why="thermal limit: $RK_CDEV cur_state $RK_V"
                rk_rp_extra="$rk_rp_extra,\"cooling_state\":$RK_V"
            fi
            rk_capped_at_save "${4##*/}"
            rk_rp_extra="$rk_rp_extra$RK_V"
            if [ "$rk_rp_cur" != "$5" ]; then
                rk_rp_warn="cur_freq $rk_rp_cur Hz differs from pinned $5 Hz ($rk_rp_why)"
            fi ;;
        file | choice)
            rk_read "$4" || RK_V=
            rk_canon "$4" "$RK_V"
            rk_rp_actual=$RK_V
            [ "$RK_V" = "$5" ] || rk_rp_status=failed ;;
    esac
    rk_werr_of "$3"
    rk_rp_reason=
    if [ -n "$RK_V" ]; then rk_rp_reason="write refused: $RK_V"; fi
    if [ "$rk_rp_status" = failed ] && [ -z "$rk_rp_reason" ]; then
        rk_rp_reason="read back $rk_rp_actual, wanted $5"
    fi
    rk_emit knob "\"knob\":$(rk_js "$3"),\"class\":\"$2\",\"status\":\"$rk_rp_status\",\"wanted\":$(rk_js "$5"),\"actual\":$(rk_js "$rk_rp_actual")$rk_rp_extra${rk_rp_reason:+,\"reason\":$(rk_js "$rk_rp_reason")}${rk_rp_warn:+,\"warning\":$(rk_js "$rk_rp_warn")}"
    [ "$rk_rp_status" = set ]
}

# ---- state file ---------------------------------------------------------------------------------

# rk_state_get REL: RK_V := the saved value of REL; fails when REL is not in the state file.
rk_state_get() {
    RK_V=$(awk -F "$RK_TAB" -v k="$1" '$1 == k { print $2; found = 1; exit } END { exit !found }' "$RK_STATE_FILE") || return 1
}

# rk_state_check: die unless the state file is ours and was saved for this root prefix.
rk_state_check() {
    IFS= read -r rk_sc_magic <"$RK_STATE_FILE" || :
    [ "$rk_sc_magic" = "$RK_STATE_MAGIC" ] ||
        rk_die 2 "$RK_STATE_FILE is not an rkdet pin state file; move it away and check the board by hand"
    rk_sc_root=$(sed -n '2s/^#root=//p' "$RK_STATE_FILE")
    [ "$rk_sc_root" = "$RK_ROOT" ] ||
        rk_die 2 "$RK_STATE_FILE was saved for RKDET_ROOT='$rk_sc_root', not '$RK_ROOT'; run with the same RKDET_ROOT"
    if awk -F "$RK_TAB" 'NR > 2 && ($1 !~ /^(sys|proc)\// || $1 ~ /\.\./) { bad = 1 } END { exit !bad }' "$RK_STATE_FILE"; then
        rk_die 2 "$RK_STATE_FILE names a path outside sys/ and proc/; refusing to restore from it"
    fi
}

# rk_uncapped_max REL VALUE: RK_V := the max_freq to save for a value read from REL: the top OPP
# when a thermal limit, not a user one, holds it lower (see the header; noted in RK_CAPPED), else
# VALUE. With a cooling device its cur_state tells; without one (RK3588's NPU: the system monitor
# caps it and has no cooling device; "thermal-devfreq-N" kernels) a max_freq below the top OPP is
# probed: max_freq := top. If it still reads VALUE the limit is not ours (saved: top); if it moves,
# VALUE was a user limit and is written straight back (saved: VALUE).
rk_uncapped_max() {
    rk_um_read=$2
    rk_um_dir=${1%/max_freq}
    rk_read "$rk_um_dir/available_frequencies" || RK_V=
    rk_max_of "$RK_V"
    rk_um_top=$RK_V
    if rk_capped "${rk_um_dir##*/}"; then
        rk_um_state=$RK_V
        rk_um_cdev=$RK_CDEV
    elif ! rk_cooling_of "${rk_um_dir##*/}" && [ -n "$rk_um_top" ] && rk_below "$rk_um_read" "$rk_um_top"; then
        rk_write "$1" "$rk_um_top" || :
        rk_read "$1" || RK_V=
        if [ "$RK_V" != "$rk_um_read" ]; then
            rk_write "$1" "$rk_um_read" || :
            RK_V=$rk_um_read
            return 0
        fi
        rk_um_state=-  # "-": none (read with IFS=tab, an empty field would vanish)
        rk_um_cdev=-
    else
        RK_V=$rk_um_read
        return 0
    fi
    RK_V=${rk_um_top:-$rk_um_read}
    RK_CAPPED="$RK_CAPPED${rk_um_dir##*/}$RK_TAB$rk_um_cdev$RK_TAB$rk_um_state$RK_TAB$rk_um_read$RK_TAB$RK_V
"
}

# rk_uncapped_cur REL VALUE: RK_V := the cur_freq to save: VALUE, unless the node was found capped
# (RK_CAPPED) and runs exactly at the capped max_freq: it then asked for at least that much and the
# cap hides how much more, so the max_freq saved instead of the cap is taken (see the header).
rk_uncapped_cur() {
    RK_V=$2
    rk_uc_dir=${1%/cur_freq}
    while IFS="$RK_TAB" read -r rk_uc_n _ _ rk_uc_r rk_uc_v; do
        if [ "$rk_uc_n" = "${rk_uc_dir##*/}" ] && [ "$2" = "$rk_uc_r" ]; then RK_V=$rk_uc_v; fi
    done <<EOF
$RK_CAPPED
EOF
}

# rk_below A B: succeed when both are integers and A < B.
rk_below() {
    case $1 in '' | *[!0-9]*) return 1 ;; esac
    case $2 in '' | *[!0-9]*) return 1 ;; esac
    [ "$1" -lt "$2" ]
}

# rk_capped_at_save NODE: RK_V := ',"thermal_cap_at_save":{...}' when pin saved NODE's max_freq
# under a thermal cap (what it read, what it saved instead), else empty.
rk_capped_at_save() {
    RK_V=
    while IFS="$RK_TAB" read -r rk_cs_n rk_cs_d rk_cs_s rk_cs_r rk_cs_v; do
        [ "$rk_cs_n" = "$1" ] || continue
        if [ "$rk_cs_d" != - ]; then
            RK_V=",\"thermal_cap_at_save\":{\"cooling_device\":$(rk_js "$rk_cs_d"),\"cur_state\":$(rk_jn "$rk_cs_s"),\"max_freq_read\":$(rk_jn "$rk_cs_r"),\"max_freq_saved\":$(rk_jn "$rk_cs_v")}"
        else
            RK_V=",\"thermal_cap_at_save\":{\"cooling_device\":null,\"detected_by\":\"max_freq did not move when set to the top OPP\",\"max_freq_read\":$(rk_jn "$rk_cs_r"),\"max_freq_saved\":$(rk_jn "$rk_cs_v")}"
        fi
    done <<EOF
$RK_CAPPED
EOF
}

# rk_cap_explains REL SAVED GOT: succeed when REL is a devfreq min_freq/max_freq that reads GOT,
# lower than SAVED, exactly at the OPP its node's cooling device caps at now; RK_V := the JSON
# fields that say so.
rk_cap_explains() {
    case $1 in sys/class/devfreq/*/max_freq | sys/class/devfreq/*/min_freq) ;; *) return 1 ;; esac
    case $2 in '' | *[!0-9]*) return 1 ;; esac
    case $3 in '' | *[!0-9]*) return 1 ;; esac
    [ "$3" -lt "$2" ] || return 1
    rk_ce_dir=${1%/*}
    rk_capped "${rk_ce_dir##*/}" || return 1
    rk_ce_state=$RK_V
    rk_read "$rk_ce_dir/available_frequencies" || return 1
    rk_state_freq "$RK_V" "$rk_ce_state" || return 1
    [ "$RK_V" = "$3" ] || return 1
    RK_V=",\"note\":$(rk_js "restored (thermal cap active: reads $3)"),\"thermal_cap\":{\"cooling_device\":$(rk_js "$RK_CDEV"),\"cur_state\":$rk_ce_state,\"cap_hz\":$3}"
}

# rk_load_explains REL SAVED GOT: succeed when REL is a devfreq cur_freq under a governor that
# follows load (anything but rknpu_ondemand and userspace): a different clock is then the
# governor's choice, not a failed restore; RK_V := the JSON note that says so.
rk_load_explains() {
    case $1 in sys/class/devfreq/*/cur_freq) ;; *) return 1 ;; esac
    rk_read "${1%/cur_freq}/governor" || return 1
    case $RK_V in rknpu_ondemand | userspace) return 1 ;; esac
    RK_V=",\"note\":$(rk_js "reads $3 Hz, $2 Hz at pin time: governor $RK_V sets it from load")"
}

# rk_limit_explains REL SAVED GOT: for a devfreq node without a usable cooling device, succeed
# when REL (min_freq, max_freq or cur_freq) reads GOT, lower than SAVED, while the node's max_freq
# reads lower than the max_freq restore just wrote and GOT is exactly that max_freq: a limit that
# is not ours (the system monitor's thermal cap) holds the node; RK_V := the JSON note.
rk_limit_explains() {
    case $1 in sys/class/devfreq/*/max_freq | sys/class/devfreq/*/min_freq | sys/class/devfreq/*/cur_freq) ;; *) return 1 ;; esac
    rk_below "$3" "$2" || return 1
    rk_le_dir=${1%/*}
    rk_cooling_of "${rk_le_dir##*/}" && return 1
    rk_state_get "$rk_le_dir/max_freq" || return 1
    rk_le_wrote=$RK_V
    rk_read "$rk_le_dir/max_freq" || return 1
    [ "$RK_V" = "$3" ] && rk_below "$RK_V" "$rk_le_wrote" || return 1
    RK_V=",\"note\":$(rk_js "restored (held at $3 by a limit that is not ours, e.g. a thermal cap; no cooling device shows it)"),\"thermal_cap\":{\"cooling_device\":null,\"cap_hz\":$3}"
}

# rk_state_save: save the current value of every file the plan may change, atomically (temp, mv).
# With a state file already present (a second pin), keep every saved value and add only new files.
rk_state_save() {
    rk_ss_tmp="$RK_STATE_DIR/.pin.state.$$"
    RK_CAPPED=
    rk_ss_had=
    [ -f "$RK_STATE_FILE" ] && rk_ss_had=1
    {
        if [ -n "$rk_ss_had" ]; then
            cat "$RK_STATE_FILE"
        else
            printf '%s\n#root=%s\n' "$RK_STATE_MAGIC" "$RK_ROOT"
        fi
        while IFS="$RK_TAB" read -r rk_ss_unit _ _ rk_ss_rel _; do
            rk_unit_files "$rk_ss_unit" "$rk_ss_rel"
            for rk_ss_f in $RK_V; do
                [ -f "$RK_ROOT/$rk_ss_f" ] || continue
                if [ -n "$rk_ss_had" ] && rk_state_get "$rk_ss_f"; then continue; fi
                rk_read "$rk_ss_f" || RK_V=
                case $rk_ss_f in
                    sys/class/devfreq/*/max_freq) rk_uncapped_max "$rk_ss_f" "$RK_V" ;;
                    sys/class/devfreq/*/cur_freq) rk_uncapped_cur "$rk_ss_f" "$RK_V" ;;
                esac
                printf '%s\t%s\n' "$rk_ss_f" "$RK_V"
            done
        done <<EOF
$RK_PLAN
EOF
    } >"$rk_ss_tmp" 2>/dev/null || { rm -f "$rk_ss_tmp"; return 1; }
    mv -f "$rk_ss_tmp" "$RK_STATE_FILE" 2>/dev/null || { rm -f "$rk_ss_tmp"; return 1; }
}

# rk_restore_write REL VALUE: write a saved value back; if the kernel refuses it verbatim, write
# its selected form (see the header).
rk_restore_write() {
    rk_write "$1" "$2" && return 0
    rk_rw_err=$RK_ERR
    rk_canon "$1" "$2"
    if [ "$RK_V" != "$2" ]; then rk_write "$1" "$RK_V" && return 0; fi
    RK_ERR=$rk_rw_err
    return 1
}

# rk_restore_core: write back every saved value in the kernel-safe order, verify each one and
# emit a record per file. Succeeds when all read back equal (then the state file is removed).
rk_restore_core() {
    rk_rc_lines=$(sed -n '3,$p' "$RK_STATE_FILE")
    # 1. hold each devfreq node at the clock it ran at (see the header), clamp-safe.
    while IFS="$RK_TAB" read -r rk_rc_rel rk_rc_val; do
        case $rk_rc_rel in
            sys/class/devfreq/*/cur_freq)
                case $rk_rc_val in '' | *[!0-9]*) continue ;; esac
                rk_set_range "${rk_rc_rel%/cur_freq}" "$rk_rc_val" "$rk_rc_val" || : ;;
        esac
    done <<EOF
$rk_rc_lines
EOF
    # 2. governors.
    while IFS="$RK_TAB" read -r rk_rc_rel rk_rc_val; do
        case $rk_rc_rel in
            */governor | */scaling_governor) rk_restore_write "$rk_rc_rel" "$rk_rc_val" || : ;;
        esac
    done <<EOF
$rk_rc_lines
EOF
    # 3. the rest (set_freq needs its governor back first), then min/max that had no partner.
    while IFS="$RK_TAB" read -r rk_rc_rel rk_rc_val; do
        case $rk_rc_rel in
            '' | */governor | */scaling_governor | sys/class/devfreq/*/cur_freq) ;;
            */max_freq) rk_state_get "${rk_rc_rel%/max_freq}/min_freq" || rk_restore_write "$rk_rc_rel" "$rk_rc_val" || : ;;
            */min_freq) rk_state_get "${rk_rc_rel%/min_freq}/max_freq" || rk_restore_write "$rk_rc_rel" "$rk_rc_val" || : ;;
            *) rk_restore_write "$rk_rc_rel" "$rk_rc_val" || : ;;
        esac
    done <<EOF
$rk_rc_lines
EOF
    # 4. devfreq min/max pairs, clamp-safe (after the governors: see the header).
    while IFS="$RK_TAB" read -r rk_rc_rel rk_rc_val; do
        case $rk_rc_rel in
            */max_freq)
                rk_rc_dir=${rk_rc_rel%/max_freq}
                if rk_state_get "$rk_rc_dir/min_freq"; then
                    rk_restore_range "$rk_rc_dir" "$RK_V" "$rk_rc_val" || :
                fi ;;
        esac
    done <<EOF
$rk_rc_lines
EOF
    # 5. verify (a value held lower by an active thermal cap counts as restored, see the header).
    rk_rc_bad=0
    rk_rc_capped=0
    while IFS="$RK_TAB" read -r rk_rc_rel rk_rc_val; do
        [ -n "$rk_rc_rel" ] || continue
        rk_canon "$rk_rc_rel" "$rk_rc_val"
        rk_rc_want=$RK_V
        if rk_read "$rk_rc_rel"; then
            rk_rc_got=$RK_V
            rk_canon "$rk_rc_rel" "$rk_rc_got"
        else
            rk_rc_got="(absent)"
            RK_V=$rk_rc_got
        fi
        if [ "$RK_V" = "$rk_rc_want" ]; then
            rk_emit knob "\"knob\":$(rk_js "$rk_rc_rel"),\"status\":\"restored\",\"wanted\":$(rk_js "$rk_rc_val"),\"actual\":$(rk_js "$rk_rc_got")"
        elif rk_load_explains "$rk_rc_rel" "$rk_rc_val" "$rk_rc_got"; then
            rk_emit knob "\"knob\":$(rk_js "$rk_rc_rel"),\"status\":\"restored\",\"wanted\":$(rk_js "$rk_rc_val"),\"actual\":$(rk_js "$rk_rc_got")$RK_V"
        elif rk_cap_explains "$rk_rc_rel" "$rk_rc_val" "$rk_rc_got" || rk_limit_explains "$rk_rc_rel" "$rk_rc_val" "$rk_rc_got"; then
            rk_rc_capped=$((rk_rc_capped + 1))
            rk_emit knob "\"knob\":$(rk_js "$rk_rc_rel"),\"status\":\"restored\",\"wanted\":$(rk_js "$rk_rc_val"),\"actual\":$(rk_js "$rk_rc_got")$RK_V"
        else
            rk_rc_bad=$((rk_rc_bad + 1))
            rk_emit knob "\"knob\":$(rk_js "$rk_rc_rel"),\"status\":\"failed\",\"wanted\":$(rk_js "$rk_rc_val"),\"actual\":$(rk_js "$rk_rc_got"),\"reason\":$(rk_js "read back $rk_rc_got, saved $rk_rc_val")"
        fi
    done <<EOF
$rk_rc_lines
EOF
    [ "$rk_rc_bad" -eq 0 ] || return 1
    rm -f "$RK_STATE_FILE"
}

# rk_why_not_writable SCRIPT: RK_V := what kind of refusal, RK_ERR := what to do about it. Root
# is refused only by a read-only mount (containers often mount /proc/sys so).
rk_why_not_writable() {
    if [ "$(id -u 2>/dev/null)" = 0 ]; then
        RK_V="read-only"
        RK_ERR="a read-only mount even for root; remount it read-write"
    else
        RK_V="permission denied"
        RK_ERR="run $1 as root"
    fi
}

# rk_restore_precheck: die (exit 3, nothing changed) when a saved file is not writable.
rk_restore_precheck() {
    while IFS="$RK_TAB" read -r rk_rp_rel _; do
        case $rk_rp_rel in '#'* | '' | sys/class/devfreq/*/cur_freq) continue ;; esac
        if [ -e "$RK_ROOT/$rk_rp_rel" ] && [ ! -w "$RK_ROOT/$rk_rp_rel" ]; then
            rk_why_not_writable restore.sh
            rk_die 3 "$RK_V: cannot write $RK_ROOT/$rk_rp_rel ($RK_ERR); nothing was changed, state kept in $RK_STATE_FILE"
        fi
    done <"$RK_STATE_FILE"
}

# ---- entry points ---------------------------------------------------------------------------------

# rk_pin_main: plan, check, save, apply, read back, report. Exit codes: see pin.sh.
rk_pin_main() {
    # A dropped connection must not cut a pin or restore in half: finish, then report (or not).
    trap '' HUP PIPE
    rk_check_env
    RK_PLAN=
    RK_WERR=
    RK_PERM=
    rk_plan_cpu
    rk_plan_devfreq
    rk_plan_vm
    # Nothing has changed yet: refuse now if we could not change (or not save) everything.
    while IFS="$RK_TAB" read -r rk_pm_unit rk_pm_class rk_pm_knob rk_pm_rel rk_pm_want; do
        rk_unit_writes "$rk_pm_unit" "$rk_pm_rel" "$rk_pm_want"
        for rk_pm_f in $RK_V; do
            if [ ! -w "$RK_ROOT/$rk_pm_f" ]; then
                if [ -e "$RK_ROOT/$rk_pm_f" ]; then
                    rk_why_not_writable pin.sh
                    rk_die 3 "$RK_V: cannot write $RK_ROOT/$rk_pm_f ($RK_ERR); nothing was changed"
                fi
                rk_die 3 "$RK_ROOT/$rk_pm_f is missing; nothing was changed"
            fi
        done
    done <<EOF
$RK_PLAN
EOF
    if ! mkdir -p "$RK_STATE_DIR" 2>/dev/null || [ ! -w "$RK_STATE_DIR" ]; then
        rk_die 3 "cannot write the state directory $RK_STATE_DIR (run pin.sh as root or set RKDET_STATE_DIR); nothing was changed"
    fi
    rk_pm_kept=
    if [ -f "$RK_STATE_FILE" ]; then
        rk_state_check
        rk_pm_kept=1
    fi
    rk_state_save || rk_die 3 "cannot save the state file $RK_STATE_FILE; nothing was changed"
    if [ -n "$rk_pm_kept" ]; then
        rk_emit state "\"status\":\"kept\",\"path\":$(rk_js "$RK_STATE_FILE"),\"note\":\"a saved state existed: its original values are kept, only new files were added\""
    else
        rk_pm_capped=$(printf '%s' "$RK_CAPPED" | sed -n "s/$RK_TAB.*//p" | tr '\n' ' ')
        rk_pm_note=
        if [ -n "$rk_pm_capped" ]; then
            rk_pm_note=",\"thermal_capped\":$(rk_jarr "$rk_pm_capped"),\"note\":\"a thermal cap was active: the top OPP was saved as max_freq of the capped node(s), not the capped value\""
        fi
        rk_emit state "\"status\":\"saved\",\"path\":$(rk_js "$RK_STATE_FILE")$rk_pm_note"
    fi

    while IFS="$RK_TAB" read -r rk_pm_unit rk_pm_class rk_pm_knob rk_pm_rel rk_pm_want; do
        case $rk_pm_unit in '' | skip) continue ;; esac
        rk_apply "$rk_pm_unit" "$rk_pm_knob" "$rk_pm_rel" "$rk_pm_want"
    done <<EOF
$RK_PLAN
EOF
    if [ -n "$RK_PERM" ]; then
        # The kernel refused a write for lack of privilege: put everything back, then say so.
        rk_pm_sv=$RK_SCRIPT
        RK_SCRIPT=pin-rollback
        rk_restore_core || :
        RK_SCRIPT=$rk_pm_sv
        rk_werr_of "$RK_PERM"
        rk_die 3 "permission denied writing $RK_PERM ($RK_V); rolled back (run pin.sh as root)"
    fi

    rk_pm_failed=0
    rk_pm_set=0
    while IFS="$RK_TAB" read -r rk_pm_unit rk_pm_class rk_pm_knob rk_pm_rel rk_pm_want; do
        [ -n "$rk_pm_unit" ] || continue
        if [ "$rk_pm_unit" = skip ]; then
            rk_emit knob "\"knob\":$(rk_js "$rk_pm_knob"),\"class\":\"$rk_pm_class\",\"status\":\"skipped\",\"reason\":$(rk_js "$rk_pm_want")"
            continue
        fi
        if rk_report "$rk_pm_unit" "$rk_pm_class" "$rk_pm_knob" "$rk_pm_rel" "$rk_pm_want"; then
            rk_pm_set=$((rk_pm_set + 1))
        else
            rk_pm_failed=$((rk_pm_failed + 1))
        fi
    done <<EOF
$RK_PLAN
EOF
    if [ "$rk_pm_failed" -gt 0 ]; then
        rk_emit result "\"status\":\"partial\",\"exit\":1,\"set\":$rk_pm_set,\"failed\":$rk_pm_failed,\"reason\":$(rk_js "$rk_pm_failed knob(s) did not read back as pinned; state saved in $RK_STATE_FILE, restore.sh puts everything back")"
        printf '%s: %s knob(s) did not read back as pinned; restore.sh puts everything back\n' "$RK_SCRIPT" "$rk_pm_failed" >&2 || :
        exit 1
    fi
    rk_emit result "\"status\":\"ok\",\"exit\":0,\"set\":$rk_pm_set,\"failed\":0"
    exit 0
}

# rk_restore_main: put back exactly what pin saved. Exit codes: see restore.sh.
rk_restore_main() {
    trap '' HUP PIPE
    rk_check_env
    rm -f "$RK_STATE_DIR"/.pin.state.* 2>/dev/null || :
    if [ ! -f "$RK_STATE_FILE" ]; then
        rk_emit result "\"status\":\"ok\",\"exit\":0,\"restored\":0,\"note\":$(rk_js "nothing to restore: no saved state at $RK_STATE_FILE")"
        exit 0
    fi
    rk_state_check
    rk_restore_precheck
    if rk_restore_core; then
        rk_rm_note="every saved value read back; state file removed"
        if [ "$rk_rc_capped" -gt 0 ]; then
            rk_rm_note="every saved value read back ($rk_rc_capped held lower by an active thermal cap, which the kernel lifts when the board cools); state file removed"
        fi
        rk_emit result "\"status\":\"ok\",\"exit\":0,\"note\":$(rk_js "$rk_rm_note")"
        exit 0
    fi
    rk_emit result "\"status\":\"partial\",\"exit\":1,\"reason\":$(rk_js "$rk_rc_bad value(s) did not read back; state kept in $RK_STATE_FILE, run restore.sh again")"
    printf '%s: %s value(s) did not read back; state kept in %s\n' "$RK_SCRIPT" "$rk_rc_bad" "$RK_STATE_FILE" >&2 || :
    exit 1
}
