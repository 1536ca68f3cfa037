/* runtime/coll/nccl.c: collectives on device tensors: the route, the
 * staged path and NCCL (see nccl.h for the design and N1-N4). The NCCL
 * calls themselves are the CUDA module's (kernels/module.h td_nccl_ops_t):
 * libtodist links no NCCL. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/device.h"
#include "kernels/module.h"
#include "runtime/runtime.h"
#include "runtime/coll/nccl.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/tx.h"
#include "runtime/rpc/device_map.h"
#include "base/clock.h"
#include "base/log.h"

/* ---- NCCL (N2, N3) ------------------------------------------------------ */

typedef struct comm {
    struct comm *next;
    uint32_t     group_id, digest;
    int          device;
    void        *comm;                    /* the module's ncclComm_t */
} comm_t;

static pthread_mutex_t comm_lock = PTHREAD_MUTEX_INITIALIZER;
static comm_t *comms;
/* per group (id mod CAP_GROUPS, digest): every member NCCL-capable? */
#define CAP_GROUPS 256
static unsigned char cap_known[CAP_GROUPS], cap_of[CAP_GROUPS];
static uint32_t cap_digest[CAP_GROUPS];
/* per group: every member on a GPU of its own (N5)? */
static unsigned char gpu_known[CAP_GROUPS], gpu_own[CAP_GROUPS];
static uint32_t gpu_digest[CAP_GROUPS];

/* The module's NCCL row, if a module with NCCL is installed. */
static const td_nccl_ops_t *
nccl_ops(void)
{
    return td__device_module_nccl(TD_DEVICE_CUDA);
}

static int
nccl_kind(coll_kind_t k, td_nccl_kind_t *out)
{
    switch (k) {
    case COLL_ALL_REDUCE:     *out = TD_NCCL_ALL_REDUCE;     return 1;
    case COLL_BROADCAST:      *out = TD_NCCL_BROADCAST;      return 1;
    case COLL_REDUCE:         *out = TD_NCCL_REDUCE;         return 1;
    case COLL_ALL_GATHER:     *out = TD_NCCL_ALL_GATHER;     return 1;
    case COLL_REDUCE_SCATTER: *out = TD_NCCL_REDUCE_SCATTER; return 1;
    default:                  return 0;
    }
}

/* Every member published NCCL-capable under td/dev/<rank> (device_map.c). */
static int
group_capable(td_group_t *g)
{
    td_store_t *store = td__runtime_store();
    int slot = (int)(g->id % CAP_GROUPS), cap = 1;

    pthread_mutex_lock(&comm_lock);
    if (cap_known[slot] && cap_digest[slot] == g->digest) {
        cap = cap_of[slot];
        pthread_mutex_unlock(&comm_lock);
        return cap;
    }
    pthread_mutex_unlock(&comm_lock);
    for (int i = 0; i < g->n && cap && store != NULL; i++) {
        int count = 0;

        if (td__device_maps_peer(store, g->ranks[i], coll_timeout(), &count,
                                &cap) != TD_OK) {
            td_error_clear();
            cap = 0;
        }
    }
    pthread_mutex_lock(&comm_lock);
    cap_digest[slot] = g->digest;
    cap_of[slot] = (unsigned char)(store != NULL && cap);
    cap_known[slot] = 1;
    pthread_mutex_unlock(&comm_lock);
    return store != NULL && cap;
}

/* Every member of G on a GPU of its own (N5): each puts which GPU its
 * DEVICE is (host and PCI bus id) under td/nccl/gpu/<group>/<digest>/<rank>
 * and reads the others'. All members come here at the same collective (the
 * group's first on device tensors, N2's contract), so all reach the same
 * verdict; it is kept for the group. */
