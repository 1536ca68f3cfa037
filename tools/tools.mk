# tools: the launcher and the inspection commands.
bin_PROGRAMS += tools/todist-run tools/todist-info
tools_todist_run_SOURCES = tools/todist-run.c tools/rdzv.c tools/rdzv.h
tools_todist_run_LDADD = $(TD_LDADD)
tools_todist_info_SOURCES = tools/todist-info.c
tools_todist_info_LDADD = $(TD_LDADD)
dist_man_MANS += man/todist-run.1 man/todist-info.1
# bench/launch.sh: todist-run against torchrun (start, stop after a failure).
EXTRA_DIST += bench/launch.sh
# bench/elastic.sh: a rank's death to the restarted group's first step,
# todist-run against torchrun's elastic agent.
EXTRA_DIST += bench/elastic.sh bench/elastic_step.py
# bench/startup: td_init time per rank (store vs PMIx under srun).
check_PROGRAMS += bench/startup
EXTRA_DIST += bench/startup.sh bench/startup_torch.py
bench_startup_LDADD = $(TD_LDADD)
# bench/store_ops: the store's per-operation costs (docs/startup.md).
check_PROGRAMS += bench/store_ops
bench_store_ops_LDADD = $(TD_LDADD)
