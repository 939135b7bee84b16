#!/bin/sh
# shellcheck source-path=SCRIPTDIR
# probe.sh - describe the board, machine-readably, without changing anything.
#
# Usage: probe.sh [-h]
# Prints one JSON line per finding: soc (device-tree compatible), kernel, cpu_policy (governors,
# frequencies, current), devfreq (NPU/GPU/DDR found by name: *.npu, *.gpu, dmc; devfreq0 as the
# NPU when nothing is named so; with its devfreq cooling device and cur_state, > 0 while a thermal
# cap holds it down), thermal (zones by type), cpuidle, rknpu (driver version, found by existence in
# debugfs /sys/kernel/debug/rknpu/version, else sysfs /sys/module/rknpu/version, else the kernel log's
# "[drm] Initialized rknpu X.Y.Z" line: `dmesg` on a board, $RKDET_ROOT/var/log/dmesg under a fake
# root; with its source, and the NPU load when readable), runtime (librknnrt.so / librknn_runtime.so
# version string), python (python3, its version, numpy's, and rknn-toolkit-lite's when `import
# rknnlite` works), vm (compaction_proactiveness,
# transparent hugepages), disk (free space of the work directory), state (a pin state left by a
# crashed run, or a running job's), identity (device-tree serial-number and /etc/machine-id: who the
# board is, whatever its address), lock (the board lock: free, held or stale, with its holder record;
# see lock.sh). Anything absent is a "missing" line with a reason, never an error.
#
# Environment:
#   RKDET_ROOT       prefix of /sys, /proc and /usr/lib (empty on a real board)
#   RKDET_STATE_DIR  where pin.sh keeps its state (default /run/rkdet)
#   RKDET_WORK_DIR   directory whose free space is reported (default: the current directory)
#   RKDET_PYTHON     the board's Python (default python3)
#
# Exit codes:
#   0  probed (missing pieces are reported, not fatal)
#   2  bad input: unknown option, relative RKDET_ROOT

set -eu
RK_SCRIPT=probe
RK_DIR=$(dirname -- "$0")
. "$RK_DIR/lib.sh"
. "$RK_DIR/lock.sh"

case ${1:-} in
    -h | --help) rk_usage "$0" ;;
    '') ;;
    *) rk_die 2 "unknown argument '$1'; see probe.sh --help" ;;
esac
rk_check_env

missing() { rk_emit missing "\"what\":$(rk_js "$1"),\"reason\":$(rk_js "$2")"; }

# SoC: NUL-separated compatible strings, board first, SoC last ("rockchip,rk3588").
# Octal ranges, not `tr -c '[:print:]'`: busybox 1.35 tr mangles printable bytes with -c and a class.
probe_soc() {
    for ps_rel in proc/device-tree/compatible sys/firmware/devicetree/base/compatible; do
        [ -r "$RK_ROOT/$ps_rel" ] || continue
        ps_list=$(tr '\000' '\n' <"$RK_ROOT/$ps_rel" | tr '\001-\011\013-\037\177-\377' ' ' | tr '\n' ' ')
        ps_soc=
        for ps_c in $ps_list; do
            case $ps_c in rockchip,*) ps_soc=${ps_c#rockchip,} ;; esac
        done
        ps_model=
        for ps_m in proc/device-tree/model sys/firmware/devicetree/base/model; do
            if [ -r "$RK_ROOT/$ps_m" ]; then
                ps_model=$(tr -d '\000' <"$RK_ROOT/$ps_m")
                break
            fi
        done
        rk_emit soc "\"soc\":$(if [ -n "$ps_soc" ]; then rk_js "$ps_soc"; else printf null; fi),\"compatible\":$(rk_jarr "$ps_list"),\"model\":$(rk_js "$ps_model"),\"source\":$(rk_js "/$ps_rel")"
        return 0
    done
    missing soc "no device-tree compatible under /proc/device-tree or /sys/firmware/devicetree/base"
}

