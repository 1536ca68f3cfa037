/* todist/slurm_env.h: from the facts Slurm gives one task to the
 * environment todist (and torchrun users) expect.
 *
 * This is the pure half of the SPANK plugin (`srun --todist`): option
 * parsing (the user's --todist=OPTIONS and the site's plugstack.conf
 * arguments) and the per-task mapping. The task's environment is read
 * through a td_env_lookup_fn and written through a td_env_set_fn, so the
 * same code runs in slurmstepd and in unit tests without Slurm. World
 * resolution itself is td_world_resolve()'s Slurm source (todist/world.h).
 * All functions here are thread-safe. */
#ifndef TODIST_SLURM_ENV_H
#define TODIST_SLURM_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <todist/rank_env.h>
#include <todist/status.h>
#include <todist/world.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TD_BIND_CLOSEST = 0,   /* one GPU per task by local rank; the library
                            * places CPUs/NICs from TODIST_BIND=closest */
    TD_BIND_NONE    = 1    /* leave CUDA_VISIBLE_DEVICES and affinity alone */
} td_bind_t;

typedef struct {
    bool      enabled;     /* --todist given, or the site's default=on */
    bool      verbose;     /* print each task's mapping on stderr */
    uint16_t  port;        /* fixed MASTER_PORT (store: port + 1); 0:
                            * reserved by Slurm or derived from ids */
    uint16_t  store_port;  /* fixed store port; 0: as above */
    uint16_t  port_lo;     /* range for derived ports */
    uint16_t  port_hi;
    td_bind_t bind;
    bool      torchrun;    /* also export RANK, WORLD_SIZE, ... */
    bool      kill_on_fail;/* a failing task stops the step */
} td_slurm_opts_t;

/* Built-in defaults: disabled, quiet, reserved or derived ports in
 * TD_PORT_RANGE_LO..TD_PORT_RANGE_HI, bind=closest, torchrun=yes,
 * kill_on_fail=yes. */
void td_slurm_opts_init(td_slurm_opts_t *opts);

/* Apply the site's plugstack.conf arguments (default=on|off,
 * port_range=LO-HI, bind=closest|none, torchrun=yes|no,
 * kill_on_fail=yes|no) to OPTS. On error
 * OPTS is unchanged and the message names the argument. */
td_status_t td_slurm_opts_site(int argc, char *const *argv,
                               td_slurm_opts_t *opts);

/* Apply the user's --todist[=OPTIONS] (a comma list of verbose, port=N,
 * store_port=N, bind=closest|none, torchrun=yes|no, kill_on_fail=yes|no;
 * NULL or "" means the defaults) and
 * set opts->enabled. On error OPTS is unchanged and the message names the
 * option. */
td_status_t td_slurm_opts_user(const char *optarg, td_slurm_opts_t *opts);

/* What td_slurm_env_map() decided for one task (for messages and tests). */
typedef struct {
    td_world_t world;
    char       gpu[64];        /* the chosen CUDA_VISIBLE_DEVICES entry, or "" */
    bool       gpu_chosen;     /* true: picked one of several; false: kept */
    int        omp_threads;    /* 0: OMP_NUM_THREADS was already set */
} td_slurm_task_t;

/* Map one task's Slurm environment (SLURM_PROCID, SLURM_LOCALID,
 * SLURM_NODEID, SLURM_STEP_NUM_TASKS/SLURM_NTASKS, SLURM_STEP_NUM_NODES,
 * SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NODELIST, SLURM_JOB_ID,
 * SLURM_STEP_ID, SLURM_CPUS_PER_TASK, SLURM_CPUS_ON_NODE,
 * SLURM_STEP_RESV_PORTS, SLURM_RESTART_COUNT, CUDA_VISIBLE_DEVICES,
 * OMP_NUM_THREADS, and TODIST_JOB_TOKEN made on the srun side) to a
 * td_rank_env_t and exports it with td_rank_env_export(): the TODIST_*
 * variables, torchrun's names when opts->torchrun (TORCHELASTIC_RUN_ID is
 * "JOB.STEP"), OMP_NUM_THREADS when unset, and one GPU per task when
 * several are visible and opts->bind is closest. Inherited TODIST_* or
 * torchrun variables are ignored: Slurm's facts win. Every variable is
 * checked before the first SET call, so on error nothing was set. */
td_status_t td_slurm_env_map(td_env_lookup_fn lookup, void *lookup_arg,
                             const td_slurm_opts_t *opts,
                             td_env_set_fn set, void *set_arg,
                             td_slurm_task_t *task_p);

/* The step's store endpoint, as its task 0 maps it (td_slurm_env_map), for
 * a process of the step that is no task (slurmstepd on the step's first
 * node, which serves the store under kill_on_fail=no): the step's
 * variables of LOOKUP, with SLURM_PROCID, SLURM_LOCALID and SLURM_NODEID
 * taken as 0. Sets W (master_addr, master_port: the store's) and
 * *TOKEN_P (TODIST_JOB_TOKEN, pointing into LOOKUP's storage). */
td_status_t td_slurm_store_of(td_env_lookup_fn lookup, void *lookup_arg,
                              const td_slurm_opts_t *opts, td_world_t *w,
                              const char **token_p);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_SLURM_ENV_H */
