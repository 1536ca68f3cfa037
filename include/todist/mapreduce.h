/* todist/mapreduce.h: TorchOpt's map-reduce API (torchopt.distributed) in C.
 *
 * A partitioner turns one call's arguments into (worker, arguments) parts;
 * the parts run as parallel remote calls; a reducer folds their results.
 *
 * Partitioners, with TorchOpt's exact semantics:
 *   - the dim partitioner (dim, exclusive, keepdim, workers): every tensor
 *     argument is sliced along DIM and all must agree on its size B (else
 *     TD_ERR_SHAPE naming both sizes); non-tensor arguments go whole to
 *     every part;
 *       not exclusive: B <= W gives B single-row parts (dim kept), B > W
 *       gives W contiguous chunks of B / W rows, the remainder in the last;
 *       exclusive: one part per index, with the dim kept (length 1) or
 *       removed (keepdim false);
 *       exclusive = false with keepdim = false is an error;
 *     parts go to the workers round-robin (W = the workers given, or every
 *     rank); no tensor arguments means one call on the caller;
 *   - the batch partitioner: dim 0, not exclusive, keepdim;
 *   - a fixed worker (rank or worker name): one call there, whole args;
 *   - a user function.
 * Reducers: mean and sum of the results item by item (tensors of one shape
 * are stacked and reduced, differentiably; integers and doubles are
 * reduced as doubles; other kinds, different lengths or shapes are
 * TD_ERR_SHAPE / TD_ERR_INVALID naming them), or a user function. Without
 * a reducer the value is every part's result list concatenated in part
 * order (one item per part for the usual one-tensor functions).
 *
 * A partitioned call carrying tensors that require grad inside a
 * distributed autograd context stays differentiable: slices are autograd
 * views and the calls go through RPC's autograd hooks.
 *
 * Thread safety: everything here is thread-safe; partitioner and reducer
 * values are plain data (a user function must be thread-safe itself). */
#ifndef TODIST_MAPREDUCE_H
#define TODIST_MAPREDUCE_H

#include <stddef.h>

#include <todist/status.h>
#include <todist/rpc.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One part: where it runs and its arguments (owned). */
typedef struct {
    int            rank;
    td_rpc_list_t *args;
} td_partition_t;

/* A user partitioner: fill *PARTS_P with a malloc'ed array of *N_P parts. */
typedef td_status_t (*td_partition_fn)(void *arg, const td_rpc_list_t *args,
                                       td_partition_t **parts_p, size_t *n_p);

typedef enum {
    TD_PARTITION_SELF = 0,   /* one call on the caller (the zero value) */
    TD_PARTITION_RANK = 1,
    TD_PARTITION_DIM  = 2,
    TD_PARTITION_USER = 3
} td_partitioner_kind_t;

typedef struct {
    td_partitioner_kind_t kind;
    int                   rank;       /* RANK */
    int                   dim;        /* DIM (negative counts from the end) */
    int                   exclusive;
    int                   keepdim;
    const int            *workers;    /* NULL: every rank; borrowed */
    int                   n_workers;
    td_partition_fn       fn;         /* USER */
    void                 *arg;
} td_partitioner_t;

td_partitioner_t td_partitioner_batch(void);
/* TD_ERR_INVALID for exclusive = 0 with keepdim = 0, or bad workers. */
td_status_t      td_partitioner_dim(int dim, int exclusive, int keepdim,
                                    const int *workers, int n_workers,
                                    td_partitioner_t *p);
td_partitioner_t td_partitioner_rank(int rank);
td_status_t      td_partitioner_worker(const char *name, td_partitioner_t *p);
td_partitioner_t td_partitioner_user(td_partition_fn fn, void *arg);

/* Apply P (NULL: self) to ARGS. Free the parts with td_partitions_free. */
td_status_t td_partition(const td_partitioner_t *p, const td_rpc_list_t *args,
                         td_partition_t **parts_p, size_t *n_p);
void        td_partitions_free(td_partition_t *parts, size_t n);

