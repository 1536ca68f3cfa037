/* todist/rank_env.h: the environment a launcher gives one rank.
 *
 * Both launchers, todist-run and the SPANK plugin (`srun --todist`), decide
 * the facts of a rank (its world, the two rendezvous ports, the job token,
 * placement and thread count) their own way, then hand them to
 * td_rank_env_export(), the one place that knows which variables carry
 * them: the TODIST_* names td_init reads, torchrun's names (including the
 * elastic ones) for PyTorch programs, OMP_NUM_THREADS and the GPU choice.
 *
 * Invariants:
 *  1. todist's store port (TODIST_MASTER_PORT) and torch's MASTER_PORT are
 *     different numbers whenever both are exported, so a program may call
 *     td_init and torch's init_process_group(env://) side by side.
 *  2. Every value is formatted and checked before the first SET call: on
 *     error nothing was set.
 *  3. A variable the launcher does not decide (token NULL, bind NULL,
 *     omp_threads 0) is left as the environment has it.
 * All functions here are thread-safe. */
#ifndef TODIST_RANK_ENV_H
#define TODIST_RANK_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <todist/status.h>
#include <todist/world.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The job token: 256 random bits as 64 lowercase hex digits. */
#define TD_JOB_TOKEN_BYTES 32
#define TD_JOB_TOKEN_HEX   (2 * TD_JOB_TOKEN_BYTES)

/* Sets NAME=VALUE in some environment; 0 on success. */
typedef int (*td_env_set_fn)(const char *name, const char *value, void *arg);

/* What one rank is told. */
typedef struct {
    const td_world_t *world;   /* rank, sizes, master address; master_port
                                * is todist's store (TODIST_MASTER_PORT) */
    uint16_t    torch_port;    /* torchrun's MASTER_PORT (invariant 1) */
    bool        torchrun;      /* also torchrun's names */
    const char *token;         /* TODIST_JOB_TOKEN; NULL: leave it */
    const char *bind;          /* TODIST_BIND (closest|none); NULL: leave */
    int         omp_threads;   /* > 0: OMP_NUM_THREADS; 0: leave it */
    const char *gpu;           /* TODIST_GPU; NULL: none chosen */
    bool        gpu_visible;   /* also CUDA_VISIBLE_DEVICES=gpu */
    bool        gpu_ordinal;   /* also GPU_DEVICE_ORDINAL=gpu */
    int         restart_count; /* TODIST_RESTART_COUNT,
                                * TORCHELASTIC_RESTART_COUNT */
    int         max_restarts;  /* TORCHELASTIC_MAX_RESTARTS */
    const char *run_id;        /* TORCHELASTIC_RUN_ID; NULL: "none" */
} td_rank_env_t;

/* Export RE through SET: TODIST_RANK, TODIST_WORLD_SIZE, TODIST_LOCAL_RANK,
 * TODIST_LOCAL_WORLD_SIZE, TODIST_NODE_RANK, TODIST_NNODES,
 * TODIST_MASTER_ADDR, TODIST_MASTER_PORT, TODIST_RESTART_COUNT, and as RE
 * says TODIST_JOB_TOKEN, TODIST_BIND, OMP_NUM_THREADS, TODIST_GPU,
 * CUDA_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL; with re->torchrun also RANK,
 * LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,
 * ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, MASTER_PORT,
 * TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT and
 * TORCHELASTIC_MAX_RESTARTS, with torchrun's meanings (one role named
 * "default": role rank = rank, group = node). Errors name the variable. */
td_status_t td_rank_env_export(const td_rank_env_t *re, td_env_set_fn set,
                               void *set_arg);

/* OMP_NUM_THREADS for a rank that shares CPUS cores with LOCAL_RANKS-1
 * others: cpus / local_ranks, at least 1. */
int td_omp_threads_default(int cpus, int local_ranks);

/* Fill BUF (at least TD_JOB_TOKEN_HEX + 1 bytes) with a fresh token from
 * the kernel's random source. */
td_status_t td_job_token_make(char *buf, size_t len);

/* True when TOKEN is exactly TD_JOB_TOKEN_HEX hex digits. */
bool td_job_token_valid(const char *token);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_RANK_ENV_H */
