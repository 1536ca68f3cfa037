/* runtime/rpc/rpc_device.c: device tensors over RPC (see rpc_device.h for
 * the design and invariants DV1-DV4). */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "base/log.h"
#include "runtime/rpc/rpc_device.h"
#include "runtime/rpc/staging_cuda.h"

/* One staged body that arrived (or is arriving) ahead of its message. */
typedef struct landed {
    struct landed *next;
    int            src;
    uint64_t       id;
    void          *buf;
    size_t         total;
    td_device_t    device;
    int            complete;       /* every byte placed (received OK) */
} landed_t;

static struct {
    td_transport_t  *tp;
    td_staging_t    *eng;
    int              world_size;
    pthread_mutex_t  lock;
    landed_t        *landed;
    size_t           n_landed;
    td_device_map_t *learned;        /* per rank (reply maps), lazily */
    atomic_int       any_learned;
    atomic_uint_fast64_t xfer_seq;
    atomic_int       forced;         /* -1 auto, else td_route_t */
} dv = { .lock = PTHREAD_MUTEX_INITIALIZER, .forced = -1 };

static char *
dev_str(td_device_t d, char *buf, size_t len)
{
    td_device_str(d, buf, len);
    return buf;
}
#define DEV_STR(d) dev_str((d), (char[24]){0}, 24)

/* ---- the receiver's table of staged bodies (DV1, DV2) ------------------ */

static td_status_t
on_dest(void *arg, int src, uint64_t id, size_t total, void **dst_p)
{
    td_device_t device = td_rpc_wire_xfer_device(id);
    landed_t *l;
    td_status_t status;

    (void)arg;
    status = td_device_check(device);
    if (status != TD_OK) {
        return status;
    }
    l = calloc(1, sizeof(*l));
    if (l == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "rpc: out of memory for a staged "
                        "body from rank %d", src);
    }
    pthread_mutex_lock(&dv.lock);
    if (dv.n_landed >= TD_RPC_DEVICE_LANDED_MAX) {
        pthread_mutex_unlock(&dv.lock);
        free(l);
        return td_error(TD_ERR_RANGE, "rpc: %d staged bodies wait for their "
                        "messages already; refusing one of %zu bytes from "
                        "rank %d", TD_RPC_DEVICE_LANDED_MAX, total, src);
    }
    dv.n_landed++;                 /* reserved before the allocation */
    pthread_mutex_unlock(&dv.lock);
    status = td_device_alloc(device, total, &l->buf);
    if (status != TD_OK) {
        pthread_mutex_lock(&dv.lock);
        dv.n_landed--;
        pthread_mutex_unlock(&dv.lock);
        free(l);
        return status;
    }
    l->src = src;
    l->id = id;
    l->total = total;
    l->device = device;
    pthread_mutex_lock(&dv.lock);
    l->next = dv.landed;
    dv.landed = l;
    pthread_mutex_unlock(&dv.lock);
    *dst_p = l->buf;
    return TD_OK;
}

/* Unlink (SRC, ID) from the table (SRC -1 and ID 0: the first entry). */
static landed_t *
take_locked(int src, uint64_t id)
{
    for (landed_t **p = &dv.landed; *p != NULL; p = &(*p)->next) {
        if ((*p)->src == src && (*p)->id == id) {
            landed_t *l = *p;

            *p = l->next;
            dv.n_landed--;
            return l;
        }
    }
    return NULL;
}

static void
landed_free(landed_t *l)
{
    td_device_free(l->device, l->buf);
    free(l);
}

static void
on_received(void *arg, td_status_t status, int src, uint64_t id, void *dst,
            size_t total)
{
    landed_t *l = NULL;

    (void)arg;
    (void)dst;
    pthread_mutex_lock(&dv.lock);
    if (status == TD_OK && dv.tp != NULL &&
        td_transport_peer_alive(dv.tp, src)) {
        for (l = dv.landed; l != NULL; l = l->next) {
            if (l->src == src && l->id == id) {
                l->complete = 1;   /* the message claims it */
            }
        }
        l = NULL;
    } else {
        l = take_locked(src, id);  /* failed, or its message never comes */
    }
    pthread_mutex_unlock(&dv.lock);
    if (l != NULL) {
        td_log_debug("rpc: staged body %llx (%zu bytes) from rank %d failed: "
                     "%s", (unsigned long long)id, total, src,
                     td_strerror(status));
        landed_free(l);
    }
}

static void
landed_deleter(void *data, void *arg)
{
    landed_t *l = arg;

    (void)data;
    landed_free(l);
}

