/* runtime/coll/nccl.c: collectives on device tensors: the route, the
 * staged path and NCCL (see nccl.h for the design and N1-N3). */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/device.h"
#include "runtime/runtime.h"
#include "runtime/coll/nccl.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/tx.h"
#include "base/clock.h"
#include "base/log.h"
#ifdef TD_HAVE_NCCL
#include <cuda_runtime.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"   /* nccl.h's f() */
#include <nccl.h>
#pragma GCC diagnostic pop
#include "kernels/cuda/cuda_device.h"
#endif

/* ---- the staged path (N1) ----------------------------------------------- */

static int
on_device(const td_tensor_t *t)
{
    return t != NULL && td_tensor_device(t).type != TD_DEVICE_CPU;
}

/* Whether A reads T's values (in place collectives, and every IN). */
static int
t_is_input(const coll_args_t *a)
{
    return a->kind == COLL_ALL_REDUCE || a->kind == COLL_BROADCAST ||
           a->kind == COLL_REDUCE;
}

static td_status_t
stage_one(td_tensor_t *t, int input, void **host_p)
{
    size_t n = td_tensor_nbytes(t);
    void *h = malloc(n ? n : 1);
    td_status_t status;

    if (h == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory for a %zu "
                        "byte host copy of a device tensor", n);
    }
    if (input) {
        status = td_device_memcpy(h, TD_CPU, td_tensor_data(t),
                                  td_tensor_device(t), n);
        if (status != TD_OK) {
            free(h);
            return status;
        }
    }
    *host_p = h;
    return TD_OK;
}

td_status_t
coll_stage_in(const coll_args_t *a, coll_stage_t *s)
{
    td_status_t status = TD_OK;

    memset(s, 0, sizeof(*s));
    if (on_device(a->t)) {
        status = stage_one(a->t, t_is_input(a), &s->t_host);
        if (status == TD_OK) {
            s->t = a->t;
        }
    }
    if (status == TD_OK && on_device(a->in) && a->in != a->t) {
        status = stage_one(a->in, 1, &s->in_host);
        if (status == TD_OK) {
            s->in = a->in;
        }
    }
    if (status != TD_OK) {
        coll_stage_free(s);
    }
    return status;
}

void *
coll_stage_ptr(const coll_stage_t *s, td_tensor_t *t)
{
    if (t == NULL) {
        return NULL;
    }
    if (t == s->t) {
        return s->t_host;
    }
    if (t == s->in) {
        return s->in_host;
    }
    return td_tensor_data(t);
}

td_status_t
coll_stage_out(coll_stage_t *s)
{
    if (s->t == NULL) {
        return TD_OK;
    }
    return td_device_memcpy(td_tensor_data(s->t), td_tensor_device(s->t),
                            s->t_host, TD_CPU, td_tensor_nbytes(s->t));
}

void
coll_stage_free(coll_stage_t *s)
{
    free(s->t_host);
    free(s->in_host);
    memset(s, 0, sizeof(*s));
}

/* ---- NCCL (N2, N3) ------------------------------------------------------ */

#ifdef TD_HAVE_NCCL

typedef struct comm {
    struct comm *next;
    uint32_t     group_id, digest;
    int          device;
    ncclComm_t   comm;
} comm_t;

static pthread_mutex_t comm_lock = PTHREAD_MUTEX_INITIALIZER;
static comm_t *comms;
/* per group (id mod CAP_GROUPS, digest): every member NCCL-capable? */
#define CAP_GROUPS 256
static unsigned char cap_known[CAP_GROUPS], cap_of[CAP_GROUPS];
static uint32_t cap_digest[CAP_GROUPS];

static int
nccl_kind(coll_kind_t k)
{
    return k == COLL_ALL_REDUCE || k == COLL_BROADCAST || k == COLL_REDUCE ||
           k == COLL_ALL_GATHER || k == COLL_REDUCE_SCATTER;
}

/* Every member published "1" under td/nccl/<rank> (device_map.c). */
static int
group_capable(td_group_t *g)
{
    td_store_t *store = td_runtime_store();
    int slot = (int)(g->id % CAP_GROUPS), cap = 1;

    pthread_mutex_lock(&comm_lock);
    if (cap_known[slot] && cap_digest[slot] == g->digest) {
        cap = cap_of[slot];
        pthread_mutex_unlock(&comm_lock);
        return cap;
    }
    pthread_mutex_unlock(&comm_lock);
    for (int i = 0; i < g->n && cap && store != NULL; i++) {
        char key[48];
        void *v = NULL;
        size_t len = 0;

        snprintf(key, sizeof(key), "td/nccl/%d", g->ranks[i]);
        if (td_store_get(store, key, coll_timeout(), &v, &len) != TD_OK) {
            td_error_clear();
            cap = 0;
        } else {
            cap = len == 1 && ((char *)v)[0] == '1';
        }
        free(v);
    }
    pthread_mutex_lock(&comm_lock);
    cap_digest[slot] = g->digest;
    cap_of[slot] = (unsigned char)(store != NULL && cap);
    cap_known[slot] = 1;
    pthread_mutex_unlock(&comm_lock);
    return store != NULL && cap;
}

