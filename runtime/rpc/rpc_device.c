/* runtime/rpc/rpc_device.c: device tensors over RPC (see rpc_device.h for
 * the design and invariants DV1-DV4). */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/autograd.h>
#include "kernels/device.h"
#include "base/log.h"
#include "runtime/rpc/rpc_device.h"
#include "runtime/rpc/rpc_list.h"

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
    td_device_t device = td__rpc_wire_xfer_device(id);
    landed_t *l;
    td_status_t status;

    (void)arg;
    status = td__device_check(device);
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
    status = td__device_alloc(device, total, &l->buf);
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
    td__device_free(l->device, l->buf);
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
        td__transport_peer_alive(dv.tp, src)) {
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
td__rpc_device_rx_tensor(int src, const td_rpc_wire_tensor_t *t,
                        td_tensor_t **out, td_mem_type_t *mem_p)
{
    const td_device_ops_t *ops;
    landed_t *l;
    td_status_t status;

    status = td__device_check(t->device);
    if (status != TD_OK) {
        char why[300];

        snprintf(why, sizeof(why), "%s", td_last_error());
        return td_error(TD_ERR_PROTOCOL, "rpc: rank %d sent a tensor for %s "
                        "here: %s", src, DEV_STR(t->device), why);
    }
    ops = td__device_ops(t->device.type);
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
td__rpc_device_learn(int src, const td_device_map_t *map)
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
td__rpc_device_route(int dst, int type, td_rpc_device_route_t *route)
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
                     : td__staging_route(td__transport_mem_types(dv.tp),
                                        TD_MEM_CUDA) == TD_ROUTE_STAGED);
    route->dev.xfer_seq = atomic_fetch_add(&dv.xfer_seq, 1);
    return &route->dev;
}

void
td__rpc_device_force_route(int route)
{
    atomic_store(&dv.forced, route);
}

td_status_t
td__rpc_device_sync_out(const td_rpc_wire_out_t *out)
{
    td_status_t status = TD_OK;

    if (out->n_device_direct == 0) {
        return TD_OK;
    }
    for (int k = 0; k < out->n_tensors && status == TD_OK; k++) {
        status = td__device_sync(td_tensor_device(out->tensors[k]));
    }
    return status;
}

/* ---- a message's tensors, prepared for the codec ------------------------ */

static int
dev_same(td_device_t a, td_device_t b)
{
    return a.type == b.type && (a.type == TD_DEVICE_CPU || a.index == b.index);
}

static int
map_entry(const td_device_map_t *map, td_device_t from, td_device_t *to_p)
{
    for (int i = 0; map != NULL && i < map->n_pairs; i++) {
        if (dev_same(map->pairs[i].from, from)) {
            *to_p = map->pairs[i].to;
            return 1;
        }
    }
    return 0;
}

/* Where a tensor on FROM lands at DST (rpc_wire.h V1). */
static td_status_t
target_device(const td_rpc_wire_dev_t *dev, size_t item, int dst,
              td_device_t from, td_device_t *to_p)
{
    char why[400];
    td_status_t status;

    if (from.type == TD_DEVICE_CPU && dev == NULL) {
        *to_p = TD_CPU;                /* the common case: no maps at all */
        return TD_OK;
    }
    if (dev != NULL && (map_entry(dev->map, from, to_p) ||
                        map_entry(dev->fallback, from, to_p))) {
        return TD_OK;
    }
    status = td_device_map_lookup(NULL, dst, from, to_p);
    if (status != TD_OK) {
        snprintf(why, sizeof(why), "%s", td_last_error());
        return td_error(status, "rpc: list item %zu: %s", item, why);
    }
    return TD_OK;
}

/* The memory type UCX sees for memory of DEVICE. */
static td_mem_type_t
mem_of(td_device_t device)
{
    const td_device_ops_t *ops;

    if (device.type == TD_DEVICE_CPU) {
        return TD_MEM_HOST;
    }
    ops = td__device_ops(device.type);
    return ops != NULL && ops->host_memory ? TD_MEM_HOST : TD_MEM_CUDA;
}

static void
host_copy_deleter(void *data, void *arg)
{
    (void)data;
    td__staging_host_free(arg);
    free(arg);
}

/* A cpu tensor holding the values of the contiguous device tensor T: a
 * host copy made by the staging module (ucx_transport/staging.h H1). */
static td_status_t
host_copy(td_tensor_t *t, td_tensor_t **out)
{
    td_staging_host_t *h = malloc(sizeof(*h));
    td_status_t status;

    if (h == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "rpc: out of memory");
    }
    status = td__staging_host_in(td_tensor_device(t), td_tensor_data(t),
                                 td_tensor_nbytes(t), 1, h);
    if (status != TD_OK) {
        free(h);
        return status;
    }
    status = td_tensor_from_blob(h->host, td_tensor_shape(t),
                                 td_tensor_ndim(t), td_tensor_dtype(t),
                                 TD_CPU, host_copy_deleter, h, out);
    if (status != TD_OK) {
        host_copy_deleter(NULL, h);
    }
    return status;
}