td_status_t
td_rpc_device_rx_tensor(int src, const td_rpc_wire_tensor_t *t,
                        td_tensor_t **out, td_mem_type_t *mem_p)
{
    const td_device_ops_t *ops;
    landed_t *l;
    td_status_t status;

    status = td_device_check(t->device);
    if (status != TD_OK) {
        char why[300];

        snprintf(why, sizeof(why), "%s", td_last_error());
        return td_error(TD_ERR_PROTOCOL, "rpc: rank %d sent a tensor for %s "
                        "here: %s", src, DEV_STR(t->device), why);
    }
    ops = td_device_ops(t->device.type);
    *mem_p = t->device.type == TD_DEVICE_CPU || (ops != NULL &&
             ops->host_memory) ? TD_MEM_HOST : TD_MEM_CUDA;
    if (t->xfer == TD_RPC_WIRE_XFER_EAGER) {
        *mem_p = TD_MEM_HOST;          /* V5: moved to the device on decode */
        return td_tensor_empty(t->shape, t->ndim, t->dtype, TD_CPU, out);
    }
    if (t->xfer == 0) {
        return td_tensor_empty(t->shape, t->ndim, t->dtype, t->device, out);
    }
    pthread_mutex_lock(&dv.lock);
    l = take_locked(src, t->xfer);
    pthread_mutex_unlock(&dv.lock);
    if (l == NULL || l->total != t->nbytes) {
        size_t got = l != NULL ? l->total : 0;

        if (l != NULL) {
            landed_free(l);
        }
        return td_error(TD_ERR_PROTOCOL, "rpc: rank %d names staged body "
                        "%llx of %zu bytes, %s", src,
                        (unsigned long long)t->xfer, t->nbytes,
                        got ? "which has another size" : "which never came");
    }
    status = td_tensor_from_blob(l->buf, t->shape, t->ndim, t->dtype,
                                 t->device, landed_deleter, l, out);
    if (status != TD_OK) {
        landed_free(l);
    }
    return status;
}

/* ---- routing ----------------------------------------------------------- */

void
td_rpc_device_learn(int src, const td_device_map_t *map)
{
    if (src < 0 || src >= dv.world_size) {
        return;
    }
    pthread_mutex_lock(&dv.lock);
    if (dv.learned == NULL) {
        dv.learned = calloc((size_t)dv.world_size, sizeof(*dv.learned));
    }
    if (dv.learned != NULL) {
        dv.learned[src] = *map;
        dv.learned[src].peer = src;
        atomic_store(&dv.any_learned, 1);
    }
    pthread_mutex_unlock(&dv.lock);
}

const td_rpc_wire_dev_t *
td_rpc_device_route(int dst, int type, td_rpc_device_route_t *route)
{
    const td_device_maps_t *maps = td_device_maps();
    const td_device_map_t *own = NULL;
    int reply = type == TD_RPC_MSG_REPLY || type == TD_RPC_MSG_ERROR;
    int learned = 0, forced;

    if (!reply && maps != NULL && maps->n_maps > 0) {
        own = td_device_maps_find(maps, dst);
    }
    if (atomic_load(&dv.any_learned)) {
        pthread_mutex_lock(&dv.lock);
        if (dv.learned != NULL && dst >= 0 && dst < dv.world_size &&
            dv.learned[dst].n_pairs > 0) {
            route->learned = dv.learned[dst];
            learned = 1;
        }
        pthread_mutex_unlock(&dv.lock);
    }
    if (own == NULL && !learned) {
        return NULL;
    }
    memset(&route->dev, 0, sizeof(route->dev));
    if (own != NULL) {
        route->own = *own;
        route->dev.map = &route->own;
        if (td_device_map_reverse(own, &route->attach) == TD_OK) {
            route->dev.attach = &route->attach;
        }
        route->dev.fallback = learned ? &route->learned : NULL;
    } else {
        route->dev.map = &route->learned;
    }
    forced = atomic_load(&dv.forced);
    route->dev.staged = dv.eng != NULL &&
        (forced >= 0 ? forced == TD_ROUTE_STAGED
                     : td_staging_route(td_transport_mem_types(dv.tp),
                                        TD_MEM_CUDA) == TD_ROUTE_STAGED);
    route->dev.xfer_seq = atomic_fetch_add(&dv.xfer_seq, 1);
    return &route->dev;
}

void
td_rpc_device_force_route(int route)
{
    atomic_store(&dv.forced, route);
}

td_status_t
td_rpc_device_sync_out(const td_rpc_wire_out_t *out)
{
    td_status_t status = TD_OK;

    if (out->n_device_direct == 0) {
        return TD_OK;
    }
    for (int k = 0; k < out->n_tensors && status == TD_OK; k++) {
        status = td_device_sync(td_tensor_device(out->tensors[k]));
    }
    return status;
}

/* ---- staged sends (DV3) ------------------------------------------------- */

