/* mapreduce.c: partitioners, reducers, parallel calls and subset barriers
 * (todist/mapreduce.h), following torchopt.distributed.api line by line
 * where TorchOpt defines the behaviour. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "todist/mapreduce.h"
#include "todist/init.h"
#include "todist/ops.h"
#include "todist/rpc.h"
#include "todist/world.h"
#include "runtime/rpc/rpc_internal.h"
#include "runtime/rpc/mapreduce_internal.h"
#include "base/clock.h"

/* ---- partitioners -------------------------------------------------------- */

td_partitioner_t
td_partitioner_batch(void)
{
    td_partitioner_t p = TD_PARTITIONER_BATCH;

    return p;
}

td_status_t
td_partitioner_dim(int dim, int exclusive, int keepdim, const int *workers,
                   int n_workers, td_partitioner_t *p)
{
    if (!exclusive && !keepdim) {
        return td_error(TD_ERR_INVALID, "partitioner: keepdim must be true "
                        "when exclusive is false (dim %d)", dim);
    }
    if (workers != NULL && n_workers <= 0) {
        return td_error(TD_ERR_INVALID, "partitioner: %d workers given",
                        n_workers);
    }
    for (int i = 0; workers != NULL && i < n_workers; i++) {
        if (workers[i] < 0) {
            return td_error(TD_ERR_INVALID, "partitioner: worker %d is rank "
                            "%d", i, workers[i]);
        }
    }
    memset(p, 0, sizeof(*p));
    p->kind = TD_PARTITION_DIM;
    p->dim = dim;
    p->exclusive = exclusive != 0;
    p->keepdim = keepdim != 0;
    p->workers = workers;
    p->n_workers = workers != NULL ? n_workers : 0;
    return TD_OK;
}

td_partitioner_t
td_partitioner_rank(int rank)
{
    td_partitioner_t p = TD_PARTITIONER_SELF;

    p.kind = TD_PARTITION_RANK;
    p.rank = rank;
    return p;
}

td_status_t
td_partitioner_worker(const char *name, td_partitioner_t *p)
{
    int rank;
    td_status_t status = td_rpc_worker_rank(name, &rank);

    if (status != TD_OK) {
        return status;
    }
    *p = td_partitioner_rank(rank);
    return TD_OK;
}

td_partitioner_t
td_partitioner_user(td_partition_fn fn, void *arg)
{
    td_partitioner_t p = TD_PARTITIONER_SELF;

    p.kind = TD_PARTITION_USER;
    p.fn = fn;
    p.arg = arg;
    return p;
}

void
td_partitions_free(td_partition_t *parts, size_t n)
{
    for (size_t i = 0; parts != NULL && i < n; i++) {
        td_rpc_list_free(parts[i].args);
    }
    free(parts);
}

/* The world td_init resolved, from this module's setup (not td_world():
 * init.c sits above this layer); unset before td_init and after. */
static td_world_t mr_world;
static atomic_int mr_have_world;

static const td_world_t *
mr_world_get(void)
{
    return atomic_load(&mr_have_world) ? &mr_world : NULL;
}

/* This worker's rank and the world size, also before td_init. */
static void
whoami(int *rank, int *size)
{
    const td_world_t *w = mr_world_get();
    td_world_t env;

    if (w == NULL && td_world_from_env(&env) == TD_OK) {
        w = &env;
    }
    *rank = w != NULL ? w->rank : 0;
    *size = w != NULL ? w->world_size : 1;
}

static td_status_t
one_part(int rank, const td_rpc_list_t *args, td_partition_t **parts_p,
         size_t *n_p)
{
    td_partition_t *parts = calloc(1, sizeof(*parts));
    td_status_t status;

    if (parts == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "partitioner: out of memory");
    }
    status = td_rpc_list_copy(args, &parts[0].args);
    if (status != TD_OK) {
        free(parts);
        return status;
    }
    parts[0].rank = rank;
    *parts_p = parts;
    *n_p = 1;
    return TD_OK;
}

