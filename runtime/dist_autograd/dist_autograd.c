/* runtime/dist_autograd/dist_autograd.c: contexts, send/recv nodes and the distributed
 * backward protocol. The invariants are listed in runtime/dist_autograd/dist_internal.h;
 * comments below say which one a piece of code keeps ("D4" = invariant 4). */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/dist_autograd/dist_internal.h"
#include "runtime/rpc/rpc_internal.h"
#include "runtime/rpc/pool.h"
#include "base/clock.h"
#include <todist/ops.h>

#define RANK_MAX      TD_DIST_RANK_MAX
#define COUNTER_MASK  TD_DIST_COUNTER_MASK

/* ---- data --------------------------------------------------------------- */

typedef struct {
    int64_t    msg_id;
    td_node_t *node;
    int        dst;
} send_entry_t;

typedef struct {
    td_tensor_t *leaf;
    td_tensor_t *grad;
} grad_entry_t;

typedef struct ctx {
    int64_t          id;
    atomic_int       refs;
    pthread_mutex_t  lock;
    send_entry_t    *sends;
    int              n_send, cap_send;
    td_node_t      **recvs;
    int              n_recv, cap_recv;
    grad_entry_t    *table;             /* D6: leaf -> gradient */
    int              n_grads, cap_grads;
    int             *known;             /* sorted ranks */
    int              n_known, cap_known;
    int              graph_used;
    struct ctx      *next;
} ctx_t;

typedef struct pass pass_t;

/* One propagate message a pass is waiting for. */
typedef struct prop {
    pass_t      *pass;
    int          dst;
    int          done;
    struct prop *next;
} prop_t;

struct pass {
    td_dist_engine_t *engine;
    ctx_t            *ctx;
    atomic_int        refs;
    pthread_mutex_t   lock;
    pthread_cond_t    cond;
    int               local_done;
    int               n_out;
    prop_t           *props;
    td_status_t       status;
    char             *msg;
    int               finished;
    int               woken;     /* pass_finish done: the waiter may go */
    td_dist_reply_fn  reply;
    void             *reply_arg;
    int               retain_graph;
    struct pass      *next;
};

struct td_dist_engine {
    int              rank;
    td_dist_wire_t   wire;
    int              has_wire;
    pthread_mutex_t  lock;
    ctx_t           *contexts;
    size_t           n_contexts;
    pass_t          *passes;
    size_t           n_passes;
    atomic_llong     ctx_counter;
    atomic_llong     msg_counter;
    double           timeout;
};

typedef struct {
    td_dist_engine_t *engine;
    int64_t           ctx_id;
    int               src;
    int64_t           msg_id;
} recv_state_t;

static _Thread_local td_dist_engine_t *tl_engine;
static _Thread_local int64_t tl_ctx = TD_DIST_NO_CONTEXT;
static _Thread_local pass_t *tl_pass;
/* D12: the context whose leaf gradient this thread's post-accumulate
 * hooks are seeing (NO_CONTEXT outside ctx_sink's hook calls). */
static _Thread_local int64_t tl_accumulating = TD_DIST_NO_CONTEXT;

static pthread_mutex_t default_lock = PTHREAD_MUTEX_INITIALIZER;
static td_dist_engine_t *default_engine;
static td_dist_engine_t *owned_default;   /* made on demand, never freed */

/* ---- small helpers ---------------------------------------------------- */

static char *
vformat(const char *fmt, va_list ap)
{
    char *s = NULL;

    if (vasprintf(&s, fmt, ap) < 0) {
        return NULL;
    }
    return s;
}

static char *
format(const char *fmt, ...)
{
    va_list ap;
    char *s;

    va_start(ap, fmt);
    s = vformat(fmt, ap);
    va_end(ap);
    return s;
}

static int
has_rank_tag(const char *msg)
{
    return msg != NULL && strncmp(msg, "Error on rank ", 14) == 0;
}

static int
grow(void **arr, int *cap, int need, size_t elem)
{
    void *p;
    int c;

    if (need <= *cap) {
        return 0;
    }
    c = *cap ? *cap * 2 : 4;
    while (c < need) {
        c *= 2;
    }
    p = realloc(*arr, (size_t)c * elem);
    if (p == NULL) {
        return -1;
    }
    *arr = p;
    *cap = c;
    return 0;
}

double
td_dist_backward_timeout(void)
{
    const char *s = getenv("TODIST_DIST_BACKWARD_TIMEOUT");
    char *end;
    double v;

    if (s != NULL && *s != '\0') {
        v = strtod(s, &end);
        if (*end == '\0' && v > 0) {
            return v;
        }
    }
    return 60.0;
}

/* ---- contexts ----------------------------------------------------------- */