/* Tensor V of list item I as it travels, as tensor K of OUT. */
static td_status_t
prepare_one(td_tensor_t *v, size_t i, int dst, const td_rpc_wire_dev_t *dev,
            td_rpc_wire_out_t *out)
{
    int k = out->n_tensors;
    td_device_t to, from = td_tensor_device(v);
    size_t nbytes = td_tensor_nbytes(v);
    int eager;
    td_tensor_t *c, *h;
    td_status_t status;

    status = target_device(dev, i, dst, from, &to);
    if (status != TD_OK) {
        return status;
    }
    if (to.type == TD_DEVICE_CUDA && (to.index < 0 || to.index > 255)) {
        return td_error(TD_ERR_RANGE, "rpc: list item %zu maps to "
                        "cuda:%d at rank %d, beyond the wire's 255", i,
                        to.index, dst);
    }
    status = td_tensor_contiguous(v, &c);
    if (status != TD_OK) {
        return status;
    }
    out->grad[k] = td_tensor_requires_grad(c) ? 1 : 0;
    /* landing on the peer's cpu, or small on the staged route (V5): a
     * host copy travels as a plain body */
    eager = dev != NULL && dev->staged && to.type != TD_DEVICE_CPU &&
            nbytes > 0 && nbytes <= TD_RPC_WIRE_EAGER_MAX;
    if ((to.type == TD_DEVICE_CPU || eager) && from.type != TD_DEVICE_CPU) {
        /* as td_tensor_to would record it: only in grad mode */
        out->grad[k] = out->grad[k] && td_grad_enabled();
        status = host_copy(c, &h);
        td_tensor_release(c);
        if (status != TD_OK) {
            return status;
        }
        c = h;
    }
    from = td_tensor_device(c);
    out->tensors[k] = c;
    out->to[k] = to;
    out->mem[k] = (uint8_t)mem_of(from);
    out->device_body[k] = to.type != TD_DEVICE_CPU ||
                          from.type != TD_DEVICE_CPU;
    out->place[k] = eager ? TD_RPC_WIRE_EAGER
                  : nbytes > 0 && out->device_body[k] && dev != NULL &&
                    dev->staged ? TD_RPC_WIRE_STAGED : TD_RPC_WIRE_BODY;
    out->n_tensors++;
    return TD_OK;
}

td_status_t
td__rpc_device_prepare(const td_rpc_list_t *args, int dst,
                      const td_rpc_wire_dev_t *dev, td_rpc_wire_out_t *out)
{
    size_t n_items = td_rpc_list_len(args);
    td_status_t status;

    td__rpc_wire_out_init(out);
    for (size_t i = 0; i < n_items; i++) {
        const td_value_t *v = &args->items[i];

        if (v->kind != TD_VALUE_TENSOR) {
            continue;
        }
        if (out->n_tensors == TD_RPC_MAX_TENSORS) {
            status = td_error(TD_ERR_RANGE, "rpc: more than %d tensors in "
                              "one message to rank %d", TD_RPC_MAX_TENSORS,
                              dst);
            goto err;
        }
        status = prepare_one(v->u.tensor, i, dst, dev, out);
        if (status != TD_OK) {
            goto err;
        }
    }
    return TD_OK;

err:
    td__rpc_wire_out_free(out);
    return status;
}

td_status_t
td__rpc_device_encode(const td_rpc_wire_meta_t *meta, const td_rpc_list_t *args,
                     int dst, size_t header_max,
                     td_rpc_wire_rref_out_fn rref_out, void *rref_arg,
                     const td_rpc_wire_dev_t *dev, td_rpc_wire_out_t *out)
{
    td_status_t status = td__rpc_device_prepare(args, dst, dev, out);

    if (status != TD_OK) {
        return status;
    }
    return td__rpc_wire_encode_dev(meta, args, dst, header_max, rref_out,
                                  rref_arg, dev, out);
}

td_status_t
td__rpc_device_land_eager(td_tensor_t *host, td_device_t device,
                         td_tensor_t **out)
{
    td_tensor_t *d;
    td_status_t status;

    status = td_tensor_empty(td_tensor_shape(host), td_tensor_ndim(host),
                             td_tensor_dtype(host), device, &d);
    if (status != TD_OK) {
        return status;
    }
    status = td__staging_copy_in(device, td_tensor_data(d),
                                 td_tensor_data(host), td_tensor_nbytes(host));
    if (status != TD_OK) {
        td_tensor_release(d);
        return status;
    }
    *out = d;
    return TD_OK;
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
td__rpc_device_send_staged(int dst, const td_rpc_wire_out_t *out,
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
        status = td__staging_send(dv.eng, dst, out->staged[i].id,
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
td__rpc_device_setup(td_transport_t *tp, const td_world_t *w)
{
    td_staging_params_t p;
    int n = 0;
    td_status_t status;

    dv.tp = tp;
    dv.world_size = w->world_size;
    atomic_store(&dv.xfer_seq, 1);
    n = td__device_count_loaded(TD_DEVICE_CUDA);   /* loads nothing */
    if (n == 0) {
        return TD_OK;                  /* DV4 */
    }
    memset(&p, 0, sizeof(p));
    p.handler_id = TD_RPC_STAGING_ID;
    status = td__staging_device_ops(&p.ops);
    if (status != TD_OK) {
        return status;
    }
    p.dest = on_dest;
    p.received = on_received;
    return td__staging_create(tp, &p, &dv.eng);
}

void
td__rpc_device_peer_failed(int rank)
{
    landed_t *l;

    td__staging_peer_failed(dv.eng, rank);
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
td__rpc_device_outstanding(void)
{
    return dv.eng != NULL ? td__staging_outstanding(dv.eng) : 0;
}

void
td__rpc_device_shutdown(void)
{
    landed_t *l;

    td__staging_destroy(dv.eng);
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
td__rpc_device_stats(td_staging_stats_t *stats_p, size_t *landed_p)
{
    if (dv.eng == NULL) {
        return td_error(TD_ERR_STATE, "rpc: no staging engine (no device)");
    }
    td__staging_stats(dv.eng, stats_p);
    pthread_mutex_lock(&dv.lock);
    *landed_p = dv.n_landed;
    pthread_mutex_unlock(&dv.lock);
    return TD_OK;
}