/* TorchOpt's TensorDimensionPartitioner.__call__. */
static td_status_t
dim_partition(const td_partitioner_t *p, const td_rpc_list_t *args,
              td_partition_t **parts_p, size_t *n_p)
{
    int64_t batch = -1, first = -1;
    int n_workers, me, size;
    size_t n_parts, n_items = td_rpc_list_len(args);
    td_partition_t *parts;
    td_status_t status = TD_OK;

    whoami(&me, &size);
    n_workers = p->workers != NULL ? p->n_workers : size;
    if (!p->exclusive && !p->keepdim) {
        return td_error(TD_ERR_INVALID, "partitioner: keepdim must be true "
                        "when exclusive is false (dim %d)", p->dim);
    }
    for (size_t i = 0; i < n_items; i++) {
        td_tensor_t *t;
        int nd, d;

        if (td_rpc_list_kind(args, i) != TD_VALUE_TENSOR) {
            continue;
        }
        td_rpc_list_tensor(args, i, &t);
        nd = td_tensor_ndim(t);
        d = p->dim < 0 ? p->dim + nd : p->dim;
        if (d < 0 || d >= nd) {
            return td_error(TD_ERR_SHAPE, "partitioner: argument %zu has %d "
                            "dims, no dim %d", i, nd, p->dim);
        }
        if (batch < 0) {
            batch = td_tensor_size(t, d);
            first = (int64_t)i;
        } else if (td_tensor_size(t, d) != batch) {
            return td_error(TD_ERR_SHAPE, "partitioner: batch size mismatch "
                            "on dim=%d: argument %lld has %lld, argument %zu "
                            "has %lld", p->dim, (long long)first,
                            (long long)batch, i,
                            (long long)td_tensor_size(t, d));
        }
    }
    if (batch < 0) {
        return one_part(me, args, parts_p, n_p);   /* no tensors: caller */
    }

    /* Slices: [start, start + len) of the dim, or index START without it. */
    int64_t chunk = 0;
    if (p->exclusive || batch <= n_workers) {
        n_parts = (size_t)batch;
    } else {
        n_parts = (size_t)n_workers;
        chunk = batch / n_workers;
    }
    parts = calloc(n_parts ? n_parts : 1, sizeof(*parts));
    if (parts == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "partitioner: out of memory for "
                        "%zu parts", n_parts);
    }
    for (size_t k = 0; k < n_parts && status == TD_OK; k++) {
        int64_t start, len;
        int select = p->exclusive && !p->keepdim;

        if (chunk > 0) {
            start = (int64_t)k * chunk;
            len = k + 1 == n_parts ? batch - start : chunk;
        } else {
            start = (int64_t)k;
            len = 1;
        }
        parts[k].rank = p->workers != NULL ? p->workers[k % (size_t)n_workers]
                                           : (int)(k % (size_t)n_workers);
        status = td_rpc_list_create(&parts[k].args);
        for (size_t i = 0; i < n_items && status == TD_OK; i++) {
            td_tensor_t *t, *s;
            int d;

            if (td_rpc_list_kind(args, i) != TD_VALUE_TENSOR) {
                td_rpc_list_t view = { .n = 1, .cap = 1,
                                       .items = args->items + i }, *one;

                status = td_rpc_list_copy(&view, &one);
                if (status == TD_OK) {
                    /* Move the one item over. */
                    status = td_rpc_list_add_int(parts[k].args, 0);
                    if (status == TD_OK) {
                        parts[k].args->items[parts[k].args->n - 1] =
                            one->items[0];
                        one->n = 0;
                    }
                    td_rpc_list_free(one);
                }
                continue;
            }
            td_rpc_list_tensor(args, i, &t);
            d = p->dim < 0 ? p->dim + td_tensor_ndim(t) : p->dim;
            status = select ? td_tensor_select(t, d, start, &s)
                            : td_tensor_narrow(t, d, start, len, &s);
            if (status == TD_OK) {
                status = td_rpc_list_add_tensor(parts[k].args, s);
                td_tensor_release(s);
            }
        }
    }
    if (status != TD_OK) {
        td_partitions_free(parts, n_parts);
        return status;
    }
    *parts_p = parts;
    *n_p = n_parts;
    return TD_OK;
}