static int
group_gpus_own(const td_nccl_ops_t *nccl, td_group_t *g, int device)
{
    td_store_t *store = td__runtime_store();
    int slot = (int)(g->id % CAP_GROUPS), own = 1;
    char key[80], mine[96], *ids = NULL;
    td_status_t st;

    pthread_mutex_lock(&comm_lock);
    if (gpu_known[slot] && gpu_digest[slot] == g->digest) {
        own = gpu_own[slot];
        pthread_mutex_unlock(&comm_lock);
        return own;
    }
    pthread_mutex_unlock(&comm_lock);
    snprintf(mine, sizeof(mine), "%016llx ",
             (unsigned long long)td__runtime_host_id(g->ranks[g->me]));
    st = nccl->device_id(device, mine + strlen(mine),
                         sizeof(mine) - strlen(mine));
    snprintf(key, sizeof(key), "td/nccl/gpu/%u/%08x/%d", g->id, g->digest,
             g->me);
    if (st == TD_OK) {
        st = td_store_set(store, key, mine, strlen(mine) + 1);
    }
    ids = st == TD_OK ? calloc((size_t)g->n, sizeof(mine)) : NULL;
    for (int i = 0; ids != NULL && i < g->n && own; i++) {
        void *v = NULL;
        size_t len = 0;

        snprintf(key, sizeof(key), "td/nccl/gpu/%u/%08x/%d", g->id,
                 g->digest, i);
        /* "<16 hex digits> <bus id>\0", as written above */
        if (td_store_get(store, key, coll_timeout(), &v, &len) != TD_OK ||
            len < 19 || len > sizeof(mine) || ((char *)v)[16] != ' ' ||
            ((char *)v)[len - 1] != '\0') {
            td_log_warn("coll: group %u: no valid GPU id from rank %d; collectives "
                        "on device tensors are staged", g->id, g->ranks[i]);
            td_error_clear();
            own = 0;
        } else {
            memcpy(ids + (size_t)i * sizeof(mine), v, len);
            for (int j = 0; j < i && own; j++) {
                if (strcmp(ids + (size_t)j * sizeof(mine), v) == 0) {
                    td_log_info("coll: group %u: ranks %d and %d share GPU "
                                "%s (NCCL refuses that): collectives on "
                                "device tensors are staged through the host",
                                g->id, g->ranks[j], g->ranks[i],
                                (char *)v + 17);
                    own = 0;
                }
            }
        }
        free(v);
    }
    if (st != TD_OK) {
        td_log_warn("coll: group %u: %s; collectives on device tensors are "
                    "staged", g->id, td_last_error());
        td_error_clear();
        own = 0;
    }
    free(ids);
    pthread_mutex_lock(&comm_lock);
    gpu_digest[slot] = g->digest;
    gpu_own[slot] = (unsigned char)(ids != NULL && own);
    gpu_known[slot] = 1;
    pthread_mutex_unlock(&comm_lock);
    return ids != NULL && own;
}

/* Prefix the module's message with the group and rank. */
static td_status_t
nccl_error(td_status_t code, const char *what, td_group_t *g)
{
    char why[512];

    snprintf(why, sizeof(why), "%s", td_last_error());
    return td_error(code, "coll: %s on group %u (rank %d of %d): %s", what,
                    g->id, g->me, g->n, why);
}

