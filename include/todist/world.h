/* todist/world.h: who am I in the job? Process-group resolution.
 *
 * td_world_resolve() is a pure function from an environment (given as a
 * lookup callback) to a world description; the library, todist-info and the
 * SPANK plugin all use it. Sources, first match wins:
 *   1. TODIST_RANK, TODIST_WORLD_SIZE, TODIST_LOCAL_RANK,
 *      TODIST_LOCAL_WORLD_SIZE, TODIST_NODE_RANK, TODIST_NNODES,
 *      TODIST_MASTER_ADDR, TODIST_MASTER_PORT;
 *   2. torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
 *      MASTER_ADDR, MASTER_PORT (torchrun's agent serves its store there,
 *      so todist's store takes TODIST_MASTER_PORT or else MASTER_PORT + 1);
 *   3. Slurm's SLURM_PROCID, SLURM_NTASKS/SLURM_NPROCS, SLURM_LOCALID,
 *      SLURM_NODEID, SLURM_STEP_NUM_NODES/SLURM_NNODES,
 *      SLURM_STEP_TASKS_PER_NODE/SLURM_TASKS_PER_NODE,
 *      SLURM_STEP_NODELIST/SLURM_NODELIST, SLURM_JOB_ID, SLURM_STEP_ID,
 *      SLURM_STEP_RESV_PORTS (ports: see below);
 *   4. otherwise a world of one.
 * A source is selected by its rank variable; once selected, its other
 * required variables must be present (a source given in part is an error).
 * All functions here are thread-safe. */
#ifndef TODIST_WORLD_H
#define TODIST_WORLD_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include <todist/status.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_HOSTNAME_MAX    256
#define TD_WORKER_NAME_MAX 32

/* Ports of a Slurm step. With Slurm's reservation (SLURM_STEP_RESV_PORTS,
 * from MpiParams=ports=... and srun --resv-ports) the first reserved port
 * is torch's MASTER_PORT and the second todist's store; nothing else on
 * the node gets them. Without it the pair is derived from the job and step
 * ids within TODIST_PORT_RANGE=LO-HI (default 20000-29999, below Linux's
 * ephemeral range): pair k = (job_id * 101 + step_id) mod ((hi-lo+1)/2),
 * MASTER_PORT lo + 2k, store lo + 2k + 1. Equal in every task of a step;
 * steps of one job (up to 101) and jobs with nearby ids get different
 * pairs, but nothing stops another job from holding them. */
#define TD_PORT_RANGE_LO   20000
#define TD_PORT_RANGE_HI   29999

typedef enum {
    TD_WORLD_SOURCE_SINGLE   = 0,
    TD_WORLD_SOURCE_TODIST   = 1,
    TD_WORLD_SOURCE_TORCHRUN = 2,
    TD_WORLD_SOURCE_SLURM    = 3
} td_world_source_t;

typedef struct {
    int               rank;
    int               world_size;
    int               local_rank;
    int               local_world_size;
    int               node_rank;
    int               nnodes;
    char              master_addr[TD_HOSTNAME_MAX];
    uint16_t          master_port;     /* todist's store; 0 only in a world
                                        * of one */
    uint16_t          torch_port;      /* torch's MASTER_PORT, another port;
                                        * 0 when not known */
    td_world_source_t source;
    char              worker_name[TD_WORKER_NAME_MAX]; /* "worker3" */
} td_world_t;

/* Looks NAME up in some environment; NULL when unset. */
typedef const char *(*td_env_lookup_fn)(const char *name, void *arg);

/* Resolve the world from the environment seen through LOOKUP. On error the
 * message names the variable and its value. */
td_status_t td_world_resolve(td_env_lookup_fn lookup, void *arg,
                             td_world_t *world_p);

/* Resolve from an envp-style NULL-terminated array ("NAME=value"). */
td_status_t td_world_from_envp(char *const *envp, td_world_t *world_p);

/* Resolve from this process's environment (getenv). */
td_status_t td_world_from_env(td_world_t *world_p);

/* "todist", "torchrun", "slurm" or "single". */
const char *td_world_source_name(td_world_source_t source);

/* TorchOpt's worker name: "worker" + RANK zero-padded to the number of
 * digits of WORLD_SIZE (worker0..worker7; worker00..worker11). */
td_status_t td_worker_name(int rank, int world_size, char *buf, size_t len);

/* Deterministic store port for a Slurm step within [lo, hi] (see above;
 * torch's MASTER_PORT is the port below it). */
uint16_t td_world_slurm_port(uint64_t job_id, uint64_t step_id,
                             uint16_t lo, uint16_t hi);

/* Rank selection (TorchOpt's on_rank, not_on_rank, rank_zero_only,
 * rank_non_zero_only): true when the calling rank should run. */
bool td_on_ranks(const td_world_t *world, const int *ranks, size_t n);
bool td_not_on_ranks(const td_world_t *world, const int *ranks, size_t n);
bool td_rank_zero_only(const td_world_t *world);
bool td_rank_non_zero_only(const td_world_t *world);

/* ---- Slurm's compact notations (used by the SPANK plugin too) ---------- */

/* Expand a Slurm hostlist expression ("gpu[001-012,015]",
 * "rack[1-2]-n[01-02]", "a,b") into at most MAX host names. On success
 * *hosts_p is an array of *n_p malloc'ed strings, freed with
 * td_hostlist_free(). Errors name the expression and the position. */
td_status_t td_hostlist_expand(const char *expr, size_t max,
                               char ***hosts_p, size_t *n_p);
void td_hostlist_free(char **hosts, size_t n);

/* First host of a hostlist expression, without expanding the rest. */
td_status_t td_hostlist_first(const char *expr, char *buf, size_t len);

/* Parse SLURM_TASKS_PER_NODE ("2(x3),1") into per-node counts. On success
 * *counts_p (malloc'ed) holds *n_p entries. */
td_status_t td_tasks_per_node_parse(const char *expr, int **counts_p,
                                    size_t *n_p);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_WORLD_H */