static td_status_t
nccl_error(const char *what, ncclResult_t r, td_group_t *g)
{
    return td_error(TD_ERR_IO, "coll: %s on group %u (rank %d of %d): %s",
                    what, g->id, g->me, g->n, ncclGetErrorString(r));
}

/* The communicator of G on DEVICE (N2). */
static td_status_t
get_comm(td_group_t *g, int device, ncclComm_t *comm_p)
{
    td_store_t *store = td_runtime_store();
    ncclUniqueId id;
    comm_t *c;
    char key[64];
    void *v = NULL;
    size_t len = 0;
    ncclResult_t r;
    td_status_t status;

    pthread_mutex_lock(&comm_lock);
    for (c = comms; c != NULL; c = c->next) {
        if (c->group_id == g->id && c->digest == g->digest &&
            c->device == device) {
            *comm_p = c->comm;
            pthread_mutex_unlock(&comm_lock);
            return TD_OK;
        }
    }
    pthread_mutex_unlock(&comm_lock);
    snprintf(key, sizeof(key), "td/nccl/id/%u/%08x/%d", g->id, g->digest,
             device);
    if (g->me == 0) {
        if ((r = ncclGetUniqueId(&id)) != ncclSuccess) {
            return nccl_error("ncclGetUniqueId", r, g);
        }
        status = td_store_set(store, key, &id, sizeof(id));
        if (status != TD_OK) {
            return status;
        }
    } else {
        status = td_store_get(store, key, coll_timeout(), &v, &len);
        if (status != TD_OK) {
            return status;
        }
        if (len != sizeof(id)) {
            free(v);
            return td_error(TD_ERR_PROTOCOL, "coll: NCCL id of group %u has "
                            "%zu bytes, not %zu", g->id, len, sizeof(id));
        }
        memcpy(&id, v, sizeof(id));
        free(v);
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
    }
    if (cudaSetDevice(device) != cudaSuccess) {
        (void)cudaGetLastError();
        free(c);
        return td_error(TD_ERR_IO, "coll: cannot select cuda:%d", device);
    }
    r = ncclCommInitRank(&c->comm, g->n, id, g->me);
    if (r != ncclSuccess) {
        free(c);
        return nccl_error("ncclCommInitRank", r, g);
    }
    c->group_id = g->id;
    c->digest = g->digest;
    c->device = device;
    pthread_mutex_lock(&comm_lock);
    c->next = comms;
    comms = c;
    pthread_mutex_unlock(&comm_lock);
    *comm_p = c->comm;
    return TD_OK;
}

static int
nccl_dtype(td_dtype_t d, ncclDataType_t *out)
{
    switch (d) {
    case TD_FLOAT32: *out = ncclFloat32; return 1;
    case TD_FLOAT64: *out = ncclFloat64; return 1;
    case TD_INT64:   *out = ncclInt64;   return 1;
    case TD_INT32:   *out = ncclInt32;   return 1;
    case TD_UINT8:   *out = ncclUint8;   return 1;
    default:         return 0;
    }
}

static int
nccl_op(td_reduce_op_t op, ncclRedOp_t *out)
{
    switch (op) {
    case TD_REDUCE_SUM:  *out = ncclSum;  return 1;
    case TD_REDUCE_PROD: *out = ncclProd; return 1;
    case TD_REDUCE_MIN:  *out = ncclMin;  return 1;
    case TD_REDUCE_MAX:  *out = ncclMax;  return 1;
    case TD_REDUCE_AVG:  *out = ncclAvg;  return 1;
    default:             return 0;       /* bitwise: staged */
    }
}

/* Abort G's communicator COMM and drop it from the cache (N4). */
static void
comm_abort(ncclComm_t comm)
{
    comm_t **pp, *c = NULL;

    pthread_mutex_lock(&comm_lock);
    for (pp = &comms; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->comm == comm) {
            c = *pp;
            *pp = c->next;
            break;
        }
    }
    pthread_mutex_unlock(&comm_lock);
    (void)ncclCommAbort(comm);
    free(c);
}

/* Wait for the collective queued on STREAM, at most the collective
 * timeout, watching NCCL's async error (N4). */