static ctx_t *
ctx_new(int64_t id)
{
    ctx_t *c = calloc(1, sizeof(*c));

    if (c == NULL) {
        return NULL;
    }
    c->id = id;
    atomic_init(&c->refs, 1);
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

static ctx_t *
ctx_ref(ctx_t *c)
{
    atomic_fetch_add(&c->refs, 1);
    return c;
}

static void
ctx_unref(ctx_t *c)
{
    if (c == NULL || atomic_fetch_sub(&c->refs, 1) != 1) {
        return;
    }
    for (int i = 0; i < c->n_send; i++) {
        td_node_release(c->sends[i].node);
    }
    for (int i = 0; i < c->n_recv; i++) {
        td_node_release(c->recvs[i]);
    }
    for (int i = 0; i < c->n_grads; i++) {
        td_tensor_release(c->table[i].leaf);
        td_tensor_release(c->table[i].grad);
    }
    free(c->sends);
    free(c->recvs);
    free(c->table);
    free(c->known);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Under c->lock. */
static int
ctx_add_known(ctx_t *c, int rank)
{
    int i;

    for (i = 0; i < c->n_known && c->known[i] < rank; i++) {
    }
    if (i < c->n_known && c->known[i] == rank) {
        return 0;
    }
    if (grow((void **)&c->known, &c->cap_known, c->n_known + 1,
             sizeof(int)) != 0) {
        return -1;
    }
    memmove(&c->known[i + 1], &c->known[i],
            (size_t)(c->n_known - i) * sizeof(int));
    c->known[i] = rank;
    c->n_known++;
    return 0;
}

/* A new reference to context ID, or NULL. */
static ctx_t *
ctx_find(td_dist_engine_t *e, int64_t id)
{
    ctx_t *c;

    pthread_mutex_lock(&e->lock);
    for (c = e->contexts; c != NULL && c->id != id; c = c->next) {
    }
    if (c != NULL) {
        ctx_ref(c);
    }
    pthread_mutex_unlock(&e->lock);
    return c;
}

static int
ctx_id_valid(int64_t id)
{
    return td_dist_id_valid(id);
}

/* Context ID, created here when missing (a worker joins a context when a
 * message of it first arrives). */
static td_status_t
ctx_get_or_create(td_dist_engine_t *e, int64_t id, ctx_t **c_p)
{
    ctx_t *c, *fresh;

    if (!ctx_id_valid(id)) {
        return td_error(TD_ERR_PROTOCOL, "dist_autograd: rank %d got invalid "
                        "context id %lld", e->rank, (long long)id);
    }
    c = ctx_find(e, id);
    if (c != NULL) {
        *c_p = c;
        return TD_OK;
    }
    if ((id >> 48) == e->rank) {
        /* D9: only begin creates this worker's own contexts; a late
         * message for one that ended must not resurrect it */
        return td_error(TD_ERR_NOT_FOUND, "dist_autograd: context %lld of "
                        "rank %d has ended", (long long)id, e->rank);
    }
    fresh = ctx_new(id);
    if (fresh == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "dist_autograd: out of memory");
    }
    pthread_mutex_lock(&e->lock);
    for (c = e->contexts; c != NULL && c->id != id; c = c->next) {
    }
    if (c == NULL) {
        c = fresh;
        c->next = e->contexts;
        e->contexts = c;
        e->n_contexts++;
        fresh = NULL;
    }
    ctx_ref(c);
    pthread_mutex_unlock(&e->lock);
    ctx_unref(fresh);
    *c_p = c;
    return TD_OK;
}

/* Unlink context ID from the engine; returns the engine's reference. */
static ctx_t *
ctx_remove(td_dist_engine_t *e, int64_t id)
{
    ctx_t **pp, *c = NULL;

    pthread_mutex_lock(&e->lock);
    for (pp = &e->contexts; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->id == id) {
            c = *pp;
            *pp = c->next;
            e->n_contexts--;
            break;
        }
    }
    pthread_mutex_unlock(&e->lock);
    return c;
}

/* D10: tell every worker the context touched, except EXCEPT. */
static void
ctx_release_everywhere(td_dist_engine_t *e, ctx_t *c, int except)
{
    int n, *known = NULL;

    pthread_mutex_lock(&c->lock);
    n = c->n_known;
    if (n > 0 && (known = malloc((size_t)n * sizeof(int))) != NULL) {
        memcpy(known, c->known, (size_t)n * sizeof(int));
    }
    pthread_mutex_unlock(&c->lock);
    for (int i = 0; known != NULL && i < n; i++) {
        if (known[i] != except && known[i] != e->rank && e->has_wire) {
            e->wire.release(e->wire.arg, known[i], c->id);
        }
    }
    free(known);
    ctx_unref(c);
}

/* ---- engines ------------------------------------------------------------ */

td_status_t
td__dist_engine_create(int rank, const td_dist_wire_t *wire,
                      td_dist_engine_t **engine_p)
{
    td_dist_engine_t *e;

    if (rank < 0 || rank > RANK_MAX) {
        return td_error(TD_ERR_RANGE, "dist_autograd: rank %d outside "
                        "0..%d", rank, RANK_MAX);
    }
    if (wire != NULL && (wire->propagate == NULL || wire->release == NULL)) {
        return td_error(TD_ERR_INVALID, "dist_autograd: wire without "
                        "propagate or release");
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "dist_autograd: out of memory");
    }
    e->rank = rank;
    if (wire != NULL) {
        e->wire = *wire;
        e->has_wire = 1;
    }
    pthread_mutex_init(&e->lock, NULL);
    atomic_init(&e->ctx_counter, 0);
    atomic_init(&e->msg_counter, 0);
    *engine_p = e;
    return TD_OK;
}

void
td__dist_engine_destroy(td_dist_engine_t *e)
{
    ctx_t *c;

    if (e == NULL) {
        return;
    }
    pthread_mutex_lock(&default_lock);
    if (default_engine == e) {
        default_engine = NULL;
    }
    pthread_mutex_unlock(&default_lock);
    while ((c = e->contexts) != NULL) {
        e->contexts = c->next;
        ctx_unref(c);
    }
    pthread_mutex_destroy(&e->lock);
    free(e);
}

int
td__dist_engine_rank(const td_dist_engine_t *e)
{
    return e->rank;
}

void
td__dist_engine_set_default(td_dist_engine_t *e)
{
    pthread_mutex_lock(&default_lock);
    default_engine = e;
    pthread_mutex_unlock(&default_lock);
}

void
td__dist_engine_bind(td_dist_engine_t *e)
{
    tl_engine = e;
}

void
td__dist_engine_set_timeout(td_dist_engine_t *e, double s)
{
    e->timeout = s;
}

/* The engine the public API works on for this thread. */
static td_status_t
engine_current(td_dist_engine_t **e_p)
{
    td_status_t status = TD_OK;

    if (tl_engine != NULL) {
        *e_p = tl_engine;
        return TD_OK;
    }
    pthread_mutex_lock(&default_lock);
    if (default_engine == NULL) {
        if (owned_default == NULL) {
            status = td__dist_engine_create(0, NULL, &owned_default);
        }
        default_engine = owned_default;
    }
    if (status == TD_OK) {
        *e_p = default_engine;
    }
    pthread_mutex_unlock(&default_lock);
    return status;
}

/* This thread's engine and its context CTX_ID (a reference: ctx_unref),
 * or an error naming the context and the rank, prefixed WHAT. */
static td_status_t
ctx_lookup(int64_t ctx_id, const char *what, td_dist_engine_t **e_p,
           ctx_t **c_p)
{
    td_status_t status = engine_current(e_p);

    if (status != TD_OK) {
        return status;
    }
    *c_p = ctx_find(*e_p, ctx_id);
    if (*c_p == NULL) {
        return td_error(TD_ERR_NOT_FOUND, "%s: context %lld is not known on "
                        "rank %d", what, (long long)ctx_id, (*e_p)->rank);
    }
    return TD_OK;
}