td_status_t
td_partition(const td_partitioner_t *p, const td_rpc_list_t *args,
             td_partition_t **parts_p, size_t *n_p)
{
    int me, size;

    if (parts_p == NULL || n_p == NULL) {
        return td_error(TD_ERR_INVALID, "partitioner: output is NULL");
    }
    whoami(&me, &size);
    if (p == NULL || p->kind == TD_PARTITION_SELF) {
        return one_part(me, args, parts_p, n_p);
    }
    switch (p->kind) {
    case TD_PARTITION_RANK:
        if (p->rank < 0 || p->rank >= size) {
            return td_error(TD_ERR_RANGE, "partitioner: rank %d is not below "
                            "the world size %d", p->rank, size);
        }
        return one_part(p->rank, args, parts_p, n_p);
    case TD_PARTITION_DIM:
        return dim_partition(p, args, parts_p, n_p);
    case TD_PARTITION_USER:
        if (p->fn == NULL) {
            return td_error(TD_ERR_INVALID, "partitioner: user function is "
                            "NULL");
        }
        return p->fn(p->arg, args, parts_p, n_p);
    default:
        return td_error(TD_ERR_INVALID, "partitioner: unknown kind %d",
                        (int)p->kind);
    }
}

/* ---- reducers ------------------------------------------------------------ */

td_reducer_t
td_reducer_mean(void)
{
    td_reducer_t r = TD_REDUCER_MEAN;

    return r;
}

td_reducer_t
td_reducer_sum(void)
{
    td_reducer_t r = TD_REDUCER_SUM;

    return r;
}

td_reducer_t
td_reducer_user(td_reduce_fn fn, void *arg)
{
    td_reducer_t r = { TD_REDUCER_KIND_USER, fn, arg };

    return r;
}

static void
shape_str(td_tensor_t *t, char *buf, size_t len)
{
    size_t o = 0;

    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int d = 0; d < td_tensor_ndim(t) && o < len; d++) {
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", d ? ", " : "",
                              (long long)td_tensor_shape(t)[d]);
    }
    if (o < len) {
        snprintf(buf + o, len - o, "]");
    }
}

/* torch.mean / torch.sum of torch.stack(results), item by item. */
static td_status_t
reduce_numeric(int mean, const td_rpc_list_t *const *results, size_t n,
               td_rpc_list_t *out)
{
    size_t len;
    td_status_t status = TD_OK;

    if (n == 0) {
        return td_error(TD_ERR_INVALID, "reducer: no results to reduce");
    }
    len = td_rpc_list_len(results[0]);
    for (size_t r = 1; r < n; r++) {
        if (td_rpc_list_len(results[r]) != len) {
            return td_error(TD_ERR_INVALID, "reducer: result 0 has %zu "
                            "items, result %zu has %zu", len, r,
                            td_rpc_list_len(results[r]));
        }
    }
    for (size_t i = 0; i < len && status == TD_OK; i++) {
        td_value_kind_t kind = td_rpc_list_kind(results[0], i);

        if (kind == TD_VALUE_TENSOR) {
            td_tensor_t **ts = calloc(n, sizeof(*ts)), *st = NULL, *red;
            int dims[1] = { 0 };

            if (ts == NULL) {
                return td_error(TD_ERR_NO_MEMORY, "reducer: out of memory");
            }
            for (size_t r = 0; r < n && status == TD_OK; r++) {
                status = td_rpc_list_tensor(results[r], i, &ts[r]);
                if (status != TD_OK) {
                    status = td_error(TD_ERR_INVALID, "reducer: item %zu is "
                                      "a tensor in result 0 but not in "
                                      "result %zu", i, r);
                    break;
                }
                if (td_tensor_ndim(ts[r]) != td_tensor_ndim(ts[0]) ||
                    memcmp(td_tensor_shape(ts[r]), td_tensor_shape(ts[0]),
                           sizeof(int64_t) *
                           (size_t)td_tensor_ndim(ts[0])) != 0) {
                    char a[128], b[128];

                    shape_str(ts[0], a, sizeof(a));
                    shape_str(ts[r], b, sizeof(b));
                    status = td_error(TD_ERR_SHAPE, "reducer: cannot %s "
                                      "results of shapes %s (result 0) and "
                                      "%s (result %zu), item %zu",
                                      mean ? "average" : "sum", a, b, r, i);
                }
            }
            if (status == TD_OK) {
                status = td_tensor_stack(ts, (int)n, 0, &st);
            }
            if (status == TD_OK) {
                status = mean ? td_mean_dims(st, dims, 1, 0, &red)
                              : td_sum_dims(st, dims, 1, 0, &red);
                if (status == TD_OK) {
                    status = td_rpc_list_add_tensor(out, red);
                    td_tensor_release(red);
                }
            }
            td_tensor_release(st);
            free(ts);
        } else if (kind == TD_VALUE_INT || kind == TD_VALUE_DOUBLE) {
            double acc = 0;

            for (size_t r = 0; r < n; r++) {
                int64_t iv;
                double dv;

                if (td_rpc_list_int(results[r], i, &iv) == TD_OK) {
                    acc += (double)iv;
                } else if (td_rpc_list_double(results[r], i, &dv) == TD_OK) {
                    acc += dv;
                } else {
                    return td_error(TD_ERR_INVALID, "reducer: item %zu is a "
                                    "number in result 0 but not in result "
                                    "%zu", i, r);
                }
            }
            status = td_rpc_list_add_double(out, mean ? acc / (double)n : acc);
        } else {
            status = td_error(TD_ERR_INVALID, "reducer: item %zu is neither "
                              "a tensor nor a number; use a user reducer",
                              i);
        }
    }
    return status;
}

