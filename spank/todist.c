/* todist.c: the SPANK plugin's entry points (`srun --todist[=OPTIONS]`).
 *
 * Registers --todist in every context that parses options (srun, sbatch,
 * salloc, and slurmstepd, which re-runs the option callback with srun's
 * argument), parses the site's plugstack.conf arguments, decides in
 * init_post_opt whether the step is wired, and dispatches: srun's side in
 * srun.c, slurmstepd's in stepd.c. Links no libslurm: slurmstepd and srun
 * provide the spank_* symbols. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "spank/plugin.h"

SPANK_PLUGIN(todist, 1);

plugin_state_t todist_state;

/* The user's --todist argument, kept until init_post_opt so that it is
 * applied on top of the site's defaults whatever the callback order. */
static char *user_optarg;
static bool user_given;

static int
option_cb(int val, const char *optarg, int remote)
{
    td_slurm_opts_t probe;
    char *copy;

    (void)val;
    (void)remote;
    td_slurm_opts_init(&probe);
    if (td_slurm_opts_user(optarg, &probe) != TD_OK) {
        slurm_error("todist: %s", td_last_error());
        return -1;
    }
    copy = strdup(optarg != NULL ? optarg : "");
    if (copy == NULL) {
        slurm_error("todist: out of memory");
        return -1;
    }
    free(user_optarg);
    user_optarg = copy;
    user_given = true;
    return 0;
}

static struct spank_option todist_option = {
    "todist", "[OPTIONS]",
    "Wire every task up for todist and torchrun (rank, world size, master "
    "address, job token, one GPU per task). OPTIONS: a comma list of "
    "verbose, port=N, store_port=N, bind=closest|none, torchrun=yes|no, "
    "kill_on_fail=yes|no, join[=STEP] (replace lost ranks of the job's "
    "running kill_on_fail=no step).",
    2, 0, option_cb
};

int
slurm_spank_init(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();
    spank_err_t err;

    td_slurm_opts_init(&todist_state.opts);
    if (td_slurm_opts_site(ac, av, &todist_state.opts) != TD_OK) {
        slurm_error("todist: %s", td_last_error());
        return -1;
    }
    todist_state.site_ok = true;

    if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE && ctx != S_CTX_ALLOCATOR) {
        return 0;
    }
    err = spank_option_register(sp, &todist_option);
    if (err != ESPANK_SUCCESS) {
        slurm_error("todist: cannot register --todist: %s", spank_strerror(err));
        return -1;
    }
    return 0;
}

int
slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)sp;
    (void)ac;
    (void)av;
    if (user_given &&
        td_slurm_opts_user(user_optarg, &todist_state.opts) != TD_OK) {
        /* Checked in the callback already; only memory can fail here. */
        slurm_error("todist: %s", td_last_error());
        return -1;
    }
    return 0;
}

int
slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!todist_state.opts.enabled || spank_context() != S_CTX_LOCAL) {
        return 0;
    }
    return todist_srun_user_init(sp);
}

int
slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    /* a join step's tasks use the running step's store */
    if (!todist_state.opts.enabled || todist_state.opts.kill_on_fail ||
        todist_state.opts.join || spank_context() != S_CTX_REMOTE) {
        return 0;
    }
    return todist_stepd_user_init(sp);
}

int
slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!todist_state.opts.enabled || spank_context() != S_CTX_REMOTE) {
        return 0;
    }
    return todist_stepd_task_init(sp);
}

int
slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!todist_state.opts.enabled || spank_context() != S_CTX_REMOTE ||
        (!todist_state.opts.kill_on_fail && !todist_state.opts.join)) {
        return 0;
    }
    return todist_stepd_task_exit(sp);
}

int
slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)sp;
    (void)ac;
    (void)av;
    if (spank_context() == S_CTX_REMOTE) {
        todist_stepd_exit();
    } else if (spank_context() == S_CTX_LOCAL) {
        todist_srun_exit();
    }
    free(user_optarg);
    user_optarg = NULL;
    user_given = false;
    return 0;
}