td_dist_engine_t *
td__dist_engine_default(void)
{
    td_dist_engine_t *e = NULL;
    td_dist_engine_t *saved = tl_engine;

    tl_engine = NULL;
    engine_current(&e);
    tl_engine = saved;
    return e;
}

size_t
td__dist_engine_n_contexts(td_dist_engine_t *e)
{
    size_t n;

    pthread_mutex_lock(&e->lock);
    n = e->n_contexts;
    pthread_mutex_unlock(&e->lock);
    return n;
}

size_t
td__dist_engine_outstanding(td_dist_engine_t *e)
{
    size_t n;

    pthread_mutex_lock(&e->lock);
    n = e->n_passes;
    pthread_mutex_unlock(&e->lock);
    return n;
}

/* ---- contexts: public API (D1) ------------------------------------------ */

td_status_t
td_dist_autograd_begin(int64_t *ctx_id_p)
{
    td_dist_engine_t *e;
    td_status_t status;
    int64_t id, counter;
    ctx_t *c;

    if (tl_ctx != TD_DIST_NO_CONTEXT) {
        return td_error(TD_ERR_STATE, "dist_autograd: this thread is already "
                        "in context %lld; contexts do not nest",
                        (long long)tl_ctx);
    }
    status = engine_current(&e);
    if (status != TD_OK) {
        return status;
    }
    counter = atomic_fetch_add(&e->ctx_counter, 1) + 1;
    if (counter > COUNTER_MASK) {
        return td_error(TD_ERR_RANGE, "dist_autograd: rank %d ran out of "
                        "context ids", e->rank);
    }
    id = ((int64_t)e->rank << 48) | counter;
    c = ctx_new(id);
    if (c == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "dist_autograd: out of memory");
    }
    pthread_mutex_lock(&e->lock);
    c->next = e->contexts;
    e->contexts = c;
    e->n_contexts++;
    pthread_mutex_unlock(&e->lock);
    tl_ctx = id;
    *ctx_id_p = id;
    return TD_OK;
}

int64_t
td_dist_autograd_current(void)
{
    return tl_ctx;
}

td_status_t
td_dist_autograd_end(int64_t ctx_id)
{
    td_dist_engine_t *e;
    td_status_t status;
    ctx_t *c;

    if (ctx_id == TD_DIST_NO_CONTEXT || ctx_id != tl_ctx) {
        return td_error(TD_ERR_STATE, "dist_autograd: end of context %lld, "
                        "but the current context is %lld", (long long)ctx_id,
                        (long long)tl_ctx);
    }
    status = engine_current(&e);
    if (status != TD_OK) {
        return status;
    }
    tl_ctx = TD_DIST_NO_CONTEXT;
    c = ctx_remove(e, ctx_id);
    if (c == NULL) {
        return td_error(TD_ERR_NOT_FOUND, "dist_autograd: context %lld is not "
                        "known on rank %d", (long long)ctx_id, e->rank);
    }
    ctx_release_everywhere(e, c, -1);
    return TD_OK;
}

td_status_t
td__dist_engine_enter(td_dist_engine_t *e, int64_t ctx_id,
                     td_dist_scope_t *saved)
{
    td_status_t status;
    ctx_t *c;

    if (ctx_id != TD_DIST_NO_CONTEXT) {
        status = ctx_get_or_create(e, ctx_id, &c);
        if (status != TD_OK) {
            return status;
        }
        ctx_unref(c);
    }
    saved->engine = tl_engine;
    saved->ctx_id = tl_ctx;
    tl_engine = e;
    tl_ctx = ctx_id;
    return TD_OK;
}

void
td__dist_engine_leave(const td_dist_scope_t *saved)
{
    tl_engine = saved->engine;
    tl_ctx = saved->ctx_id;
}

int64_t
td__dist_set_current(int64_t ctx_id)
{
    int64_t prev = tl_ctx;

    tl_ctx = ctx_id;
    return prev;
}

void
td__dist_on_release(td_dist_engine_t *e, int src, int64_t ctx_id)
{
    ctx_t *c = ctx_remove(e, ctx_id);

    if (c != NULL) {           /* D10: unknown means already released */
        ctx_release_everywhere(e, c, src);
    }
}

td_status_t
td__dist_context_info(td_dist_engine_t *e, int64_t ctx_id,
                     td_dist_context_info_t *info_p)
{
    td_dist_context_info_t info;
    ctx_t *c = ctx_find(e, ctx_id);

    if (c == NULL) {
        return td_error(TD_ERR_NOT_FOUND, "dist_autograd: context %lld is not "
                        "known on rank %d", (long long)ctx_id, e->rank);
    }
    memset(&info, 0, sizeof(info));
    pthread_mutex_lock(&c->lock);
    info.n_send = c->n_send;
    info.n_recv = c->n_recv;
    info.n_grads = c->n_grads;
    info.n_known = c->n_known;
    for (int i = 0; i < c->n_known && i < 64; i++) {
        info.known[i] = c->known[i];
    }
    info.graph_used = c->graph_used;
    pthread_mutex_unlock(&c->lock);
    ctx_unref(c);
    *info_p = info;
    return TD_OK;
}

td_node_t *
td__dist_context_send_node(td_dist_engine_t *e, int64_t ctx_id, int64_t msg_id)
{
    td_node_t *node = NULL;
    ctx_t *c = ctx_find(e, ctx_id);

    if (c == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n_send; i++) {
        if (c->sends[i].msg_id == msg_id) {
            node = c->sends[i].node;
        }
    }
    pthread_mutex_unlock(&c->lock);
    ctx_unref(c);
    return node;     /* the context (alive until ended) holds it */
}

/* ---- send and recv nodes (D2, D3) --------------------------------------- */

/* Identity: the gradient of each sent tensor flows to its edge. */
static td_status_t
send_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    for (int i = 0; i < td_node_n_inputs(node); i++) {
        gout[i] = gin[i] != NULL ? td_tensor_retain(gin[i]) : NULL;
    }
    return TD_OK;
}

/* What a send node sent, to check the gradients that come back. */
typedef struct {
    int        n;
    td_dtype_t dtype[TD_DIST_GRADS_MAX];
    int        ndim[TD_DIST_GRADS_MAX];
    int64_t   *shape;          /* n * TD_MAX_DIMS */
} send_state_t;