static td_status_t
concat(const td_rpc_list_t *const *results, size_t n, td_rpc_list_t *out)
{
    td_status_t status = TD_OK;

    for (size_t r = 0; r < n && status == TD_OK; r++) {
        td_rpc_list_t *c;

        status = td_rpc_list_copy(results[r], &c);
        for (size_t i = 0; status == TD_OK && i < c->n; i++) {
            status = td_rpc_list_add_int(out, 0);
            if (status == TD_OK) {
                out->items[out->n - 1] = c->items[i];
                c->items[i].kind = TD_VALUE_INT;     /* moved */
            }
        }
        if (c != NULL && status == TD_OK) {
            td_rpc_list_free(c);
        }
    }
    return status;
}

td_status_t
td_reducer_apply(const td_reducer_t *r, const td_rpc_list_t *const *results,
          size_t n, td_rpc_list_t **out_p)
{
    td_rpc_list_t *out;
    td_status_t status;

    status = td_rpc_list_create(&out);
    if (status != TD_OK) {
        return status;
    }
    switch (r == NULL ? TD_REDUCER_KIND_NONE : r->kind) {
    case TD_REDUCER_KIND_NONE:
        status = concat(results, n, out);
        break;
    case TD_REDUCER_KIND_MEAN:
    case TD_REDUCER_KIND_SUM:
        status = reduce_numeric(r->kind == TD_REDUCER_KIND_MEAN, results, n, out);
        break;
    case TD_REDUCER_KIND_USER:
        status = r->fn != NULL ? r->fn(r->arg, results, n, out)
                 : td_error(TD_ERR_INVALID, "reducer: user function is "
                            "NULL");
        break;
    default:
        status = td_error(TD_ERR_INVALID, "reducer: unknown kind %d",
                          (int)r->kind);
    }
    if (status != TD_OK) {
        td_rpc_list_free(out);
        return status;
    }
    *out_p = out;
    return TD_OK;
}

/* ---- parallel calls ------------------------------------------------------ */

typedef struct {
    td_future_t  *result;
    td_future_t **futs;
    size_t        n;
    td_reducer_t  reducer;
    int           has_reducer;
} call_t;

static void
call_free(call_t *c)
{
    for (size_t i = 0; i < c->n; i++) {
        td_future_release(c->futs[i]);
    }
    free(c->futs);
    td_future_release(c->result);
    free(c);
}

/* collect_all finished: reduce (on a pool thread or the caller's). */
static void
call_done(void *arg, td_future_t *all)
{
    call_t *c = arg;
    const td_rpc_list_t **results;
    td_rpc_list_t *out = NULL;
    td_status_t status = td_future_status(all);

    if (status != TD_OK) {
        td_future_fail(c->result, status, "%s", td_future_error(all));
        call_free(c);
        return;
    }
    results = calloc(c->n ? c->n : 1, sizeof(*results));
    if (results == NULL) {
        td_future_fail(c->result, TD_ERR_NO_MEMORY, "parallel call: out of "
                       "memory");
        call_free(c);
        return;
    }
    for (size_t i = 0; i < c->n; i++) {
        results[i] = td_future_value(c->futs[i]);
    }
    status = td_reducer_apply(c->has_reducer ? &c->reducer : NULL, results, c->n,
                       &out);
    free(results);
    if (status == TD_OK) {
        td_future_complete(c->result, out);
    } else {
        td_future_fail(c->result, status, "%s", td_last_error());
    }
    call_free(c);
}