# Identity: the SoC's serial (device tree, from the efuse CPU id on Rockchip boards) and machine-id, so
# the results database keys a board by what it is, not by its address. Printable ASCII only.
probe_identity() {
    pi_serial=''
    pi_src=''
    for pi_rel in proc/device-tree/serial-number sys/firmware/devicetree/base/serial-number; do
        [ -r "$RK_ROOT/$pi_rel" ] || continue
        pi_serial=$(tr -d '\000' <"$RK_ROOT/$pi_rel" | tr -cd '0-9A-Za-z._:-' | cut -c1-64)
        pi_src=/$pi_rel
        break
    done
    pi_mid=''
    if [ -r "$RK_ROOT/etc/machine-id" ]; then
        pi_mid=$(tr -cd '0-9a-f' <"$RK_ROOT/etc/machine-id" | cut -c1-64)
    fi
    if [ -z "$pi_serial" ] && [ -z "$pi_mid" ]; then
        missing identity "no device-tree serial-number and no /etc/machine-id"
        return 0
    fi
    rk_emit identity "\"serial\":$(if [ -n "$pi_serial" ]; then rk_js "$pi_serial"; else printf null; fi),\"machine_id\":$(if [ -n "$pi_mid" ]; then rk_js "$pi_mid"; else printf null; fi),\"source\":$(rk_js "${pi_src:-/etc/machine-id}")"
}

probe_kernel() {
    if rk_read proc/sys/kernel/osrelease; then
        rk_emit kernel "\"release\":$(rk_js "$RK_V")"
    else
        missing kernel "/proc/sys/kernel/osrelease not readable"
    fi
}