static void
send_state_free(void *p)
{
    send_state_t *st = p;

    if (st != NULL) {
        free(st->shape);
        free(st);
    }
}

static const td_node_ops_t send_ops = {
    .name = "SendRpcBackward",
    .backward = send_backward,
    .destroy = send_state_free,
};

/* Under the context lock: GRADS[N] must match what NODE sent. */
static td_status_t
check_grads(td_dist_engine_t *e, int src, td_node_t *node,
            td_tensor_t *const *grads, int n, char **msg_p)
{
    const send_state_t *st = td_node_state(node);

    for (int i = 0; i < n && st != NULL; i++) {
        const int64_t *want = &st->shape[(size_t)i * TD_MAX_DIMS];
        int bad;

        if (grads[i] == NULL) {
            continue;
        }
        bad = td_tensor_dtype(grads[i]) != st->dtype[i] ||
              td_tensor_ndim(grads[i]) != st->ndim[i];
        for (int d = 0; !bad && d < st->ndim[i]; d++) {
            bad = td_tensor_shape(grads[i])[d] != want[d];
        }
        if (bad) {
            *msg_p = format("Error on rank %d: dist_autograd: rank %d sent "
                            "gradient %d as %s with %d dims (first %lld) for "
                            "a %s tensor with %d dims (first %lld)", e->rank,
                            src, i, td_dtype_name(td_tensor_dtype(grads[i])),
                            td_tensor_ndim(grads[i]),
                            (long long)(td_tensor_ndim(grads[i]) > 0 ?
                                        td_tensor_shape(grads[i])[0] : 0),
                            td_dtype_name(st->dtype[i]), st->ndim[i],
                            (long long)(st->ndim[i] > 0 ? want[0] : 0));
            return TD_ERR_PROTOCOL;
        }
    }
    return TD_OK;
}

static td_status_t pass_post(pass_t *p, int dst, int64_t msg_id,
                             td_tensor_t *const *grads, int n);

/* Ship the gradients to the sender (D3): the pass waits for the reply. */
static td_status_t
recv_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    recv_state_t *s = td_node_state(node);
    pass_t *p = tl_pass;
    int n = td_node_n_inputs(node), any = 0;

    (void)gout;
    if (p == NULL) {
        /* D11: a local backward or grad (a MAML inner loop on a worker
         * differentiating the parameters it received) stops here */
        return TD_OK;
    }
    if (p->engine != s->engine) {
        return td_error(TD_ERR_STATE, "RecvRpcBackward: node of rank %d "
                        "reached by a backward on rank %d",
                        s->engine->rank, p->engine->rank);
    }
    if (p->ctx->id != s->ctx_id) {
        return td_error(TD_ERR_STATE, "RecvRpcBackward: node of context %lld "
                        "reached by the backward of context %lld",
                        (long long)s->ctx_id, (long long)p->ctx->id);
    }
    for (int i = 0; i < n; i++) {
        any |= gin[i] != NULL;
    }
    if (!any) {
        return TD_OK;          /* zeros: nothing to tell the sender */
    }
    return pass_post(p, s->src, s->msg_id, gin, n);
}

static const td_node_ops_t recv_ops = {
    .name = "RecvRpcBackward",
    .backward = recv_backward,
    .destroy = free,
};

td_status_t
td__dist_on_send(td_dist_engine_t *e, int64_t ctx_id, int dst,
                td_tensor_t *const *ts, int n, int64_t *msg_id_p)
{
    td_edge_t *edges = NULL;
    td_node_t *node = NULL;
    send_state_t *st = NULL;
    td_status_t status;
    int64_t msg_id;
    ctx_t *c;
    int any = 0;

    if (n < 0 || n > TD_DIST_GRADS_MAX || (n > 0 && ts == NULL)) {
        return td_error(TD_ERR_INVALID, "dist_autograd: send of %d tensors "
                        "without a tensor array", n);
    }
    for (int i = 0; i < n; i++) {
        any |= ts[i] != NULL && td_tensor_requires_grad(ts[i]);
    }
    if (ctx_id == TD_DIST_NO_CONTEXT || !any) {
        *msg_id_p = 0;
        return TD_OK;
    }
    /* a worker may send first in a context it has not seen yet (an
     * owner answering to_here): it joins here */
    status = ctx_get_or_create(e, ctx_id, &c);
    if (status != TD_OK) {
        return status;
    }
    edges = calloc((size_t)n, sizeof(*edges));
    if (edges == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "dist_autograd: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        if (ts[i] != NULL && td_tensor_requires_grad(ts[i])) {
            edges[i] = td_tensor_gradient_edge(ts[i]);
        }
    }
    st = calloc(1, sizeof(*st));
    if (st == NULL || (st->shape = calloc((size_t)n * TD_MAX_DIMS,
                                          sizeof(int64_t))) == NULL) {
        send_state_free(st);
        status = td_error(TD_ERR_NO_MEMORY, "dist_autograd: out of memory");
        goto out;
    }
    st->n = n;
    for (int i = 0; i < n; i++) {
        if (ts[i] != NULL) {
            st->dtype[i] = td_tensor_dtype(ts[i]);
            st->ndim[i] = td_tensor_ndim(ts[i]);
            memcpy(&st->shape[(size_t)i * TD_MAX_DIMS], td_tensor_shape(ts[i]),
                   (size_t)st->ndim[i] * sizeof(int64_t));
        }
    }
    status = td_node_create(&send_ops, st, n, edges, n, &node);
    if (status != TD_OK) {
        send_state_free(st);
        goto out;
    }
    msg_id = ((int64_t)e->rank << 48) |
             ((atomic_fetch_add(&e->msg_counter, 1) + 1) & COUNTER_MASK);
    pthread_mutex_lock(&c->lock);
    if (grow((void **)&c->sends, &c->cap_send, c->n_send + 1,
             sizeof(send_entry_t)) != 0 || ctx_add_known(c, dst) != 0) {
        pthread_mutex_unlock(&c->lock);
        status = td_error(TD_ERR_NO_MEMORY, "dist_autograd: out of memory");
        goto out;
    }
    c->sends[c->n_send++] = (send_entry_t){msg_id, node, dst};
    node = NULL;
    pthread_mutex_unlock(&c->lock);
    *msg_id_p = msg_id;
out:
    td_node_release(node);
    free(edges);
    ctx_unref(c);
    return status;
}