td_status_t
td_remote_async_call(const char *name, const td_rpc_list_t *args,
                     const td_partitioner_t *partitioner,
                     const td_reducer_t *reducer, double timeout,
                     td_future_t **fut_p)
{
    td_partition_t *parts = NULL;
    size_t n = 0;
    call_t *c;
    td_future_t *all, *result;
    td_status_t status;

    if (name == NULL || fut_p == NULL) {
        return td_error(TD_ERR_INVALID, "parallel call: %s is NULL",
                        name == NULL ? "function name" : "future pointer");
    }
    status = td_partition(partitioner, args, &parts, &n);
    if (status != TD_OK) {
        return status;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL || (c->futs = calloc(n ? n : 1, sizeof(*c->futs))) == NULL) {
        free(c);
        td_partitions_free(parts, n);
        return td_error(TD_ERR_NO_MEMORY, "parallel call: out of memory");
    }
    if (reducer != NULL) {
        c->reducer = *reducer;
        c->has_reducer = 1;
    }
    for (size_t i = 0; i < n; i++) {
        status = td_rpc_async(parts[i].rank, name, parts[i].args, timeout,
                              &c->futs[i]);
        if (status != TD_OK) {
            break;
        }
        c->n++;
    }
    td_partitions_free(parts, n);
    if (status == TD_OK) {
        status = td_future_create(&result);
    }
    if (status != TD_OK) {
        c->result = NULL;
        call_free(c);          /* calls already sent finish on their own */
        return status;
    }
    c->result = td_future_retain(result);
    status = td_future_collect_all(c->futs, c->n, &all);
    if (status != TD_OK) {
        call_free(c);
        td_future_release(result);
        return status;
    }
    td_future_then(all, call_done, c);
    td_future_release(all);
    *fut_p = result;
    return TD_OK;
}

td_status_t
td_remote_sync_call(const char *name, const td_rpc_list_t *args,
                    const td_partitioner_t *partitioner,
                    const td_reducer_t *reducer, double timeout,
                    td_rpc_list_t **result_p)
{
    td_future_t *fut;
    td_status_t status;

    status = td_remote_async_call(name, args, partitioner, reducer, timeout,
                                  &fut);
    if (status != TD_OK) {
        return status;
    }
    status = td_future_wait(fut, -1);
    if (status == TD_OK) {
        status = td_future_take(fut, result_p);
    }
    td_future_release(fut);
    return status;
}

td_status_t
td_parallel_call_async(const td_parallel_t *p, const td_rpc_list_t *args,
                       td_future_t **fut_p)
{
    if (p == NULL) {
        return td_error(TD_ERR_INVALID, "parallel call: descriptor is NULL");
    }
    return td_remote_async_call(p->name, args, &p->partitioner,
                                p->reducer.kind == TD_REDUCER_KIND_NONE ? NULL
                                : &p->reducer, p->timeout, fut_p);
}

td_status_t
td_parallel_call(const td_parallel_t *p, const td_rpc_list_t *args,
                 td_rpc_list_t **result_p)
{
    if (p == NULL) {
        return td_error(TD_ERR_INVALID, "parallel call: descriptor is NULL");
    }
    return td_remote_sync_call(p->name, args, &p->partitioner,
                               p->reducer.kind == TD_REDUCER_KIND_NONE ? NULL
                               : &p->reducer, p->timeout, result_p);
}

/* ---- barriers of a subset ----------------------------------------------- *
 * Every member calls "_td.barrier" on the set's lowest rank with the set's
 * hash and its own generation count for that set. The handler there is an
 * async one: it records the arrival and hands back a future, so no pool
 * thread waits (a barrier with more members than the pool can grow
 * threads, or a pool of one, cannot starve it). The last arrival completes
 * every member's future; RPC's timer (barrier_tick) fails those whose own
 * timeout passed, naming the ranks that did not come.
 *
 * Invariants (b_lock guards b_slots, every slot and b_gens):
 *  B1 a slot exists while at least one member waits on it: created by the
 *     first arrival of (key, gen), freed by the last arrival (after
 *     completing every future) or by the tick that fails its last waiter.
 *  B2 futs[i] is set (one reference, the slot's) exactly while member i
 *     waits; seen[i] stays set once member i arrived.
 *  B3 futures are completed with b_lock released (their callbacks send the
 *     replies), from a handler (td_future_complete) or the timer thread
 *     (td__future_fail_async: callbacks go to the pool). */

#define BARRIER_SETS 64
#define BARRIER_MAX_RANKS 4096