probe_cpu() {
    rk_cpu_policies
    if [ -z "$RK_V" ]; then
        missing cpufreq "no cpufreq policy under /sys/devices/system/cpu/cpufreq"
        return 0
    fi
    for pc_rel in $RK_V; do
        pc_body="\"name\":$(rk_js "${pc_rel##*/}")"
        for pc_f in affected_cpus:cpus:n scaling_available_governors:governors:s scaling_available_frequencies:frequencies_khz:n; do
            pc_file=${pc_f%%:*}; pc_rest=${pc_f#*:}
            rk_read "$pc_rel/$pc_file" || RK_V=
            pc_body="$pc_body,\"${pc_rest%:*}\":$(rk_jarr "$RK_V" "${pc_rest#*:}")"
        done
        rk_clock_read cpufreq "$pc_rel"  # lib.sh's one clock reader (run-steps.sh's too)
        pc_body="$pc_body,$(rk_clock_json _khz)"
        rk_emit cpu_policy "$pc_body"
    done
}

probe_devfreq() {
    rk_devfreq_nodes
    pd_nodes=$RK_V
    for pd_nk in $pd_nodes; do
        pd_name=${pd_nk%:*}
        pd_rel=sys/class/devfreq/$pd_name
        pd_body="\"name\":$(rk_js "$pd_name"),\"kind\":\"${pd_nk##*:}\""
        rk_read "$pd_rel/available_governors" || RK_V=
        pd_body="$pd_body,\"governors\":$(rk_jarr "$RK_V")"
        rk_read "$pd_rel/available_frequencies" || RK_V=
        pd_body="$pd_body,\"frequencies_hz\":$(rk_jarr "$RK_V" n)"
        rk_clock_read devfreq "$pd_rel"  # lib.sh's one clock reader (run-steps.sh's too)
        pd_body="$pd_body,$(rk_clock_json _hz)"
        if rk_cooling_of "$pd_name"; then  # cooling_state > 0: a thermal cap holds max_freq down now
            pd_body="$pd_body,\"cooling_device\":$(rk_js "$RK_CDEV"),\"cooling_state\":$(rk_jn "$RK_V")"
        fi
        rk_emit devfreq "$pd_body"
    done
    for pd_kind in npu gpu ddr; do
        case " $pd_nodes " in
            *":$pd_kind "*) ;;
            *) missing "$pd_kind" "no $pd_kind devfreq node under /sys/class/devfreq" ;;
        esac
    done
}

probe_thermal() {
    pt_n=0
    for pt_z in "$RK_ROOT"/sys/class/thermal/thermal_zone*; do
        [ -d "$pt_z" ] || continue
        pt_rel=${pt_z#"$RK_ROOT"/}
        rk_read "$pt_rel/type" || RK_V=
        pt_type=$RK_V
        rk_read "$pt_rel/temp" || RK_V=
        rk_emit thermal "\"type\":$(rk_js "$pt_type"),\"zone\":$(rk_js "${pt_z##*/}"),\"millicelsius\":$(rk_jn "$RK_V")"
        pt_n=$((pt_n + 1))
    done
    [ "$pt_n" -gt 0 ] || missing thermal "no thermal zone under /sys/class/thermal"
}

probe_cpuidle() {
    for pi_c in "$RK_ROOT"/sys/devices/system/cpu/cpu[0-9]*; do
        [ -d "$pi_c/cpuidle" ] || continue
        pi_names=
        pi_dis=
        for pi_s in "$pi_c"/cpuidle/state[0-9]*; do
            pi_rel=${pi_s#"$RK_ROOT"/}
            rk_read "$pi_rel/name" || RK_V="?"
            pi_names="$pi_names $RK_V"
            rk_read "$pi_rel/disable" || RK_V=
            pi_dis="$pi_dis $RK_V"
        done
        rk_emit cpuidle "\"cpu\":$(rk_js "${pi_c##*/}"),\"states\":$(rk_jarr "$pi_names"),\"disabled\":$(rk_jarr "$pi_dis" n)"
    done
}

# The kernel log: `dmesg` on a real board (RKDET_ROOT empty; it may need root), else the boot log file.
rknpu_kernel_log() {
    if [ -z "$RK_ROOT" ] && command -v dmesg >/dev/null 2>&1 && dmesg 2>/dev/null; then
        return 0
    fi
    [ -r "$RK_ROOT/var/log/dmesg" ] && cat "$RK_ROOT/var/log/dmesg" 2>/dev/null
}

probe_rknpu() {
    pr_dir=sys/kernel/debug/rknpu
    pr_ver=
    pr_src=
    if [ -r "$RK_ROOT/$pr_dir/version" ] && pr_v=$(cat "$RK_ROOT/$pr_dir/version" 2>/dev/null) && [ -n "$pr_v" ]; then
        pr_ver=$pr_v; pr_src=debugfs
    elif [ -r "$RK_ROOT/sys/module/rknpu/version" ] && pr_v=$(cat "$RK_ROOT/sys/module/rknpu/version" 2>/dev/null) && [ -n "$pr_v" ]; then
        pr_ver=$pr_v; pr_src=sysfs
    else
        pr_v=$(rknpu_kernel_log | grep -o 'Initialized rknpu [0-9][0-9.]*' | tail -n 1) || pr_v=
        if [ -n "$pr_v" ]; then
            pr_ver=${pr_v#Initialized }; pr_src=dmesg
        fi
    fi
    pr_load=null
    if [ -r "$RK_ROOT/$pr_dir/load" ] && pr_v=$(cat "$RK_ROOT/$pr_dir/load" 2>/dev/null); then
        pr_load=$(rk_js "$pr_v")
    fi
    if [ -z "$pr_src" ] && [ "$pr_load" = null ]; then
        missing rknpu "no rknpu driver version in /$pr_dir/version (debugfs: not mounted or not root), /sys/module/rknpu/version or the kernel log"
        return 0
    fi
    rk_emit rknpu "\"version\":$(if [ -n "$pr_ver" ]; then rk_js "$pr_ver"; else printf null; fi),\"source\":$(if [ -n "$pr_src" ]; then rk_js "$pr_src"; else printf null; fi),\"load\":$pr_load"
}

probe_runtime() {
    for pu_rel in usr/lib/librknnrt.so usr/lib64/librknnrt.so usr/lib/aarch64-linux-gnu/librknnrt.so \
        usr/lib/librknn_runtime.so usr/lib/arm-linux-gnueabihf/librknn_runtime.so; do
        [ -f "$RK_ROOT/$pu_rel" ] || continue
        pu_v=$(tr '\000-\037\177-\377' '\n' <"$RK_ROOT/$pu_rel" | grep -E 'librknnrt version|librknn_runtime version' | head -n 1) || pu_v=
        rk_emit runtime "\"library\":$(rk_js "/$pu_rel"),\"version\":$(if [ -n "$pu_v" ]; then rk_js "$pu_v"; else printf null; fi)"
        return 0
    done
    missing runtime "no librknnrt.so or librknn_runtime.so under /usr/lib"
}

probe_python() {
    py=${RKDET_PYTHON:-python3}
    if ! command -v "$py" >/dev/null 2>&1; then
        missing python "$py not found on PATH"
        return 0
    fi
    # One interpreter start (they cost ~0.1 s each on a board): version, then the import.
    # Versions by distribution metadata first (rknnlite has no __version__), module attribute last.
    pp_out=$("$py" -c 'import sys
print("python=%d.%d.%d" % sys.version_info[:3])
def dist(names, module):
    for name in names:
        try:
            try:
                from importlib.metadata import version
            except ImportError:
                from pkg_resources import get_distribution
                version = lambda n: get_distribution(n).version
            return version(name)
        except Exception:
            pass
    return getattr(module, "__version__", "") or "unknown"
try:
    import numpy
    print("numpy=" + dist(["numpy"], numpy))
except Exception:
    pass
try:
    import rknnlite
    print("rknnlite=" + dist(["rknn-toolkit-lite2", "rknn_toolkit_lite2", "rknn-toolkit-lite"], rknnlite))
except Exception:
    pass' 2>/dev/null) || :
    pp_ver=
    pp_np=
    pp_lv=
    pp_lite=false
    for pp_w in $pp_out; do
        case $pp_w in
            python=*) pp_ver=${pp_w#python=} ;;
            numpy=*) pp_np=${pp_w#numpy=} ;;
            rknnlite=*) pp_lv=${pp_w#rknnlite=}; pp_lite=true ;;
        esac
    done
    rk_emit python "\"python\":$(rk_js "$py"),\"version\":$(rk_js "$pp_ver"),\"rknnlite\":$pp_lite,\"rknnlite_version\":$(if [ -n "$pp_lv" ]; then rk_js "$pp_lv"; else printf null; fi),\"numpy\":$(if [ -n "$pp_np" ]; then rk_js "$pp_np"; else printf null; fi)"
}

probe_vm() {
    if rk_read proc/sys/vm/compaction_proactiveness; then
        pv_c=$(rk_jn "$RK_V")
    else
        pv_c=null
        rk_no_compaction_reason
        missing compaction_proactiveness "$RK_V"
    fi
    if rk_read sys/kernel/mm/transparent_hugepage/enabled; then
        rk_canon x "$RK_V"
        pv_t=$(rk_js "$RK_V")
    else
        pv_t=null
        missing thp "no /sys/kernel/mm/transparent_hugepage/enabled"
    fi
    rk_emit vm "\"compaction_proactiveness\":$pv_c,\"thp\":$pv_t"
}

probe_disk() {
    pk_dir=${RKDET_WORK_DIR:-.}
    if [ ! -d "$pk_dir" ]; then
        missing disk "work directory $pk_dir does not exist"
        return 0
    fi
    pk_free=$(df -Pk "$pk_dir" 2>/dev/null | awk 'NR == 2 { print $4 }') || pk_free=
    rk_emit disk "\"work_dir\":$(rk_js "$pk_dir"),\"free_kb\":$(rk_jn "$pk_free")"
}

probe_state() {
    if [ -f "$RK_STATE_FILE" ]; then
        rk_emit state "\"pinned\":true,\"path\":$(rk_js "$RK_STATE_FILE"),\"note\":\"a pin state exists: a run did not restore; run restore.sh\""
    else
        rk_emit state "\"pinned\":false,\"path\":$(rk_js "$RK_STATE_FILE")"
    fi
}

probe_soc
probe_identity
probe_kernel
probe_cpu
probe_devfreq
probe_thermal
probe_cpuidle
probe_rknpu
probe_runtime
probe_python
probe_vm
probe_disk
probe_state
rk_lock_emit
rk_emit result '"status":"ok","exit":0'