td_status_t
td__dist_on_recv(td_dist_engine_t *e, int64_t ctx_id, int src, int64_t msg_id,
                td_tensor_t *const *ts, const uint8_t *requires_grad, int n)
{
    recv_state_t *s;
    td_node_t *node = NULL;
    td_status_t status;
    ctx_t *c;

    if (n <= 0 || ts == NULL || requires_grad == NULL || msg_id == 0) {
        return td_error(TD_ERR_INVALID, "dist_autograd: recv from rank %d "
                        "with %d tensors and message id %lld", src, n,
                        (long long)msg_id);
    }
    for (int i = 0; i < n; i++) {
        if (ts[i] == NULL || (requires_grad[i] &&
                              !td_tensor_is_leaf(ts[i]))) {
            return td_error(TD_ERR_INVALID, "dist_autograd: received tensor "
                            "%d from rank %d is missing or has history", i,
                            src);
        }
    }
    status = ctx_get_or_create(e, ctx_id, &c);
    if (status != TD_OK) {
        return status;
    }
    s = malloc(sizeof(*s));
    if (s == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "dist_autograd: out of memory");
        goto out;
    }
    *s = (recv_state_t){e, ctx_id, src, msg_id};
    status = td_node_create(&recv_ops, s, n, NULL, 0, &node);
    if (status != TD_OK) {
        free(s);
        goto out;
    }
    for (int i = 0; i < n && status == TD_OK; i++) {
        if (requires_grad[i]) {
            status = td_tensor_set_grad_fn(ts[i], node, (uint32_t)i);
        }
    }
    if (status != TD_OK) {
        goto out;
    }
    pthread_mutex_lock(&c->lock);
    if (grow((void **)&c->recvs, &c->cap_recv, c->n_recv + 1,
             sizeof(td_node_t *)) != 0 || ctx_add_known(c, src) != 0) {
        pthread_mutex_unlock(&c->lock);
        status = td_error(TD_ERR_NO_MEMORY, "dist_autograd: out of memory");
        goto out;
    }
    c->recvs[c->n_recv++] = td_node_retain(node);
    pthread_mutex_unlock(&c->lock);
out:
    td_node_release(node);
    ctx_unref(c);
    return status;
}

/* ---- passes (D4, D5, D8) ------------------------------------------------ */

static pass_t *
pass_new(td_dist_engine_t *e, ctx_t *c, int retain_graph,
         td_dist_reply_fn reply, void *reply_arg)
{
    pass_t *p = calloc(1, sizeof(*p));

    if (p == NULL) {
        return NULL;
    }
    p->engine = e;
    p->ctx = ctx_ref(c);
    atomic_init(&p->refs, 2);          /* the caller's and the engine list's */
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->retain_graph = retain_graph;
    p->reply = reply;
    p->reply_arg = reply_arg;
    pthread_mutex_lock(&e->lock);
    p->next = e->passes;
    e->passes = p;
    e->n_passes++;
    pthread_mutex_unlock(&e->lock);
    return p;
}

static void
pass_unref(pass_t *p)
{
    prop_t *q;

    if (atomic_fetch_sub(&p->refs, 1) != 1) {
        return;
    }
    while ((q = p->props) != NULL) {
        p->props = q->next;
        free(q);
    }
    ctx_unref(p->ctx);
    free(p->msg);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* Under p->lock: keep the first error (D8). MSG is taken over. */
static void
pass_fail_locked(pass_t *p, td_status_t status, char *msg)
{
    if (p->status == TD_OK) {
        p->status = status;
        p->msg = msg;
    } else {
        free(msg);
    }
}

/* Under p->lock: is the pass complete now? The caller then runs
 * pass_finish() after unlocking. */
static int
pass_complete_locked(pass_t *p)
{
    if (p->finished || !p->local_done || p->n_out > 0) {
        return 0;
    }
    p->finished = 1;
    return 1;
}

/* Outside every lock: reply, wake the waiter, leave the engine's list. */
static void
pass_finish(pass_t *p)
{
    td_dist_engine_t *e = p->engine;
    pass_t **pp;

    /* leave the list first: whoever the reply or the wake-up lets go on
     * must find this worker idle */
    pthread_mutex_lock(&e->lock);
    for (pp = &e->passes; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            e->n_passes--;
            break;
        }
    }
    pthread_mutex_unlock(&e->lock);
    if (p->reply != NULL) {
        p->reply(p->reply_arg, p->status, p->msg);
    }
    pthread_mutex_lock(&p->lock);
    __atomic_store_n(&p->woken, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    td__rpc_notify_done();              /* a waiter may drive progress */
    pass_unref(p);                     /* the engine list's reference */
}

static void
prop_done(void *arg, td_status_t status, const char *msg)
{
    prop_t *q = arg;
    pass_t *p = q->pass;
    int complete = 0;

    pthread_mutex_lock(&p->lock);
    if (!q->done) {
        q->done = 1;
        p->n_out--;
        if (status != TD_OK) {
            /* D8: keep the remote rank's tag; errors other than a dead or
             * silent peer become TD_ERR_REMOTE on this side */
            char *m = has_rank_tag(msg) ? strdup(msg)
                      : format("Error on rank %d: %s", q->dst,
                               msg != NULL ? msg : td_strerror(status));
            pass_fail_locked(p, status == TD_ERR_PEER ||
                                status == TD_ERR_TIMEOUT ? status
                                                         : TD_ERR_REMOTE, m);
        }
        complete = pass_complete_locked(p);
    }
    pthread_mutex_unlock(&p->lock);
    if (complete) {
        pass_finish(p);
    }
    pass_unref(p);                     /* the propagate's reference */
}

static td_status_t
pass_post(pass_t *p, int dst, int64_t msg_id, td_tensor_t *const *grads, int n)
{
    td_dist_engine_t *e = p->engine;
    td_status_t status;
    prop_t *q;

    if (!e->has_wire && dst != e->rank) {
        return td_error(TD_ERR_STATE, "dist_autograd: rank %d has no "
                        "transport to send gradients to rank %d", e->rank,
                        dst);
    }
    q = calloc(1, sizeof(*q));
    if (q == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "dist_autograd: out of memory");
    }
    q->pass = p;
    q->dst = dst;
    atomic_fetch_add(&p->refs, 1);
    /* linked before the send, so a peer failure already sees it */
    pthread_mutex_lock(&p->lock);
    q->next = p->props;
    p->props = q;
    p->n_out++;
    pthread_mutex_unlock(&p->lock);
    if (dst == e->rank) {
        /* a call to self: run the send node now, on this thread (the
         * engine is reentrant, and the reply only counts down n_out) */
        td__dist_on_propagate(e, dst, p->ctx->id, msg_id, grads, n,
                             p->retain_graph, prop_done, q);
        return TD_OK;
    }
    status = e->wire.propagate(e->wire.arg, dst, p->ctx->id, msg_id, grads, n,
                               p->retain_graph, prop_done, q);
    if (status != TD_OK) {
        pthread_mutex_lock(&p->lock);
        q->done = 1;
        p->n_out--;
        pthread_mutex_unlock(&p->lock);
        pass_unref(p);
    }
    return status;
}