/* The communicator of G on DEVICE (N2). */
static td_status_t
get_comm(const td_nccl_ops_t *nccl, td_group_t *g, int device,
         void **comm_p)
{
    td_store_t *store = td__runtime_store();
    unsigned char id[TD_NCCL_ID_MAX];
    comm_t *c;
    char key[64];
    void *v = NULL;
    size_t len = 0;
    td_status_t status;

    pthread_mutex_lock(&comm_lock);
    for (c = comms; c != NULL; c = c->next) {
        if (c->group_id == g->id && c->digest == g->digest) {
            int on = c->device;

            *comm_p = c->comm;
            pthread_mutex_unlock(&comm_lock);
            if (on != device) {
                return td_error(TD_ERR_INVALID, "coll: group %u runs NCCL "
                                "on cuda:%d on rank %d; a tensor on cuda:%d "
                                "needs a group of its own (N2)", g->id, on,
                                g->ranks[g->me], device);
            }
            return TD_OK;
        }
    }
    pthread_mutex_unlock(&comm_lock);
    /* no device in the key: members number their GPUs as they like */
    snprintf(key, sizeof(key), "td/nccl/id/%u/%08x", g->id, g->digest);
    if (g->me == 0) {
        if ((status = nccl->unique_id(id)) != TD_OK) {
            return nccl_error(status, "ncclGetUniqueId", g);
        }
        status = td_store_set(store, key, id, nccl->id_size);
        if (status != TD_OK) {
            return status;
        }
    } else {
        status = td_store_get(store, key, coll_timeout(), &v, &len);
        if (status != TD_OK) {
            return status;
        }
        if (len != nccl->id_size) {
            free(v);
            return td_error(TD_ERR_PROTOCOL, "coll: NCCL id of group %u has "
                            "%zu bytes, not %zu", g->id, len, nccl->id_size);
        }
        memcpy(id, v, len);
        free(v);
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
    }
    status = nccl->comm_init(device, g->n, g->me, id, &c->comm);
    if (status != TD_OK) {
        free(c);
        return nccl_error(status, "ncclCommInitRank", g);
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

/* Abort COMM and drop it from the cache (N4). */
static void
comm_abort(const td_nccl_ops_t *nccl, void *comm)
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
    nccl->abort(comm);
    free(c);
}

/* Wait for the collective queued on DEVICE's stream, at most the
 * collective timeout, watching NCCL's async error (N4). */
static td_status_t
bounded_sync(const td_nccl_ops_t *nccl, td_group_t *g, const coll_args_t *a,
             int device, void *comm)
{
    double deadline = td_now_s() + coll_timeout();
    struct timespec nap = { 0, 20000 };        /* 20 us between polls */
    char msg[COLL_ERR_MAX], why[512];
    td_status_t code;
    int done = 0;

    for (;;) {
        code = nccl->poll(comm, device, &done);
        if (code != TD_OK) {
            snprintf(why, sizeof(why), "%s", td_last_error());
            code = TD_ERR_IO;
            snprintf(msg, sizeof(msg), "coll: %s through NCCL on group %u "
                     "(rank %d of %d, cuda:%d): %s", coll_kind_name(a->kind),
                     g->id, g->me, g->n, device, why);
            break;
        }
        if (done) {
            return TD_OK;
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
    comm_abort(nccl, comm);
    coll_group_fail(g, code, 0, 0, msg);
    return td_error(code, "%s", msg);
}

static int
on_device(const td_tensor_t *t)
{
    return t != NULL && td_tensor_device(t).type != TD_DEVICE_CPU;
}

coll_route_t
coll_device_route(td_group_t *g, const coll_args_t *a)
{
    const td_nccl_ops_t *nccl;
    td_tensor_t *t = a->t != NULL ? a->t : a->in;
    td_nccl_kind_t kind;
    int reduces = a->kind == COLL_ALL_REDUCE || a->kind == COLL_REDUCE ||
                  a->kind == COLL_REDUCE_SCATTER;

    if (!on_device(a->t) && !on_device(a->in)) {
        return COLL_ROUTE_HOST;        /* (before the module's lookup) */
    }
    nccl = nccl_ops();
    if (nccl == NULL || td__device_test_backend() || a->outs != NULL ||
        !nccl_kind(a->kind, &kind) || !on_device(t) ||
        (a->in != NULL && !on_device(a->in)) ||
        !nccl->supports(td_tensor_dtype(t), reduces, a->op)) {
        return COLL_ROUTE_STAGED;
    }
    return group_capable(g) &&
           group_gpus_own(nccl, g, td_tensor_device(t).index)
           ? COLL_ROUTE_NCCL : COLL_ROUTE_STAGED;
}

td_status_t
coll_nccl_run(td_group_t *g, const coll_args_t *a)
{
    const td_nccl_ops_t *nccl = nccl_ops();
    td_tensor_t *t = a->t;
    int device = td_tensor_device(t).index;
    size_t count = (size_t)td_tensor_numel(a->in != NULL ? a->in : t);
    const void *send = td_tensor_data(t);
    td_nccl_kind_t kind;
    void *comm = NULL;
    td_status_t status;

    if (nccl == NULL || !nccl_kind(a->kind, &kind)) {
        return td_error(TD_ERR_UNSUPPORTED, "coll: %s has no NCCL route%s",
                        coll_kind_name(a->kind), nccl == NULL
                        ? " (the CUDA module has no NCCL)" : "");
    }
    if (kind == TD_NCCL_ALL_GATHER || kind == TD_NCCL_REDUCE_SCATTER) {
        send = td_tensor_data(a->in);
    }
    if (kind == TD_NCCL_REDUCE_SCATTER) {
        count = (size_t)td_tensor_numel(t);
    }
    status = get_comm(nccl, g, device, &comm);
    if (status != TD_OK) {
        return status;
    }
    status = nccl->launch(comm, device, kind, send, td_tensor_data(t), count,
                          td_tensor_dtype(t), a->op, a->root);
    if (status != TD_OK) {
        return nccl_error(status, coll_kind_name(a->kind), g);
    }
    return bounded_sync(nccl, g, a, device, comm);  /* N3 */
}

void
coll_nccl_shutdown(void)
{
    const td_nccl_ops_t *nccl = nccl_ops();
    comm_t *c;

    pthread_mutex_lock(&comm_lock);
    while ((c = comms) != NULL) {
        comms = c->next;
        if (nccl != NULL) {
            nccl->destroy(c->comm);
        }
        free(c);
    }
    memset(cap_known, 0, sizeof(cap_known));
    pthread_mutex_unlock(&comm_lock);
}