typedef struct slot {
    uint64_t      key;         /* set hash */
    int64_t       gen;
    int           n;           /* members */
    int           arrived;
    int           waiting;     /* members with futs[i] set */
    unsigned char *seen;       /* per member index */
    td_future_t  **futs;       /* per member index: its answer (B2) */
    double        *deadline;   /* per member index: td_now_s(), 0: none */
    double        *timeout;    /* per member index, for the message */
    int32_t       *ranks;      /* the set, for naming who is missing */
    struct slot   *next;
} slot_t;

static pthread_mutex_t b_lock = PTHREAD_MUTEX_INITIALIZER;
static slot_t *b_slots;
static struct { uint64_t key; int64_t gen; } b_gens[BARRIER_SETS];

static uint64_t
set_hash(const int *ranks, int n)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (int i = 0; i < n; i++) {
        for (int b = 0; b < 4; b++) {
            h ^= (uint64_t)((unsigned)ranks[i] >> (8 * b)) & 0xff;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

static void
slot_free(slot_t *s)
{
    if (s != NULL) {
        free(s->seen);
        free(s->futs);
        free(s->deadline);
        free(s->timeout);
        free(s->ranks);
        free(s);
    }
}

/* Unlink S from b_slots; b_lock held. */
static void
slot_unlink(slot_t *s)
{
    for (slot_t **pp = &b_slots; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            return;
        }
    }
}

static slot_t *
slot_new(uint64_t key, int64_t gen, int n, const void *ranks)
{
    slot_t *s = calloc(1, sizeof(*s));

    if (s == NULL || (s->seen = calloc((size_t)n, 1)) == NULL ||
        (s->futs = calloc((size_t)n, sizeof(*s->futs))) == NULL ||
        (s->deadline = calloc((size_t)n, sizeof(double))) == NULL ||
        (s->timeout = calloc((size_t)n, sizeof(double))) == NULL ||
        (s->ranks = malloc((size_t)n * sizeof(int32_t))) == NULL) {
        slot_free(s);
        return NULL;
    }
    memcpy(s->ranks, ranks, (size_t)n * sizeof(int32_t));
    s->key = key;
    s->gen = gen;
    s->n = n;
    return s;
}

/* "_td.barrier"(key, gen, n, index, timeout, ranks as int32 bytes) on the
 * leader: an async handler (B1-B3). */
static td_status_t
fn_barrier(void *arg, const td_rpc_call_info_t *info,
           const td_rpc_list_t *args, td_future_t **fut_p)
{
    int64_t key, gen, n, idx;
    double timeout;
    const void *rb;
    size_t rlen;
    slot_t *s, *done = NULL;
    td_future_t *fut;
    td_status_t status;

    (void)arg;
    (void)info;
    if (td_rpc_list_int(args, 0, &key) != TD_OK ||
        td_rpc_list_int(args, 1, &gen) != TD_OK ||
        td_rpc_list_int(args, 2, &n) != TD_OK ||
        td_rpc_list_int(args, 3, &idx) != TD_OK ||
        td_rpc_list_double(args, 4, &timeout) != TD_OK ||
        td_rpc_list_bytes(args, 5, &rb, &rlen) != TD_OK ||
        n < 1 || n > BARRIER_MAX_RANKS || idx < 0 || idx >= n ||
        rlen != (size_t)n * sizeof(int32_t)) {
        return td_error(TD_ERR_PROTOCOL, "barrier: malformed request");
    }
    status = td_future_create(&fut);
    if (status != TD_OK) {
        return status;
    }
    pthread_mutex_lock(&b_lock);
    for (s = b_slots; s != NULL; s = s->next) {
        if (s->key == (uint64_t)key && s->gen == gen) {
            break;
        }
    }
    if (s != NULL && (s->n != n || s->futs[idx] != NULL)) {
        pthread_mutex_unlock(&b_lock);
        td_future_release(fut);
        return td_error(TD_ERR_PROTOCOL, "barrier: member %lld of %lld "
                        "arrived twice, or into a barrier of %d members, in "
                        "generation %lld", (long long)idx, (long long)n,
                        s->n, (long long)gen);
    }
    if (s == NULL) {
        s = slot_new((uint64_t)key, gen, (int)n, rb);
        if (s == NULL) {
            pthread_mutex_unlock(&b_lock);
            td_future_release(fut);
            return td_error(TD_ERR_NO_MEMORY, "barrier: out of memory");
        }
        s->next = b_slots;
        b_slots = s;
    }
    if (!s->seen[idx]) {
        s->seen[idx] = 1;
        s->arrived++;
    }
    s->futs[idx] = td_future_retain(fut);
    s->deadline[idx] = timeout > 0 ? td_now_s() + timeout : 0;
    s->timeout[idx] = timeout;
    s->waiting++;
    if (s->arrived == s->n) {
        slot_unlink(s);                                  /* B1 */
        done = s;
    }
    pthread_mutex_unlock(&b_lock);
    for (int i = 0; done != NULL && i < done->n; i++) {  /* B3 */
        if (done->futs[i] != NULL) {
            td_future_complete(done->futs[i], NULL);
            td_future_release(done->futs[i]);
        }
    }
    slot_free(done);
    *fut_p = fut;
    return TD_OK;
}

int
td__barrier_waiting(void)
{
    int n = 0;

    pthread_mutex_lock(&b_lock);
    for (const slot_t *s = b_slots; s != NULL; s = s->next) {
        n += s->waiting;
    }
    pthread_mutex_unlock(&b_lock);
    return n;
}

/* "2,5" into BUF: the ranks of S that have not arrived. b_lock held. */
static void
missing_ranks(const slot_t *s, char *buf, size_t len)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int i = 0; i < s->n && o + 12 < len; i++) {
        if (!s->seen[i]) {
            o += (size_t)snprintf(buf + o, len - o, "%s%d", o ? "," : "",
                                  (int)s->ranks[i]);
        }
    }
}