/* D6: a leaf's gradient of one local pass, summed into the context. */
static td_status_t
ctx_sink(void *arg, td_tensor_t *leaf, td_tensor_t *grad)
{
    pass_t *p = arg;
    ctx_t *c = p->ctx;
    td_tensor_t *sum = NULL, *det = NULL;
    td_status_t status = TD_OK;
    int i;

    pthread_mutex_lock(&c->lock);
    for (i = 0; i < c->n_grads && c->table[i].leaf != leaf; i++) {
    }
    if (i < c->n_grads) {
        status = td_add(c->table[i].grad, grad, &sum);
        if (status == TD_OK) {
            td_tensor_release(c->table[i].grad);
            c->table[i].grad = sum;
        }
    } else if (grow((void **)&c->table, &c->cap_grads, c->n_grads + 1,
                    sizeof(grad_entry_t)) != 0) {
        status = td_error(TD_ERR_NO_MEMORY, "dist_autograd: out of memory");
    } else {
        /* own a copy: GRAD may be a view the pass still uses */
        status = td_tensor_detach(grad, &det);
        if (status == TD_OK) {
            status = td_tensor_clone(det, &sum);
        }
        if (status == TD_OK) {
            c->table[c->n_grads].leaf = td_tensor_retain(leaf);
            c->table[c->n_grads++].grad = sum;
        }
    }
    pthread_mutex_unlock(&c->lock);
    td_tensor_release(det);
    if (status == TD_OK) {
        /* D12: the leaf's post-accumulate hooks see the context's sum
         * (data parallelism reduces it, as PyTorch's reducer does in a
         * distributed backward); outside the context's lock, since a hook
         * reads and replaces the gradient */
        int64_t saved = tl_accumulating;

        tl_accumulating = c->id;
        status = td_tensor_run_post_accumulate_hooks(leaf);
        tl_accumulating = saved;
    }
    return status;
}

int64_t
td_dist_autograd_accumulating(void)
{
    return tl_accumulating;
}

/* Run the local part of pass P (D4) and mark it done. */
static void
pass_run_local(pass_t *p, td_tensor_t *const *roots, int n_roots,
               td_node_t *send_node, td_tensor_t *const *send_grads)
{
    td_backward_opts_t o;
    td_node_t *extra[1] = {send_node};
    td_tensor_t *const *extra_grads[1] = {send_grads};
    pass_t *saved = tl_pass;
    td_status_t status;
    int complete;

    memset(&o, 0, sizeof(o));
    o.roots = roots;
    o.n_roots = n_roots;
    if (send_node != NULL) {
        o.extra_roots = extra;
        o.extra_root_grads = extra_grads;
        o.n_extra_roots = 1;
    }
    o.retain_graph = 1;                /* D7 */
    o.sink = ctx_sink;
    o.sink_arg = p;
    tl_pass = p;
    status = td_autograd_run(&o);
    tl_pass = saved;
    pthread_mutex_lock(&p->lock);
    p->local_done = 1;
    if (status != TD_OK) {
        const char *m = td_last_error();
        pass_fail_locked(p, status, has_rank_tag(m) ? strdup(m)
                         : format("Error on rank %d: %s", p->engine->rank, m));
    }
    complete = pass_complete_locked(p);
    pthread_mutex_unlock(&p->lock);
    if (complete) {
        pass_finish(p);
    }
}

void
td__dist_peer_failed(td_dist_engine_t *e, int rank)
{
    pass_t **list = NULL, *p;
    size_t n = 0;

    pthread_mutex_lock(&e->lock);
    if (e->n_passes > 0 &&
        (list = malloc(e->n_passes * sizeof(*list))) != NULL) {
        for (p = e->passes; p != NULL; p = p->next) {
            atomic_fetch_add(&p->refs, 1);
            list[n++] = p;
        }
    }
    pthread_mutex_unlock(&e->lock);
    for (size_t i = 0; i < n; i++) {
        int complete;

        p = list[i];
        pthread_mutex_lock(&p->lock);
        for (prop_t *q = p->props; q != NULL; q = q->next) {
            if (!q->done && q->dst == rank) {
                q->done = 1;           /* prop_done, when it comes, is moot */
                p->n_out--;
                pass_fail_locked(p, TD_ERR_PEER,
                                 format("Error on rank %d: worker died during "
                                        "the backward of context %lld", rank,
                                        (long long)p->ctx->id));
            }
        }
        complete = pass_complete_locked(p);
        pthread_mutex_unlock(&p->lock);
        if (complete) {
            pass_finish(p);
        }
        pass_unref(p);
    }
    free(list);
}

/* ---- backward ------------------------------------------------------------ */

static int
pass_woken(void *arg)
{
    return __atomic_load_n(&((pass_t *)arg)->woken, __ATOMIC_ACQUIRE);
}

