#!/bin/sh
# todist.so as Slurm loads it: it exports only the SPANK symbols (the td_*
# mapping code compiled in stays private), links neither libslurm nor
# libtodist, and needs nothing from the host process beyond the spank_*
# and slurm_* functions srun and slurmstepd provide (and libcrypto: the
# store's server, which slurmstepd runs under kill_on_fail=no).
. "$top_srcdir/tests/lib.sh"
so=$top_builddir/spank/.libs/todist.so
[ -f "$so" ] || skip_all "SPANK plugin not built (no slurm/spank.h)"
command -v nm >/dev/null 2>&1 && command -v readelf >/dev/null 2>&1 ||
    skip_all "nm/readelf (binutils) not installed"
plan 6

exports=$(nm -D --defined-only "$so" | awk '{print $3}' | sort | tr '\n' ' ')
is "$exports" "plugin_name plugin_type plugin_version slurm_spank_exit slurm_spank_init slurm_spank_init_post_opt slurm_spank_local_user_init slurm_spank_task_exit slurm_spank_task_init slurm_spank_user_init spank_plugin_version " \
    "exports exactly the SPANK symbols"
ok "$(nm -D --defined-only "$so" | grep ' td_' >/dev/null; [ $? = 1 ]; echo $?)" "no td_* symbol exported"
needed=$(readelf -d "$so" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')
ok "$(echo "$needed" | grep -E 'libslurm|libtodist' >/dev/null; [ $? = 1 ]; echo $?)" \
    "links no libslurm, no libtodist (NEEDED: $needed)"
# Everything todist-specific is compiled in: no undefined td_* (libtodist),
# UCX, hwloc or BLAS symbol; from the host only spank_*, spank.h's
# slurm_error, slurm_info and slurm_debug, slurm_signal_job_step (kill_on_fail; slurmstepd's libslurm has it) and
# the step queries of --todist=join (in srun, whose libslurm has them).
undef=$(nm -D --undefined-only "$so" | awk '{print $2}' |
        grep -E '^(td_|uc[pts]_|hwloc_|cblas_|slurm_|spank_)' |
        grep -Ev '^(spank_[a-z_]+|slurm_error|slurm_info|slurm_debug|slurm_signal_job_step|slurm_get_job_steps|slurm_free_job_step_info_response_msg|slurm_job_step_layout_get|slurm_job_step_layout_free)$' | tr '\n' ' ')
is "$undef" "" "no undefined todist, UCX, hwloc or Slurm-library symbol"
is "$(nm -D "$so" | awk '$2 == "R" && $3 == "plugin_type"' | wc -l)" 1 "plugin_type is data"
# Slurm's loader checks plugin_type == "spank"; read it from the file.
ok "$(strings "$so" 2>/dev/null | grep -x spank >/dev/null; echo $?)" "plugin_type string is 'spank'"
done_testing