/* RPC's timer: fail the waiters whose timeout passed (B1-B3). */
static void
barrier_tick(void *arg, double now)
{
    enum { BATCH = 32 };
    td_future_t *expired[BATCH];
    char msg[BATCH][320];
    int n_exp;

    (void)arg;
    do {
        n_exp = 0;
        pthread_mutex_lock(&b_lock);
        for (slot_t *s = b_slots, *next; s != NULL && n_exp < BATCH;
             s = next) {
            next = s->next;
            for (int i = 0; i < s->n && n_exp < BATCH; i++) {
                char missing[256];

                if (s->futs[i] == NULL || s->deadline[i] == 0 ||
                    now < s->deadline[i]) {
                    continue;
                }
                missing_ranks(s, missing, sizeof(missing));
                snprintf(msg[n_exp], sizeof(msg[n_exp]), "barrier: rank(s) "
                         "%s did not arrive within %.3g s", missing,
                         s->timeout[i]);
                expired[n_exp++] = s->futs[i];
                s->futs[i] = NULL;
                s->waiting--;
            }
            if (s->waiting == 0) {
                slot_unlink(s);
                slot_free(s);
            }
        }
        pthread_mutex_unlock(&b_lock);
        for (int k = 0; k < n_exp; k++) {
            td__future_fail_async(expired[k], TD_ERR_TIMEOUT, msg[k]);
            td_future_release(expired[k]);
        }
    } while (n_exp == BATCH);
}

static td_status_t barrier_of(const int *ranks, int n, double timeout);

td_status_t
td_barrier_ranks(const int *ranks, int n, double timeout)
{
    const td_world_t *w = mr_world_get();
    int *all;
    td_status_t status;

    if (ranks != NULL) {
        return barrier_of(ranks, n, timeout);
    }
    if (w == NULL) {
        return td_error(TD_ERR_STATE, "barrier: not initialised");
    }
    if (w->world_size > BARRIER_MAX_RANKS) {
        return td_error(TD_ERR_RANGE, "barrier: a world of %d ranks is over "
                        "this barrier's %d; use td_barrier", w->world_size,
                        BARRIER_MAX_RANKS);
    }
    all = malloc((size_t)w->world_size * sizeof(*all));
    if (all == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "barrier: out of memory");
    }
    for (int i = 0; i < w->world_size; i++) {
        all[i] = i;
    }
    status = barrier_of(all, w->world_size, timeout);
    free(all);
    return status;
}