/* Wait for P to finish; on timeout, fail it naming the silent ranks. */
static td_status_t
pass_wait(pass_t *p, double timeout)
{
    struct timespec deadline;
    td_status_t status;
    int rc = 0;

    td_deadline_after(timeout, &deadline);
    /* Drive the transport while waiting (no hand-off for the replies),
     * then sleep. */
    td__rpc_drive_until(pass_woken, p, timeout);
    td__rpc_blocking(1);
    pthread_mutex_lock(&p->lock);
    while (!p->finished && rc != ETIMEDOUT) {
        rc = pthread_cond_timedwait(&p->cond, &p->lock, &deadline);
    }
    td__rpc_blocking(0);         /* still holding the lock: no sleep here */
    if (!p->finished) {
        char ranks[256] = "";
        size_t len = 0;

        for (prop_t *q = p->props; q != NULL; q = q->next) {
            int seen = 0;

            /* each rank once, however many propagates it owes */
            for (prop_t *o = p->props; o != q; o = o->next) {
                seen |= !o->done && o->dst == q->dst;
            }
            if (!q->done && !seen && len + 16 < sizeof(ranks)) {
                len += (size_t)snprintf(ranks + len, sizeof(ranks) - len,
                                        "%s%d", len ? "," : "", q->dst);
            }
        }
        p->finished = 1;       /* late replies find it finished */
        pthread_mutex_unlock(&p->lock);
        pass_finish(p);
        return td_error(TD_ERR_TIMEOUT, "dist_autograd: backward of context "
                        "%lld on rank %d timed out after %gs waiting for "
                        "rank(s) %s", (long long)p->ctx->id, p->engine->rank,
                        timeout, len ? ranks : "(local work)");
    }
    status = p->status;
    if (status != TD_OK) {
        status = td_error(status, "%s", p->msg != NULL ? p->msg
                          : td_strerror(status));
    }
    pthread_mutex_unlock(&p->lock);
    return status;
}

td_status_t
td_dist_backward(int64_t ctx_id, td_tensor_t *const *roots, int n,
                 int retain_graph)
{
    td_dist_engine_t *e;
    td_status_t status;
    pass_t *p;
    ctx_t *c;

    if (n <= 0 || roots == NULL) {
        return td_error(TD_ERR_INVALID, "dist_backward: %d roots", n);
    }
    for (int i = 0; i < n; i++) {
        if (roots[i] == NULL || td_tensor_numel(roots[i]) != 1) {
            return td_error(TD_ERR_SHAPE, "dist_backward: root %d is not a "
                            "one-element tensor", i);
        }
        if (!td_tensor_requires_grad(roots[i])) {
            /* as td_backward and PyTorch: nothing would flow */
            return td_error(TD_ERR_STATE, "dist_backward: root %d does not "
                            "require grad and has no grad_fn", i);
        }
    }
    status = ctx_lookup(ctx_id, "dist_backward", &e, &c);
    if (status != TD_OK) {
        return status;
    }
    pthread_mutex_lock(&c->lock);
    if (c->graph_used) {                                   /* D7 */
        pthread_mutex_unlock(&c->lock);
        ctx_unref(c);
        return td_error(TD_ERR_STATE, "dist_backward: the graph of context "
                        "%lld was already used by a backward without "
                        "retain_graph", (long long)ctx_id);
    }
    c->graph_used = !retain_graph;
    pthread_mutex_unlock(&c->lock);
    p = pass_new(e, c, retain_graph, NULL, NULL);
    ctx_unref(c);
    if (p == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "dist_autograd: out of memory");
    }
    pass_run_local(p, roots, n, NULL, NULL);
    status = pass_wait(p, e->timeout > 0 ? e->timeout
                                         : td_dist_backward_timeout());
    pass_unref(p);
    return status;
}

td_status_t
td__dist_on_propagate(td_dist_engine_t *e, int src, int64_t ctx_id,
                     int64_t msg_id, td_tensor_t *const *grads, int n,
                     int retain_graph, td_dist_reply_fn reply, void *reply_arg)
{
    td_node_t *node = NULL;
    td_status_t status = TD_OK;
    char *msg = NULL;
    pass_t *p;
    ctx_t *c;
    int i;

    c = ctx_find(e, ctx_id);
    if (c == NULL) {                                       /* D9 */
        status = TD_ERR_NOT_FOUND;
        msg = format("Error on rank %d: dist_autograd: gradients from rank %d "
                     "for unknown or ended context %lld", e->rank, src,
                     (long long)ctx_id);
        goto fail;
    }
    pthread_mutex_lock(&c->lock);
    for (i = 0; i < c->n_send && c->sends[i].msg_id != msg_id; i++) {
    }
    if (i == c->n_send) {
        status = TD_ERR_NOT_FOUND;
        msg = format("Error on rank %d: dist_autograd: context %lld has no "
                     "message %lld (gradients from rank %d)", e->rank,
                     (long long)ctx_id, (long long)msg_id, src);
    } else if (n != td_node_n_inputs(c->sends[i].node)) {
        status = TD_ERR_PROTOCOL;
        msg = format("Error on rank %d: dist_autograd: rank %d sent %d "
                     "gradients for message %lld of %d tensors", e->rank, src,
                     n, (long long)msg_id, td_node_n_inputs(c->sends[i].node));
    } else if ((status = check_grads(e, src, c->sends[i].node, grads, n,
                                     &msg)) == TD_OK) {
        /* no "used" check here: one backward may bring a send node
         * several gradient messages (one per pass reaching its recv) */
        node = td_node_retain(c->sends[i].node);
    }
    pthread_mutex_unlock(&c->lock);
    if (node == NULL) {
        goto fail;
    }
    p = pass_new(e, c, retain_graph, reply, reply_arg);
    if (p == NULL) {
        status = TD_ERR_NO_MEMORY;
        msg = format("Error on rank %d: dist_autograd: out of memory",
                     e->rank);
        goto fail;
    }
    ctx_unref(c);
    pass_run_local(p, NULL, 0, node, grads);
    td_node_release(node);
    pass_unref(p);
    return TD_OK;

fail:
    td_node_release(node);
    ctx_unref(c);
    reply(reply_arg, status, msg != NULL ? msg : td_strerror(status));
    status = td_error(status, "%s", msg != NULL ? msg : td_strerror(status));
    free(msg);
    return status;
}

/* ---- reading the gradients ---------------------------------------------- */