/* A user reducer: fold RESULTS[N] (borrowed) into OUT. */
typedef td_status_t (*td_reduce_fn)(void *arg,
                                    const td_rpc_list_t *const *results,
                                    size_t n, td_rpc_list_t *out);

typedef enum {
    TD_REDUCER_KIND_NONE = 0,     /* concatenate the results */
    TD_REDUCER_KIND_MEAN = 1,
    TD_REDUCER_KIND_SUM  = 2,
    TD_REDUCER_KIND_USER = 3
} td_reducer_kind_t;

typedef struct {
    td_reducer_kind_t kind;
    td_reduce_fn      fn;
    void             *arg;
} td_reducer_t;

td_reducer_t td_reducer_mean(void);
td_reducer_t td_reducer_sum(void);
td_reducer_t td_reducer_user(td_reduce_fn fn, void *arg);
/* Apply R (NULL: concatenate) to RESULTS[N]; *OUT_P is a new list. */
td_status_t  td_reducer_apply(const td_reducer_t *r,
                       const td_rpc_list_t *const *results, size_t n,
                       td_rpc_list_t **out_p);

/* TorchOpt's remote_async_call / remote_sync_call: NAME is a registered
 * function; PARTITIONER and REDUCER may be NULL; TIMEOUT as in rpc.h. */
td_status_t td_remote_async_call(const char *name, const td_rpc_list_t *args,
                                 const td_partitioner_t *partitioner,
                                 const td_reducer_t *reducer, double timeout,
                                 td_future_t **fut_p);
td_status_t td_remote_sync_call(const char *name, const td_rpc_list_t *args,
                                const td_partitioner_t *partitioner,
                                const td_reducer_t *reducer, double timeout,
                                td_rpc_list_t **result_p);

/* TorchOpt's parallelize decorators: a registered function bound to its
 * partitioner and reducer, called like a local one:
 *     static const td_parallel_t loss_fn =
 *         TD_PARALLELIZE("loss", TD_PARTITIONER_BATCH, TD_REDUCER_MEAN);
 *     td_parallel_call(&loss_fn, args, &result);
 * (the TD_PARTITIONER_* / TD_REDUCER_* macros are brace initializers, so
 * the whole thing is a constant initializer; at run time any
 * td_partitioner_t / td_reducer_t value may be put in the fields.) */
typedef struct {
    const char       *name;
    td_partitioner_t  partitioner;
    td_reducer_t      reducer;
    double            timeout;
} td_parallel_t;

#define TD_PARTITIONER_BATCH \
    { TD_PARTITION_DIM, 0, 0, 0, 1, NULL, 0, NULL, NULL }
#define TD_PARTITIONER_SELF { TD_PARTITION_SELF, 0, 0, 0, 0, NULL, 0, NULL, NULL }
#define TD_REDUCER_MEAN { TD_REDUCER_KIND_MEAN, NULL, NULL }
#define TD_REDUCER_SUM  { TD_REDUCER_KIND_SUM, NULL, NULL }
#define TD_REDUCER_NONE { TD_REDUCER_KIND_NONE, NULL, NULL }
#define TD_PARALLELIZE(fn_name, part, red) \
    { (fn_name), part, red, TD_RPC_DEFAULT_TIMEOUT }

td_status_t td_parallel_call(const td_parallel_t *p,
                             const td_rpc_list_t *args,
                             td_rpc_list_t **result_p);
td_status_t td_parallel_call_async(const td_parallel_t *p,
                                   const td_rpc_list_t *args,
                                   td_future_t **fut_p);

/* A barrier of the workers RANKS[N] (every one of them must call it with
 * the same set, in the same order of barriers); RANKS NULL: all workers
 * (the same RPC barrier over ranks 0..n-1; td_barrier is the store's).
 * TD_ERR_TIMEOUT names the ranks that did not arrive. A member waiting at
 * the set's lowest rank holds none of its RPC handler threads there, so
 * any number of barriers may be in flight at once. */
td_status_t td_barrier_ranks(const int *ranks, int n, double timeout);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_MAPREDUCE_H */