static td_status_t
barrier_of(const int *ranks, int n, double timeout)
{
    const td_world_t *w = mr_world_get();
    int idx = -1, leader;
    uint64_t key;
    int64_t gen = 0;
    td_rpc_list_t *args;
    td_rpc_list_t *res = NULL;
    td_status_t status;

    if (w == NULL) {
        return td_error(TD_ERR_STATE, "barrier: not initialised");
    }
    if (n < 1 || n > BARRIER_MAX_RANKS) {
        return td_error(TD_ERR_RANGE, "barrier: %d ranks, allowed 1..%d", n,
                        BARRIER_MAX_RANKS);
    }
    leader = ranks[0];
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= w->world_size) {
            return td_error(TD_ERR_RANGE, "barrier: rank %d is not below the "
                            "world size %d", ranks[i], w->world_size);
        }
        if (ranks[i] == w->rank) {
            idx = i;
        }
        if (ranks[i] < leader) {
            leader = ranks[i];
        }
    }
    if (idx < 0) {
        return td_error(TD_ERR_INVALID, "barrier: rank %d is not among the "
                        "%d ranks of the barrier", w->rank, n);
    }
    if (timeout < 0) {
        timeout = td_rpc_default_timeout();
    }
    key = set_hash(ranks, n);
    pthread_mutex_lock(&b_lock);
    for (int i = 0; i < BARRIER_SETS; i++) {
        if (b_gens[i].key == key || b_gens[i].key == 0) {
            b_gens[i].key = key;
            gen = ++b_gens[i].gen;
            break;
        }
    }
    pthread_mutex_unlock(&b_lock);
    status = td_rpc_list_create(&args);
    if (status != TD_OK) {
        return status;
    }
    td_rpc_list_add_int(args, (int64_t)key);
    td_rpc_list_add_int(args, gen);
    td_rpc_list_add_int(args, n);
    td_rpc_list_add_int(args, idx);
    td_rpc_list_add_double(args, timeout);
    {
        int32_t *rb = malloc((size_t)n * sizeof(*rb));

        if (rb == NULL) {
            td_rpc_list_free(args);
            return td_error(TD_ERR_NO_MEMORY, "barrier: out of memory");
        }
        for (int i = 0; i < n; i++) {
            rb[i] = ranks[i];
        }
        status = td_rpc_list_add_bytes(args, rb, (size_t)n * sizeof(*rb));
        free(rb);
        if (status != TD_OK) {
            td_rpc_list_free(args);
            return status;
        }
    }
    /* The leader's own wait ends the call; give the call a little more. */
    status = td_rpc_sync(leader, "_td.barrier", args,
                         timeout > 0 ? timeout + 5 : 0, &res);
    td_rpc_list_free(args);
    td_rpc_list_free(res);
    if (status == TD_ERR_REMOTE || status == TD_ERR_TIMEOUT) {
        /* Name ranks, not indexes. */
        char msg[512];

        snprintf(msg, sizeof(msg), "%s", td_last_error());
        return td_error(TD_ERR_TIMEOUT, "barrier of %d ranks (first %d): %s",
                        n, ranks[0], msg);
    }
    return status;
}

/* Every worker answers the barrier, so it is registered before td_init
 * publishes the address. */
static td_status_t
module_attach(void *arg)
{
    static const td_rpc_plugin_t timer = {.name = "barrier",
                                          .tick = barrier_tick};
    td_status_t status;

    (void)arg;
    status = td_rpc_register_async("_td.barrier", fn_barrier, NULL);
    return status != TD_OK ? status : td__rpc_plug(&timer);
}

static td_status_t
module_setup(void *arg, td_transport_t *tp, const td_world_t *w)
{
    (void)arg;
    (void)tp;
    mr_world = *w;
    atomic_store(&mr_have_world, 1);
    return TD_OK;
}

/* Barriers still waiting fail (B1-B3): nobody else will answer them. */
static void
module_shutdown(void *arg)
{
    slot_t *all;

    (void)arg;
    atomic_store(&mr_have_world, 0);
    pthread_mutex_lock(&b_lock);
    all = b_slots;
    b_slots = NULL;
    pthread_mutex_unlock(&b_lock);
    while (all != NULL) {
        slot_t *next = all->next;

        for (int i = 0; i < all->n; i++) {
            if (all->futs[i] != NULL) {
                td_future_fail(all->futs[i], TD_ERR_STATE, "barrier: rank "
                               "shutting down before every member arrived");
                td_future_release(all->futs[i]);
            }
        }
        slot_free(all);
        all = next;
    }
}

const td_runtime_module_t td_mapreduce_module = {
    .name = "mapreduce",
    .attach = module_attach,
    .setup = module_setup,
    .shutdown = module_shutdown,
};