td_status_t
td_dist_get_gradients(int64_t ctx_id, td_tensor_t ***leaves_p,
                      td_tensor_t ***grads_p, int *n_p)
{
    td_tensor_t **leaves, **grads;
    td_dist_engine_t *e;
    td_status_t status;
    ctx_t *c;
    int n;

    status = ctx_lookup(ctx_id, "dist_autograd", &e, &c);
    if (status != TD_OK) {
        return status;
    }
    pthread_mutex_lock(&c->lock);
    n = c->n_grads;
    leaves = calloc((size_t)n + 1, sizeof(*leaves));
    grads = calloc((size_t)n + 1, sizeof(*grads));
    if (leaves == NULL || grads == NULL) {
        pthread_mutex_unlock(&c->lock);
        free(leaves);
        free(grads);
        ctx_unref(c);
        return td_error(TD_ERR_NO_MEMORY, "dist_autograd: out of memory");
    }
    for (int i = 0; i < n; i++) {
        leaves[i] = td_tensor_retain(c->table[i].leaf);
        grads[i] = td_tensor_retain(c->table[i].grad);
    }
    pthread_mutex_unlock(&c->lock);
    ctx_unref(c);
    *leaves_p = leaves;
    *grads_p = grads;
    *n_p = n;
    return TD_OK;
}

void
td_dist_gradients_free(td_tensor_t **leaves, td_tensor_t **grads, int n)
{
    for (int i = 0; i < n; i++) {
        td_tensor_release(leaves != NULL ? leaves[i] : NULL);
        td_tensor_release(grads != NULL ? grads[i] : NULL);
    }
    free(leaves);
    free(grads);
}

td_status_t
td_dist_get_gradient(int64_t ctx_id, td_tensor_t *leaf, td_tensor_t **grad_p)
{
    td_tensor_t *g = NULL;
    td_dist_engine_t *e;
    td_status_t status;
    ctx_t *c;

    status = ctx_lookup(ctx_id, "dist_autograd", &e, &c);
    if (status != TD_OK) {
        return status;
    }
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n_grads; i++) {
        if (c->table[i].leaf == leaf) {
            g = td_tensor_retain(c->table[i].grad);
        }
    }
    pthread_mutex_unlock(&c->lock);
    ctx_unref(c);
    if (g == NULL) {
        return td_error(TD_ERR_NOT_FOUND, "dist_autograd: no gradient reached "
                        "this leaf in context %lld on rank %d",
                        (long long)ctx_id, e->rank);
    }
    *grad_p = g;
    return TD_OK;
}

td_status_t
td_dist_set_gradient(int64_t ctx_id, td_tensor_t *leaf, td_tensor_t *grad)
{
    td_dist_engine_t *e;
    td_status_t status;
    ctx_t *c;
    int i;

    if (leaf == NULL || grad == NULL || !td_tensor_is_leaf(leaf)) {
        return td_error(TD_ERR_INVALID, "dist_autograd: set_gradient needs "
                        "a leaf and a gradient");
    }
    if (td_tensor_dtype(grad) != td_tensor_dtype(leaf) ||
        td_tensor_ndim(grad) != td_tensor_ndim(leaf) ||
        memcmp(td_tensor_shape(grad), td_tensor_shape(leaf),
               (size_t)td_tensor_ndim(leaf) * sizeof(int64_t)) != 0) {
        return td_error(TD_ERR_SHAPE, "dist_autograd: set_gradient: the "
                        "gradient's dtype or shape (%d-d, %lld elements) is "
                        "not its leaf's (%d-d, %lld elements)",
                        td_tensor_ndim(grad), (long long)td_tensor_numel(grad),
                        td_tensor_ndim(leaf),
                        (long long)td_tensor_numel(leaf));
    }
    status = ctx_lookup(ctx_id, "dist_autograd", &e, &c);
    if (status != TD_OK) {
        return status;
    }
    pthread_mutex_lock(&c->lock);
    for (i = 0; i < c->n_grads && c->table[i].leaf != leaf; i++) {
    }
    if (i < c->n_grads) {
        td_tensor_release(c->table[i].grad);
        c->table[i].grad = td_tensor_retain(grad);
    } else if (grow((void **)&c->table, &c->cap_grads, c->n_grads + 1,
                    sizeof(grad_entry_t)) != 0) {
        status = td_error(TD_ERR_NO_MEMORY, "dist_autograd: out of memory");
    } else {
        c->table[c->n_grads].leaf = td_tensor_retain(leaf);
        c->table[c->n_grads++].grad = td_tensor_retain(grad);
    }
    pthread_mutex_unlock(&c->lock);
    ctx_unref(c);
    return status;
}

td_status_t
td_dist_grad(int64_t ctx_id, td_tensor_t *const *outputs, int n_out,
             td_tensor_t *const *inputs, int n_in, int allow_unused,
             td_tensor_t **grads_out)
{
    td_tensor_t **got;
    td_status_t status;

    for (int i = 0; i < n_in; i++) {
        if (inputs[i] == NULL || !td_tensor_is_leaf(inputs[i])) {
            return td_error(TD_ERR_INVALID, "dist_grad: input %d is not a "
                            "leaf (the context keeps leaf gradients)", i);
        }
    }
    got = calloc((size_t)n_in + 1, sizeof(*got));
    if (got == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "dist_autograd: out of memory");
    }
    status = td_dist_backward(ctx_id, outputs, n_out, 1);
    for (int i = 0; status == TD_OK && i < n_in; i++) {
        if (td_dist_get_gradient(ctx_id, inputs[i], &got[i]) != TD_OK &&
            !allow_unused) {
            status = td_error(TD_ERR_STATE, "dist_grad: input %d was not used "
                              "in the graph (pass allow_unused)", i);
        }
    }
    if (status != TD_OK) {
        for (int i = 0; i < n_in; i++) {
            td_tensor_release(got[i]);
        }
        free(got);
        return status;
    }
    td_error_clear();
    memcpy(grads_out, got, (size_t)n_in * sizeof(*got));
    free(got);
    return TD_OK;
}

td_status_t
td_dist_accumulate_grad(int64_t ctx_id, td_tensor_t *const *inputs, int n)
{
    td_status_t status = TD_OK;

    for (int i = 0; i < n && status == TD_OK; i++) {
        td_tensor_t *g = NULL, *old, *sum = NULL;

        if (td_dist_get_gradient(ctx_id, inputs[i], &g) != TD_OK) {
            continue;                  /* no gradient reached this input */
        }
        old = td_tensor_grad(inputs[i]);
        if (old == NULL) {
            status = td_tensor_clone(g, &sum);
        } else {
            status = td_add(old, g, &sum);
        }
        if (status == TD_OK) {
            status = td_tensor_set_grad(inputs[i], sum);
        }
        td_tensor_release(sum);
        td_tensor_release(g);
    }
    td_error_clear();
    return status;
}
