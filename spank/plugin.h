/* plugin.h: state shared by the parts of the SPANK plugin (todist.so).
 *
 * todist.c is the entry point Slurm sees: it registers --todist, parses the
 * plugstack.conf arguments and dispatches on spank_context(); srun.c is the
 * srun side (local context), stepd.c the slurmstepd side (remote context).
 * Slurm calls a plugin from one thread per process, so nothing here needs
 * locking. Every message starts with "todist:". */
#ifndef TODIST_SPANK_PLUGIN_H
#define TODIST_SPANK_PLUGIN_H

#include <stdbool.h>

#include <slurm/spank.h>

#include "todist/slurm_env.h"

typedef struct {
    td_slurm_opts_t opts;      /* site defaults, then the user's options */
    bool            site_ok;   /* plugstack.conf arguments parsed */
} plugin_state_t;

extern plugin_state_t todist_state;

/* srun side: make the job token every task of the step shares, and with
 * kill_on_fail=no record the step for --todist=join; or, with join, pass
 * the tasks the running step's store, layout and token. */
int todist_srun_user_init(spank_t sp);
/* srun side, at exit: remove this step's join record. */
void todist_srun_exit(void);

/* slurmstepd side, in the task just before exec: export the mapping (with
 * join: take a rank the running step lost, and map the task as it). */
int todist_stepd_task_init(spank_t sp);

/* slurmstepd side, after a task ended: a failure stops the step, once
 * the output this slurmstepd holds has left. */
int todist_stepd_task_exit(spank_t sp);

/* slurmstepd side, before the tasks (kill_on_fail=no): the step's first
 * node serves the store; todist_stepd_exit stops it after the step. */
int todist_stepd_user_init(spank_t sp);
void todist_stepd_exit(void);

#endif /* TODIST_SPANK_PLUGIN_H */