static td_status_t
bounded_sync(td_group_t *g, const coll_args_t *a, int device,
             ncclComm_t comm, cudaStream_t stream)
{
    double deadline = td_now_s() + coll_timeout();
    struct timespec nap = { 0, 20000 };        /* 20 us between polls */
    char msg[COLL_ERR_MAX];
    td_status_t code;
    cudaError_t ce;
    ncclResult_t ae = ncclSuccess;

    for (;;) {
        ce = cudaStreamQuery(stream);
        if (ce == cudaSuccess) {
            return td_cuda_sync(device);
        }
        if (ce != cudaErrorNotReady) {
            (void)cudaGetLastError();
            code = TD_ERR_IO;
            snprintf(msg, sizeof(msg), "coll: %s through NCCL on group %u "
                     "(rank %d of %d, cuda:%d): %s", coll_kind_name(a->kind),
                     g->id, g->me, g->n, device, cudaGetErrorString(ce));
            break;
        }
        if (ncclCommGetAsyncError(comm, &ae) == ncclSuccess &&
            ae != ncclSuccess && ae != ncclInProgress) {
            code = TD_ERR_IO;
            snprintf(msg, sizeof(msg), "coll: %s through NCCL on group %u "
                     "(rank %d of %d): %s", coll_kind_name(a->kind), g->id,
                     g->me, g->n, ncclGetErrorString(ae));
            break;
        }
        if (td_now_s() > deadline) {
            code = TD_ERR_TIMEOUT;
            snprintf(msg, sizeof(msg), "coll: %s through NCCL on group %u "
                     "timed out after %.1f s on rank %d (a member did not "
                     "call it, or called it with other arguments or a cpu "
                     "tensor); the communicator is aborted",
                     coll_kind_name(a->kind), g->id, coll_timeout(), g->me);
            break;
        }
        nanosleep(&nap, NULL);
    }
    comm_abort(comm);
    coll_group_fail(g, code, 0, 0, msg);
    return td_error(code, "%s", msg);
}

coll_route_t
coll_device_route(td_group_t *g, const coll_args_t *a)
{
    td_tensor_t *t = a->t != NULL ? a->t : a->in;
    ncclDataType_t dt;
    ncclRedOp_t op;

    if (!on_device(a->t) && !on_device(a->in)) {
        return COLL_ROUTE_HOST;
    }
    if (td_device_test_backend() || a->outs != NULL || !nccl_kind(a->kind) ||
        !on_device(t) || (a->in != NULL && !on_device(a->in)) ||
        !nccl_dtype(td_tensor_dtype(t), &dt) ||
        ((a->kind == COLL_ALL_REDUCE || a->kind == COLL_REDUCE ||
          a->kind == COLL_REDUCE_SCATTER) && !nccl_op(a->op, &op))) {
        return COLL_ROUTE_STAGED;
    }
    return group_capable(g) ? COLL_ROUTE_NCCL : COLL_ROUTE_STAGED;
}

td_status_t
coll_nccl_run(td_group_t *g, const coll_args_t *a)
{
    td_tensor_t *t = a->t;
    int device = td_tensor_device(t).index;
    size_t count = (size_t)td_tensor_numel(a->in != NULL ? a->in : t);
    ncclDataType_t dt = ncclFloat32;
    ncclRedOp_t op = ncclSum;
    ncclComm_t comm = NULL;
    void *stream;
    ncclResult_t r;
    td_status_t status;

    nccl_dtype(td_tensor_dtype(t), &dt);
    nccl_op(a->op, &op);
    status = get_comm(g, device, &comm);
    if (status == TD_OK) {
        status = td_cuda_enter(device, &stream);   /* N3: the device stream */
    }
    if (status != TD_OK) {
        return status;
    }
    switch (a->kind) {
    case COLL_ALL_REDUCE:
        r = ncclAllReduce(td_tensor_data(t), td_tensor_data(t), count, dt,
                          op, comm, (cudaStream_t)stream);
        break;
    case COLL_BROADCAST:
        r = ncclBroadcast(td_tensor_data(t), td_tensor_data(t), count, dt,
                          a->root, comm, (cudaStream_t)stream);
        break;
    case COLL_REDUCE:
        r = ncclReduce(td_tensor_data(t), td_tensor_data(t), count, dt, op,
                       a->root, comm, (cudaStream_t)stream);
        break;
    case COLL_ALL_GATHER:
        r = ncclAllGather(td_tensor_data(a->in), td_tensor_data(t), count,
                          dt, comm, (cudaStream_t)stream);
        break;
    case COLL_REDUCE_SCATTER:
        r = ncclReduceScatter(td_tensor_data(a->in), td_tensor_data(t),
                              (size_t)td_tensor_numel(t), dt, op, comm,
                              (cudaStream_t)stream);
        break;
    default:
        return td_error(TD_ERR_INVALID, "coll: %s has no NCCL route",
                        coll_kind_name(a->kind));
    }
    if (r != ncclSuccess) {
        return nccl_error(coll_kind_name(a->kind), r, g);
    }
    return bounded_sync(g, a, device, comm, (cudaStream_t)stream);  /* N3 */
}

void
coll_nccl_shutdown(void)
{
    comm_t *c;

    pthread_mutex_lock(&comm_lock);
    while ((c = comms) != NULL) {
        comms = c->next;
        ncclCommDestroy(c->comm);
        free(c);
    }
    memset(cap_known, 0, sizeof(cap_known));
    pthread_mutex_unlock(&comm_lock);
}

#else  /* !TD_HAVE_NCCL */

coll_route_t
coll_device_route(td_group_t *g, const coll_args_t *a)
{
    (void)g;
    return on_device(a->t) || on_device(a->in) ? COLL_ROUTE_STAGED
                                               : COLL_ROUTE_HOST;
}

td_status_t
coll_nccl_run(td_group_t *g, const coll_args_t *a)
{
    (void)g;
    (void)a;
    return td_error(TD_ERR_UNSUPPORTED, "coll: libtodist was built without "
                    "NCCL");
}

void
coll_nccl_shutdown(void)
{
}

#endif