typedef struct {
    pthread_mutex_t lock;
    int             left;
    td_status_t     status;
    void          (*done)(void *arg, td_status_t status);
    void           *arg;
} staged_send_t;

/* One body finished, or N bodies never started (*_N). */
static void
staged_finish(staged_send_t *s, td_status_t status, int n)
{
    int last;

    pthread_mutex_lock(&s->lock);
    if (status != TD_OK && s->status == TD_OK) {
        s->status = status;
    }
    s->left -= n;
    last = s->left == 0;
    pthread_mutex_unlock(&s->lock);
    if (last) {
        s->done(s->arg, s->status);
        pthread_mutex_destroy(&s->lock);
        free(s);
    }
}

static void
staged_one(void *arg, td_status_t status)
{
    staged_finish(arg, status, 1);
}

td_status_t
td_rpc_device_send_staged(int dst, const td_rpc_wire_out_t *out,
                          void (*done)(void *arg, td_status_t status),
                          void *arg)
{
    staged_send_t *s;
    td_status_t status;

    if (dv.eng == NULL) {
        return td_error(TD_ERR_UNSUPPORTED, "rpc: no staging engine (no "
                        "device here) for %d device bodies to rank %d",
                        out->n_staged, dst);
    }
    /* the staging engine copies on the device streams, after the kernels
     * that made the data (cuda_device.h G2) */
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "rpc: out of memory");
    }
    pthread_mutex_init(&s->lock, NULL);
    s->left = out->n_staged + 1;       /* + this function's own hold */
    s->done = done;
    s->arg = arg;
    for (int i = 0; i < out->n_staged; i++) {
        status = td_staging_send(dv.eng, dst, out->staged[i].id,
                                 out->staged[i].buf, out->staged[i].len,
                                 staged_one, s);
        if (status != TD_OK) {
            if (i == 0) {
                pthread_mutex_destroy(&s->lock);
                free(s);
                return status;         /* nothing started: no callback */
            }
            /* the ones in flight finish; the rest never start */
            staged_finish(s, status, out->n_staged - i);
            break;
        }
    }
    staged_finish(s, TD_OK, 1);
    return TD_OK;
}

/* ---- the module's life -------------------------------------------------- */

td_status_t
td_rpc_device_setup(td_transport_t *tp, const td_world_t *w)
{
    td_staging_params_t p;
    int n = 0;
    td_status_t status;

    dv.tp = tp;
    dv.world_size = w->world_size;
    atomic_store(&dv.xfer_seq, 1);
    n = td_device_count_loaded(TD_DEVICE_CUDA);   /* loads nothing */
    if (n == 0) {
        return TD_OK;                  /* DV4 */
    }
    memset(&p, 0, sizeof(p));
    p.handler_id = TD_RPC_STAGING_ID;
    status = td_staging_device_ops(&p.ops);
    if (status != TD_OK) {
        return status;
    }
    p.dest = on_dest;
    p.received = on_received;
    return td_staging_create(tp, &p, &dv.eng);
}

void
td_rpc_device_peer_failed(int rank)
{
    landed_t *l;

    td_staging_peer_failed(dv.eng, rank);
    /* bodies that arrived whole but whose message never will (those
     * still arriving are the engine's until on_received fails them) */
    for (;;) {
        pthread_mutex_lock(&dv.lock);
        for (l = dv.landed; l != NULL && (l->src != rank || !l->complete);
             l = l->next) {
        }
        if (l != NULL) {
            l = take_locked(l->src, l->id);
        }
        pthread_mutex_unlock(&dv.lock);
        if (l == NULL) {
            break;
        }
        landed_free(l);
    }
}

size_t
td_rpc_device_outstanding(void)
{
    return dv.eng != NULL ? td_staging_outstanding(dv.eng) : 0;
}

void
td_rpc_device_shutdown(void)
{
    landed_t *l;

    td_staging_destroy(dv.eng);
    dv.eng = NULL;
    pthread_mutex_lock(&dv.lock);
    while ((l = dv.landed) != NULL) {
        dv.landed = l->next;
        landed_free(l);
    }
    dv.n_landed = 0;
    free(dv.learned);
    dv.learned = NULL;
    atomic_store(&dv.any_learned, 0);
    pthread_mutex_unlock(&dv.lock);
    dv.tp = NULL;
}

td_status_t
td_rpc_device_stats(td_staging_stats_t *stats_p, size_t *landed_p)
{
    if (dv.eng == NULL) {
        return td_error(TD_ERR_STATE, "rpc: no staging engine (no device)");
    }
    td_staging_stats(dv.eng, stats_p);
    pthread_mutex_lock(&dv.lock);
    *landed_p = dv.n_landed;
    pthread_mutex_unlock(&dv.lock);
    return TD_OK;
}
