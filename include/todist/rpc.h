/* todist/rpc.h: remote calls between workers (torch.distributed.rpc in C).
 *
 * Functions are registered by name on every worker BEFORE td_init()
 * publishes the worker address (td_rpc_register); a call names the function
 * and the destination rank. Arguments and results are value lists
 * (td_rpc_list_t): an ordered list of tensors (any dtype; non-contiguous
 * ones are made contiguous on send; bodies travel zero-copy as transport
 * bodies), 64-bit integers, doubles, byte strings, strings and remote
 * references (todist/rref.h).
 *
 * Every call returns a future (td_future_t) that ends in a value, a remote
 * error ("Error on rank N (workerN): message", TD_ERR_REMOTE), a timeout
 * (TD_ERR_TIMEOUT) or a dead peer (TD_ERR_PEER naming it) - never silence.
 * Handlers run on a thread pool (td_rpc_set_threads; never the transport's
 * progress thread), so a handler may make remote calls of its own, nested
 * and to itself. A handler registered with TD_RPC_INLINE instead runs on
 * the thread that receives the call, without a hand-off (the fast path for
 * short handlers that never block; see td_rpc_register_flags).
 *
 * A thread waiting on a future (td_rpc_sync, td_future_wait) drives the
 * transport itself while it waits: no thread hand-off on the way back
 * (briefly, TODIST_RPC_SPIN_US or 50 us, when the progress mode is
 * blocking; for the whole wait when it is busy).
 *
 * Timeouts: TD_RPC_DEFAULT_TIMEOUT (< 0) means the default (60 s, set with
 * td_rpc_set_default_timeout or env TODIST_RPC_TIMEOUT); 0 means none.
 *
 * td_finalize() waits until no worker has calls in flight; calls made after
 * shutdown began fail with TD_ERR_STATE.
 *
 * Thread safety: td_rpc_register, td_rpc_set_threads and
 * td_rpc_set_default_timeout are for set-up before td_init (not
 * thread-safe). Everything else here is thread-safe: lists may be built on
 * one thread and read on another (not written concurrently), futures may be
 * waited on, polled and given callbacks from any thread. */
#ifndef TODIST_RPC_H
#define TODIST_RPC_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include <todist/status.h>
#include <todist/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_RPC_DEFAULT_TIMEOUT  (-1.0)  /* use the default timeout */
#define TD_RPC_NO_TIMEOUT       0.0
#define TD_RPC_NAME_MAX         128     /* bytes of a function name */

/* ---- value lists ------------------------------------------------------ */

typedef enum {
    TD_VALUE_TENSOR = 1,
    TD_VALUE_INT    = 2,
    TD_VALUE_DOUBLE = 3,
    TD_VALUE_BYTES  = 4,
    TD_VALUE_STRING = 5,
    TD_VALUE_RREF   = 6
} td_value_kind_t;

typedef struct td_rpc_list td_rpc_list_t;
typedef struct td_rref     td_rref_t;     /* todist/rref.h */

td_status_t td_rpc_list_create(td_rpc_list_t **list_p);
void        td_rpc_list_free(td_rpc_list_t *list);      /* NULL is a no-op */
/* Appends; tensors and remote references are retained, bytes and strings
 * copied. */
td_status_t td_rpc_list_add_tensor(td_rpc_list_t *list, td_tensor_t *t);
td_status_t td_rpc_list_add_int(td_rpc_list_t *list, int64_t v);
td_status_t td_rpc_list_add_double(td_rpc_list_t *list, double v);
td_status_t td_rpc_list_add_bytes(td_rpc_list_t *list, const void *data,
                                  size_t len);
td_status_t td_rpc_list_add_string(td_rpc_list_t *list, const char *s);
td_status_t td_rpc_list_add_rref(td_rpc_list_t *list, td_rref_t *rref);
/* A deep-enough copy: a new list sharing the tensors and references. */
td_status_t td_rpc_list_copy(const td_rpc_list_t *list, td_rpc_list_t **out);

size_t          td_rpc_list_len(const td_rpc_list_t *list);
td_value_kind_t td_rpc_list_kind(const td_rpc_list_t *list, size_t i);
/* Getters check the index and the kind (TD_ERR_RANGE / TD_ERR_INVALID,
 * naming both). Tensors, bytes, strings and references are borrowed from
 * the list. */
td_status_t td_rpc_list_tensor(const td_rpc_list_t *list, size_t i,
                               td_tensor_t **t_p);
td_status_t td_rpc_list_int(const td_rpc_list_t *list, size_t i,
                            int64_t *v_p);
td_status_t td_rpc_list_double(const td_rpc_list_t *list, size_t i,
                               double *v_p);
td_status_t td_rpc_list_bytes(const td_rpc_list_t *list, size_t i,
                              const void **data_p, size_t *len_p);
td_status_t td_rpc_list_string(const td_rpc_list_t *list, size_t i,
                               const char **s_p);
td_status_t td_rpc_list_rref(const td_rpc_list_t *list, size_t i,
                             td_rref_t **rref_p);
/* Replace item I (any kind) with tensor T (retained); used by distributed
 * autograd to swap received tensors for ones attached to a recv node. */
td_status_t td_rpc_list_set_tensor(td_rpc_list_t *list, size_t i,
                                   td_tensor_t *t);

/* ---- futures ------------------------------------------------------------ */

typedef struct td_future td_future_t;

/* A future completed by the caller (td_future_complete / td_future_fail);
 * RPC returns ones it completes itself. */
