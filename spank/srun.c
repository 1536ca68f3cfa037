/* srun.c: the plugin's srun side (local context). It makes the step's job
 * token once, so that every task gets the same one: in srun,
 * spank_setenv() does not apply, but srun's own environment travels to
 * every task. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "spank/plugin.h"

int
todist_srun_user_init(spank_t sp)
{
    char token[TD_JOB_TOKEN_HEX + 1];

    (void)sp;
    if (td_job_token_make(token, sizeof(token)) != TD_OK) {
        slurm_error("todist: %s", td_last_error());
        return -1;
    }
    /* A fresh token per step: an inherited one (sbatch's, an outer srun's)
     * belongs to another world. */
    if (setenv("TODIST_JOB_TOKEN", token, 1) != 0) {
        slurm_error("todist: cannot set TODIST_JOB_TOKEN in srun's "
                    "environment");
        memset(token, 0, sizeof(token));
        return -1;
    }
    memset(token, 0, sizeof(token));
    return 0;
}
