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
    bool      join;        /* join=[STEP]: replace lost ranks of a running
                            * kill_on_fail=no step of the job */
    uint32_t  join_step;   /* its step id, or TD_SLURM_JOIN_LATEST */
} td_slurm_opts_t;

/* --todist=join without a step: the job's latest step that can be joined. */
#define TD_SLURM_JOIN_LATEST UINT32_MAX

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
 * store_port=N, bind=closest|none, torchrun=yes|no, kill_on_fail=yes|no,
 * join[=STEP];
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

/* ---- joining a running step (--todist=join) ----------------------------
 * A kill_on_fail=no step's srun records the step for the job's later steps
 * (spank/srun.c: a file of the user's, 0600); a later `srun --todist=join`
 * reads it, asks slurmctld for the step's layout, and tells its tasks
 * where the step's store is and how its ranks were laid out
 * (TODIST_SPANK_JOIN, td_slurm_join_t); each task then takes a rank the
 * step lost (quorum.h Q12) and gets that rank's variables. */

/* The record: what only the step's srun knows (the token, the user's port
 * options), and which srun wrote it (its pid, its start time in clock
 * ticks after boot as /proc/PID/stat's field 22 gives it, its host), so
 * that a later srun on that host can tell a record whose srun was killed
 * before it could remove it (a stale one). Text: "todist-step v2 JOB STEP
 * PORT STORE_PORT PID START HOST TOKEN\n". A v1 record ("todist-step v1
 * JOB STEP PORT STORE_PORT TOKEN\n", before the srun was named) decodes
 * with pid 0: its srun cannot be checked. */
#define TD_SLURM_RECORD_HOST_MAX 64
typedef struct {
    uint32_t job, step;
    uint16_t port, store_port;               /* the step's options, 0: unset */
    uint32_t pid;                            /* the srun; 0: unknown (v1) */
    uint64_t start;                          /* its start, clock ticks */
    char     host[TD_SLURM_RECORD_HOST_MAX + 1];   /* its host ("" in v1) */
    char     token[TD_JOB_TOKEN_HEX + 1];
} td_slurm_record_t;

/* Into BUF (at least 256 bytes). The host must be 1 to 64 printable
 * characters without spaces. */
td_status_t td_slurm_record_encode(const td_slurm_record_t *r, char *buf,
                                   size_t len);
/* Rejects anything else, naming what. */
td_status_t td_slurm_record_decode(const char *text, td_slurm_record_t *r);

/* What a join step's tasks are told. Text (TODIST_SPANK_JOIN): "v1 JOB STEP
 * WORLD NNODES ADDR PORT TORCH_PORT LAYOUT", LAYOUT the ranks of each node,
 * e.g. "0,1;2,3" (every rank once). */
typedef struct {
    uint32_t job, step;
    int      world_size, nnodes;
    char     master_addr[TD_HOSTNAME_MAX];   /* the step's store */
    uint16_t master_port, torch_port;
    int     *node;        /* world_size entries: each rank's node */
    int     *local;       /* and its local rank there */
} td_slurm_join_t;

/* From the running step's facts: LOOKUP gives its SLURM_STEP_NODELIST,
 * SLURM_STEP_NUM_NODES, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NUM_TASKS,
 * SLURM_JOB_ID, SLURM_STEP_ID, SLURM_STEP_RESV_PORTS (as slurmctld tells
 * them) and TODIST_JOB_TOKEN (the record's); OPTS the plugin's, with the
 * record's port options; LAYOUT as above. The store endpoint is the one
 * td_slurm_store_of() gives the step itself. Free with td_slurm_join_free. */
td_status_t td_slurm_join_make(td_env_lookup_fn lookup, void *lookup_arg,
                               const td_slurm_opts_t *opts,
                               const char *layout, td_slurm_join_t *j);
td_status_t td_slurm_join_encode(const td_slurm_join_t *j, char **text_p);
td_status_t td_slurm_join_decode(const char *text, td_slurm_join_t *j);
void td_slurm_join_free(td_slurm_join_t *j);

/* Map one task of a join step as world rank RANK of J (the rank it took):
 * that rank's TODIST_* and torchrun variables as the running step's task
 * had them (its node, local rank and local size from J's layout; the
 * store's address; TORCHELASTIC_RUN_ID "JOB.STEP" of the running step),
 * TODIST_ELASTIC_JOIN=1 and TODIST_AGENT_STORE=1; the GPU and
 * OMP_NUM_THREADS from this task's own environment, as td_slurm_env_map.
 * TODIST_JOB_TOKEN must be the running step's (srun set it). */
td_status_t td_slurm_join_map(td_env_lookup_fn lookup, void *lookup_arg,
                              const td_slurm_opts_t *opts,
                              const td_slurm_join_t *j, int rank,
                              td_env_set_fn set, void *set_arg,
                              td_slurm_task_t *task_p);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_SLURM_ENV_H */