td_status_t  td_future_create(td_future_t **fut_p);
td_future_t *td_future_retain(td_future_t *fut);
void         td_future_release(td_future_t *fut);      /* NULL is a no-op */

/* Complete with VALUE (ownership passes to the future; NULL = empty list)
 * or fail with STATUS and a message. TD_ERR_STATE if already completed. */
td_status_t td_future_complete(td_future_t *fut, td_rpc_list_t *value);
td_status_t td_future_fail(td_future_t *fut, td_status_t status,
                           const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

bool td_future_done(const td_future_t *fut);
/* Wait up to TIMEOUT seconds (< 0: forever). Returns the future's status
 * once done (TD_OK or its error, with td_last_error() set to its text), or
 * TD_ERR_TIMEOUT when the wait (not the call) ran out. */
td_status_t td_future_wait(td_future_t *fut, double timeout);
/* After completion: the status, the value (borrowed; NULL on error) and
 * the error text ("" on success). */
td_status_t          td_future_status(const td_future_t *fut);
const td_rpc_list_t *td_future_value(const td_future_t *fut);
const char          *td_future_error(const td_future_t *fut);
/* Take the value out (the caller owns it; the future keeps an empty one).
 * Waits like td_future_wait(fut, -1). */
td_status_t td_future_take(td_future_t *fut, td_rpc_list_t **value_p);

/* Run CB(ARG, FUT) once FUT is done: for futures RPC completes, on a
 * handler-pool thread (never the progress thread); for td_future_complete /
 * td_future_fail, on the completing thread; at once on the calling thread
 * if FUT is already done. Callbacks run in the order they were added. */
typedef void (*td_future_cb)(void *arg, td_future_t *fut);
td_status_t td_future_then(td_future_t *fut, td_future_cb cb, void *arg);

/* A future done when all N futures are; its value is empty, its status the
 * first failure among them (in order), with that one's text. */
td_status_t td_future_collect_all(td_future_t *const *futs, size_t n,
                                  td_future_t **all_p);

/* ---- registration and calls ------------------------------------------- */

/* Who is calling a handler. */
typedef struct {
    int         caller;      /* rank */
    const char *name;        /* the function's registered name */
} td_rpc_call_info_t;

/* A handler: read ARGS (borrowed), append results to RESULT. A non-TD_OK
 * return with td_error() sends "Error on rank N (workerN): message" back. */
typedef td_status_t (*td_rpc_fn)(void *arg, const td_rpc_call_info_t *info,
                                 const td_rpc_list_t *args,
                                 td_rpc_list_t *result);

/* Register FN under NAME (1..TD_RPC_NAME_MAX-1 bytes) before td_init.
 * TD_ERR_EXISTS if NAME is taken, TD_ERR_STATE after td_init. */
td_status_t td_rpc_register(const char *name, td_rpc_fn fn, void *arg);

/* Flags of td_rpc_register_flags. */
enum {
    /* Run on the receiving thread (the progress thread, or a thread that
     * drives progress while it waits) instead of the pool: no hand-off, the
     * lowest latency. The handler must be short and must not block: a
     * wait on a future (td_rpc_sync, td_future_wait) in it fails with
     * TD_ERR_STATE; td_rpc_async and td_future_then work. Calls inside a
     * distributed autograd context still go to the pool. */
    TD_RPC_INLINE = 1u << 0
};

/* td_rpc_register with FLAGS (TD_RPC_INLINE, or 0: same as
 * td_rpc_register). TD_ERR_INVALID for an unknown flag. */
td_status_t td_rpc_register_flags(const char *name, td_rpc_fn fn, void *arg,
                                  unsigned flags);
/* An async handler (PyTorch's @rpc.functions.async_execution): read ARGS
 * (borrowed for this call only: retain what the future needs later) and
 * hand back in *FUT_P a future (the caller's reference passes to RPC):
 * RPC answers the call when it completes, with its value or its error as
 * any handler error. The pool thread is free as soon as the handler
 * returns: a chain of nested calls whose handlers return the futures of
 * their own calls holds no thread while it is in flight. A non-TD_OK
 * return answers at once with that error. */
typedef td_status_t (*td_rpc_async_fn)(void *arg,
                                       const td_rpc_call_info_t *info,
                                       const td_rpc_list_t *args,
                                       td_future_t **fut_p);

/* Register async handler FN under NAME before td_init (as
 * td_rpc_register). */
td_status_t td_rpc_register_async(const char *name, td_rpc_async_fn fn,
                                  void *arg);

/* Handler threads (default 4, env TODIST_RPC_THREADS), before td_init. */
td_status_t td_rpc_set_threads(int n);
/* Default timeout in seconds (default 60; 0 = none). */
td_status_t td_rpc_set_default_timeout(double seconds);
double      td_rpc_default_timeout(void);

/* Call NAME on rank DST with ARGS (may be NULL: no arguments; ARGS is not
 * modified and may be freed once the call returns). */
td_status_t td_rpc_async(int dst, const char *name, const td_rpc_list_t *args,
                         double timeout, td_future_t **fut_p);
/* Blocking form: *RESULT_P receives the result list (the caller frees);
 * RESULT_P may be NULL to drop it. NAME must have 1..TD_RPC_NAME_MAX-1
 * bytes (checked before anything is sent, as in td_rpc_async). */
td_status_t td_rpc_sync(int dst, const char *name, const td_rpc_list_t *args,
                        double timeout, td_rpc_list_t **result_p);

/* Worker names and ranks: "worker3" <-> 3. */
td_status_t td_rpc_worker_rank(const char *name, int *rank_p);
td_status_t td_rpc_worker_name(int rank, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_RPC_H */
