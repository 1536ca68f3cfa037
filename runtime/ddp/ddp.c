/* runtime/ddp/ddp.c: DistributedDataParallel's reducer: gradient buckets
 * as flat buffers the .grads are views of, readiness from the autograd
 * engine's post-accumulate hooks, bucket all_reduce started as soon as a
 * bucket is full, in one order on every rank. In a distributed backward
 * the hooks name the context (td_dist_autograd_accumulating): the context's
 * gradients are copied into a second flat buffer per bucket, reduced, and
 * written back into the context. Invariants DDP1-DDP9 are in
 * todist/ddp.h. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "kernels/kernels.h"
#include "runtime/ddp/ddp_internal.h"
#include "runtime/tensor/tensor_internal.h"
#include <todist/autograd.h>
#include <todist/device.h>
#include <todist/ddp.h>
#include <todist/dist_autograd.h>

#define DDP_PARAMS_MAX   (1 << 20)
#define MIB              ((size_t)1 << 20)
/* iteration mode not fixed yet: the first gradient decides (DDP9) */
#define MODE_UNSET       ((int64_t)-2)

typedef struct {
    td_dtype_t   dtype;
    td_tensor_t *flat;        /* 1-d, the bucket's gradients back to back */
    td_tensor_t *ctx_flat;    /* the same for context gradients (DDP9),
                                 made on the first distributed backward */
    int         *params;      /* parameter indices, in layout order */
    int64_t     *offsets;     /* element offset of each in FLAT */
    int          n_params;
    int          pending;     /* parameters not yet ready this iteration */
    int          launched;
    td_work_t   *work;
} bucket_t;

typedef struct {
    td_ddp_t *ddp;
    int       index;
} hook_ctx_t;

struct td_ddp {
    td_ddp_opts_t   opts;
    td_group_t     *group;
    int             n;
    td_tensor_t   **params;
    char          **names;
    hook_ctx_t     *ctx;
    int            *hooked;      /* hook registered on params[i] */
    int            *bucket_of;
    int            *slot_of;     /* index within its bucket */
    int            *ready;       /* this iteration */
    bucket_t       *buckets;
    int             n_buckets;
    int             next_launch; /* DDP1: buckets launch in order */
    int            *arrival;     /* order of readiness, first iteration */
    int             n_arrived;
    int             rebuilt;
    int             require_sync;
    int             in_backward;
    int64_t         mode;        /* DDP9: MODE_UNSET, TD_DIST_NO_CONTEXT
                                    (local: .grad) or the context id */
    td_status_t     error;       /* first error of a hook this iteration */
    char            errmsg[512];
    pthread_mutex_t lock;
};

td_ddp_opts_t
td_ddp_defaults(void)
{
    td_ddp_opts_t o = {0};
    const char *cap = getenv("TODIST_DDP_BUCKET_CAP_MB");

    o.first_bucket_bytes = 1 * MIB;
    o.bucket_cap_bytes = 25 * MIB;
    if (cap != NULL && *cap != '\0') {
        char *end;
        double mb = strtod(cap, &end);
        if (*end == '\0' && mb > 0 && mb <= 65536) {
            o.bucket_cap_bytes = (size_t)(mb * MIB);
        } else {
            td_log_warn("ddp: TODIST_DDP_BUCKET_CAP_MB=%s is not a size in "
                        "MiB (0 < x <= 65536); using 25", cap);
        }
    }
    o.broadcast_parameters = 1;
    return o;
}

static const char *
param_name(const td_ddp_t *ddp, int i, char *buf, size_t len)
{
    if (ddp->names != NULL && ddp->names[i] != NULL) {
        return ddp->names[i];
    }
    snprintf(buf, len, "parameter %d", i);
    return buf;
}

/* ---- bucket layout ------------------------------------------------------ */

static void
buckets_free(bucket_t *b, int n)
{
    for (int i = 0; i < n; i++) {
        td_work_release(b[i].work);
        td_tensor_release(b[i].flat);
        td_tensor_release(b[i].ctx_flat);
        free(b[i].params);
        free(b[i].offsets);
    }
    free(b);
}

/* Split ORDER[n] (parameter indices, in the order they should launch) into
 * buckets: a new bucket when the dtype changes or the size cap is reached;
 * the first bucket is capped at first_bucket_bytes. */
static td_status_t
buckets_plan(td_ddp_t *ddp, const int *order, bucket_t **out_p, int *n_out)
{
    bucket_t *b = calloc((size_t)ddp->n, sizeof(*b));
    int nb = 0;
    size_t bytes = 0;

    if (b == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "ddp: out of memory for buckets");
    }
    for (int k = 0; k < ddp->n; k++) {
        td_tensor_t *p = ddp->params[order[k]];
        size_t pb = td_tensor_nbytes(p);
        size_t cap = nb <= 1 ? ddp->opts.first_bucket_bytes
                             : ddp->opts.bucket_cap_bytes;
        bucket_t *cur = nb > 0 ? &b[nb - 1] : NULL;

        if (cur == NULL || cur->dtype != td_tensor_dtype(p) ||
            (cur->n_params > 0 && bytes + pb > cap)) {
            cur = &b[nb++];
            cur->dtype = td_tensor_dtype(p);
            cur->params = calloc((size_t)ddp->n, sizeof(int));
            cur->offsets = calloc((size_t)ddp->n, sizeof(int64_t));
            if (cur->params == NULL || cur->offsets == NULL) {
                buckets_free(b, nb);
                return td_error(TD_ERR_NO_MEMORY, "ddp: out of memory");
            }
            bytes = 0;
        }
        cur->offsets[cur->n_params] =
            cur->n_params == 0 ? 0
            : cur->offsets[cur->n_params - 1] +
              td_tensor_numel(ddp->params[cur->params[cur->n_params - 1]]);
        cur->params[cur->n_params++] = order[k];
        bytes += pb;
    }
    *out_p = b;
    *n_out = nb;
    return TD_OK;
}

/* A view of slot S of bucket B's FLAT (its .grad or its context buffer)
 * shaped like its parameter. */
static td_status_t
slot_view_of(bucket_t *b, td_tensor_t *flat, int s, td_tensor_t *p,
             td_tensor_t **out)
{
    td_tensor_t *flat1;
    td_status_t status;

    status = td_tensor_narrow(flat, 0, b->offsets[s], td_tensor_numel(p),
                              &flat1);
    if (status != TD_OK) {
        return status;
    }
    status = td_tensor_view(flat1, td_tensor_shape(p), td_tensor_ndim(p), out);
    td_tensor_release(flat1);
    return status;
}

static td_status_t
slot_view(bucket_t *b, int s, td_tensor_t *p, td_tensor_t **out)
{
    return slot_view_of(b, b->flat, s, p, out);
}

/* DDP2: allocate the flat buffers and make every .grad a view of its slot,
 * carrying over the values of existing gradients. */
static td_status_t
buckets_materialise(td_ddp_t *ddp, bucket_t *b, int nb)
{
    td_status_t status;

    for (int i = 0; i < nb; i++) {
        int64_t numel = 0;

        for (int s = 0; s < b[i].n_params; s++) {
            numel += td_tensor_numel(ddp->params[b[i].params[s]]);
        }
        /* on the parameters' device: the gradients are views of it, and
         * its all_reduce routes by device (coll/nccl.h) */
        status = td_tensor_empty(&numel, 1, b[i].dtype,
                                 td_tensor_device(ddp->params[b[i].params[0]]),
                                 &b[i].flat);
        if (status == TD_OK) {
            status = td_tensor_zero_(b[i].flat);
        }
        if (status != TD_OK) {
            return status;
        }
        for (int s = 0; s < b[i].n_params; s++) {
            int pi = b[i].params[s];
            td_tensor_t *p = ddp->params[pi], *view, *old;

            status = slot_view(&b[i], s, p, &view);
            if (status != TD_OK) {
                return status;
            }
            old = td_tensor_grad(p);
            if (old != NULL) {
                status = td_tensor_copy_(view, old);
            }
            if (status == TD_OK) {
                status = td_tensor_set_grad(p, view);
            }
            td_tensor_release(view);
            if (status != TD_OK) {
                return status;
            }
            ddp->bucket_of[pi] = i;
            ddp->slot_of[pi] = s;
        }
    }
    return TD_OK;
}

static td_status_t
buckets_build(td_ddp_t *ddp, const int *order)
{
    bucket_t *b = NULL;
    int nb = 0;
    td_status_t status;

    status = buckets_plan(ddp, order, &b, &nb);
    if (status != TD_OK) {
        return status;
    }
    status = buckets_materialise(ddp, b, nb);
    if (status != TD_OK) {
        buckets_free(b, nb);
        return status;
    }
    buckets_free(ddp->buckets, ddp->n_buckets);
    ddp->buckets = b;
    ddp->n_buckets = nb;
    return TD_OK;
}

/* ---- one iteration ------------------------------------------------------ */

static void
iteration_reset(td_ddp_t *ddp)
{
    for (int i = 0; i < ddp->n_buckets; i++) {
        bucket_t *b = &ddp->buckets[i];
        td_work_release(b->work);
        b->work = NULL;
        b->launched = 0;
        b->pending = b->n_params;
    }
    memset(ddp->ready, 0, (size_t)ddp->n * sizeof(int));
    ddp->next_launch = 0;
    ddp->mode = MODE_UNSET;
    ddp->error = TD_OK;
    ddp->errmsg[0] = '\0';
}

static int
dist_mode(const td_ddp_t *ddp)
{
    return ddp->mode != MODE_UNSET && ddp->mode != TD_DIST_NO_CONTEXT;
}

/* DDP9: copy parameter PI's gradient in the iteration's context into its
 * slot of the bucket's context buffer (zeros when none reached it, as a
 * local unused parameter's .grad takes part as it is). Lock held. */
static td_status_t
gather_context_grad(td_ddp_t *ddp, int pi)
{
    bucket_t *b = &ddp->buckets[ddp->bucket_of[pi]];
    td_tensor_t *p = ddp->params[pi], *view = NULL, *g = NULL;
    td_status_t status = TD_OK;

    if (b->ctx_flat == NULL) {
        status = td_tensor_empty(td_tensor_shape(b->flat), 1, b->dtype,
                                 TD_CPU, &b->ctx_flat);
    }
    if (status == TD_OK) {
        status = slot_view_of(b, b->ctx_flat, ddp->slot_of[pi], p, &view);
    }
    if (status == TD_OK) {
        if (td_dist_get_gradient(ddp->mode, p, &g) == TD_OK) {
            status = td_tensor_copy_(view, g);
        } else {
            td_error_clear();
            status = td_tensor_zero_(view);
        }
    }
    td_tensor_release(g);
    td_tensor_release(view);
    return status;
}

/* DDP9: the averages go back into the context as new tensors (the buffer
 * is reused by the next iteration). Lock held, every bucket waited for. */
static td_status_t
scatter_context_grads(td_ddp_t *ddp)
{
    td_status_t status = TD_OK;

    for (int i = 0; i < ddp->next_launch && status == TD_OK; i++) {
        bucket_t *b = &ddp->buckets[i];

        for (int s = 0; s < b->n_params && status == TD_OK; s++) {
            td_tensor_t *p = ddp->params[b->params[s]], *view = NULL,
                        *avg = NULL;

            status = slot_view_of(b, b->ctx_flat, s, p, &view);
            if (status == TD_OK) {
                status = td_tensor_clone(view, &avg);
            }
            if (status == TD_OK) {
                status = td_dist_set_gradient(ddp->mode, p, avg);
            }
            td_tensor_release(avg);
            td_tensor_release(view);
        }
    }
    return status;
}

static td_status_t
default_hook(void *arg, td_group_t *group, td_tensor_t *bucket,
             td_work_t **work_p)
{
    (void)arg;
    return td_all_reduce_async(group, bucket, TD_REDUCE_AVG, work_p);
}

td_status_t
td_ddp_hook_divide_then_sum(void *arg, td_group_t *group, td_tensor_t *bucket,
                            td_work_t **work_p)
{
    const int64_t n = td_tensor_numel(bucket);
    td_operand_t in = {td_tensor_data(bucket), (const int64_t[]){1}};

    (void)arg;
    /* in place: the kernel reads and writes the same contiguous buffer */
    td__kernels_get(td_tensor_device(bucket))->unary(
        TD_UN_MUL_SCALAR, td_tensor_dtype(bucket), td_tensor_data(bucket), in,
        1.0 / td_group_size(group), &n, 1);
    td_tensor_bump_version(bucket);
    return td_all_reduce_async(group, bucket, TD_REDUCE_SUM, work_p);
}

/* DDP2: a .grad that is no longer the bucket's view (set_grad by the user,
 * or cleared) is copied back in and re-viewed before the bucket leaves. */
static td_status_t
regather_grad(td_ddp_t *ddp, int pi)
{
    bucket_t *b = &ddp->buckets[ddp->bucket_of[pi]];
    int s = ddp->slot_of[pi];
    td_tensor_t *p = ddp->params[pi], *g = td_tensor_grad(p), *view;
    td_status_t status;
    size_t esz = td_dtype_size(b->dtype);
    char *slot = (char *)td_tensor_data(b->flat) + b->offsets[s] * esz;

    if (g != NULL && td_tensor_data(g) == slot) {
        return TD_OK;
    }
    status = slot_view(b, s, p, &view);
    if (status != TD_OK) {
        return status;
    }
    status = g != NULL ? td_tensor_copy_(view, g) : td_tensor_zero_(view);
    if (status == TD_OK) {
        status = td_tensor_set_grad(p, view);
    }
    td_tensor_release(view);
    return status;
}

/* Launch every consecutive full bucket from next_launch on (DDP1). Called
 * with the lock held. */
static td_status_t
launch_ready(td_ddp_t *ddp)
{
    td_ddp_comm_hook_fn hook = ddp->opts.comm_hook ? ddp->opts.comm_hook
                                                   : default_hook;
    td_status_t status;

    while (ddp->next_launch < ddp->n_buckets &&
           ddp->buckets[ddp->next_launch].pending == 0) {
        bucket_t *b = &ddp->buckets[ddp->next_launch];
        /* DDP9: a distributed backward reduces the context's copies */
        td_tensor_t *flat = dist_mode(ddp) ? b->ctx_flat : b->flat;

        for (int s = 0; s < b->n_params && !dist_mode(ddp); s++) {
            status = regather_grad(ddp, b->params[s]);
            if (status != TD_OK) {
                return status;
            }
        }
        if (ddp->opts.comm_hook == NULL &&
            ddp->next_launch == ddp->n_buckets - 1) {
            /* DDP8: the last bucket has no backward left to overlap with:
             * reduce it here, where the waiting caller drives the
             * transport itself: two thread hand-offs fewer per step
             * (2-rank Fashion-MNIST epoch, interleaved A/B x4: 0.97-1.19 s
             * against 1.15-1.32 s). It still runs after the earlier
             * buckets (the group's queue keeps order). */
            b->work = NULL;
            status = td_all_reduce(ddp->group, flat, TD_REDUCE_AVG);
        } else {
            status = hook(ddp->opts.comm_hook_arg, ddp->group, flat,
                          &b->work);
        }
        if (status != TD_OK) {
            return status;
        }
        atomic_store(&flat->storage->pending, 1);   /* DDP7 */
        b->launched = 1;
        ddp->next_launch++;
    }
    return TD_OK;
}

static void
record_error(td_ddp_t *ddp, td_status_t status)
{
    if (ddp->error == TD_OK) {
        ddp->error = status;
        snprintf(ddp->errmsg, sizeof(ddp->errmsg), "%s", td_last_error());
    }
}

/* Mark parameter PI ready (lock held). */
static void
mark_ready(td_ddp_t *ddp, int pi)
{
    bucket_t *b;
    td_status_t status;

    if (ddp->ready[pi]) {
        return;        /* accumulated twice in one backward: already counted */
    }
    ddp->ready[pi] = 1;
    if (!ddp->rebuilt && ddp->n_arrived < ddp->n) {
        ddp->arrival[ddp->n_arrived++] = pi;
    }
    b = &ddp->buckets[ddp->bucket_of[pi]];
    b->pending--;
    status = dist_mode(ddp) ? gather_context_grad(ddp, pi) : TD_OK;
    if (status == TD_OK) {
        status = launch_ready(ddp);
    }
    if (status != TD_OK) {
        record_error(ddp, status);
    }
}

static const char *
mode_str(int64_t mode, char *buf, size_t len)
{
    if (mode == TD_DIST_NO_CONTEXT) {
        return "a local backward (.grad)";
    }
    snprintf(buf, len, "distributed autograd context %lld", (long long)mode);
    return buf;
}

static td_status_t
post_accumulate(void *arg, td_tensor_t *leaf)
{
    hook_ctx_t *c = arg;
    td_ddp_t *ddp = c->ddp;
    int64_t ctx = td_dist_autograd_accumulating();
    char name[32];

    (void)leaf;
    pthread_mutex_lock(&ddp->lock);
    if (ddp->mode == MODE_UNSET) {
        ddp->mode = ctx;                     /* DDP9: the first one decides */
    }
    if (!ddp->require_sync) {
        /* DDP5: nothing to reduce (a context keeps its own sums) */
    } else if (ctx != ddp->mode) {
        char got[48], want[48];

        record_error(ddp, td_error(TD_ERR_STATE, "ddp: rank %d: the gradient "
                     "of %s came from %s, but this iteration's backward is "
                     "%s; run one backward per iteration, local "
                     "(td_ddp_backward) or distributed (td_ddp_dist_backward)",
                     td_group_rank(ddp->group),
                     param_name(ddp, c->index, name, sizeof(name)),
                     mode_str(ctx, got, sizeof(got)),
                     mode_str(ddp->mode, want, sizeof(want))));
    } else {
        mark_ready(ddp, c->index);
    }
    pthread_mutex_unlock(&ddp->lock);
    return TD_OK;   /* errors surface in td_ddp_wait (DDP3) */
}

/* Parameters reachable from OUTPUTS through grad_fn edges get MARK[i] = 1. */
static td_status_t
find_used(td_ddp_t *ddp, td_tensor_t *const *outputs, int n, int *used)
{
    size_t cap = 64, top = 0, seen_n = 0, seen_cap = 64;
    td_node_t **stack = malloc(cap * sizeof(*stack));
    td_node_t **seen = malloc(seen_cap * sizeof(*seen));
    td_status_t status = TD_OK;

    if (stack == NULL || seen == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "ddp: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        td_edge_t e = td_tensor_gradient_edge(outputs[i]);
        if (e.node != NULL) {
            stack[top++] = e.node;
            if (top == cap) {
                break;
            }
        }
    }
    while (top > 0) {
        td_node_t *node = stack[--top];
        td_tensor_t *leaf = td_node_leaf(node);
        int dup = 0;

        for (size_t k = 0; k < seen_n && !dup; k++) {
            dup = seen[k] == node;
        }
        if (dup) {
            continue;
        }
        if (seen_n == seen_cap) {
            td_node_t **s2 = realloc(seen, 2 * seen_cap * sizeof(*seen));
            if (s2 == NULL) {
                status = td_error(TD_ERR_NO_MEMORY, "ddp: out of memory");
                goto out;
            }
            seen = s2;
            seen_cap *= 2;
        }
        seen[seen_n++] = node;
        if (leaf != NULL) {
            for (int i = 0; i < ddp->n; i++) {
                if (ddp->params[i] == leaf) {
                    used[i] = 1;
                }
            }
        }
        for (int k = 0; k < td_node_n_next(node); k++) {
            td_edge_t e = td_node_next(node, k);
            if (e.node == NULL) {
                continue;
            }
            if (top == cap) {
                td_node_t **s2 = realloc(stack, 2 * cap * sizeof(*stack));
                if (s2 == NULL) {
                    status = td_error(TD_ERR_NO_MEMORY, "ddp: out of memory");
                    goto out;
                }
                stack = s2;
                cap *= 2;
            }
            stack[top++] = e.node;
        }
    }
out:
    free(stack);
    free(seen);
    return status;
}

/* Start an iteration whose gradients come from MODE (DDP9). */
static td_status_t
prepare(td_ddp_t *ddp, int64_t mode, td_tensor_t *const *outputs, int n)
{
    td_status_t status = TD_OK;
    int *used;

    if (ddp == NULL) {
        return td_error(TD_ERR_INVALID, "ddp: the DDP object is NULL");
    }
    pthread_mutex_lock(&ddp->lock);
    if (ddp->in_backward && ddp->require_sync && ddp->next_launch > 0) {
        pthread_mutex_unlock(&ddp->lock);
        return td_error(TD_ERR_STATE, "ddp: a new backward started before "
                        "td_ddp_wait finished the previous iteration's "
                        "reduction; call td_ddp_wait after every backward");
    }
    iteration_reset(ddp);
    ddp->mode = mode;
    ddp->in_backward = 1;
    if (ddp->require_sync && ddp->opts.find_unused_parameters) {
        if (n < 1 || outputs == NULL) {
            pthread_mutex_unlock(&ddp->lock);
            return td_error(TD_ERR_INVALID, "ddp: find_unused_parameters "
                            "needs the outputs backward starts from");
        }
        used = calloc((size_t)ddp->n, sizeof(*used));
        if (used == NULL) {
            pthread_mutex_unlock(&ddp->lock);
            return td_error(TD_ERR_NO_MEMORY, "ddp: out of memory");
        }
        status = find_used(ddp, outputs, n, used);
        for (int i = 0; status == TD_OK && i < ddp->n; i++) {
            if (!used[i]) {
                mark_ready(ddp, i);   /* its gradient takes part as it is */
            }
        }
        free(used);
        if (status == TD_OK && ddp->error != TD_OK) {
            status = td_error(ddp->error, "%s", ddp->errmsg);
        }
    }
    pthread_mutex_unlock(&ddp->lock);
    return status;
}

td_status_t
td_ddp_prepare_backward(td_ddp_t *ddp, td_tensor_t *const *outputs, int n)
{
    return prepare(ddp, TD_DIST_NO_CONTEXT, outputs, n);
}

td_status_t
td_ddp_prepare_dist_backward(td_ddp_t *ddp, int64_t ctx_id,
                             td_tensor_t *const *outputs, int n)
{
    if (ctx_id == TD_DIST_NO_CONTEXT || ctx_id == MODE_UNSET) {
        return td_error(TD_ERR_INVALID, "ddp: a distributed backward needs "
                        "a distributed autograd context, got %lld",
                        (long long)ctx_id);
    }
    return prepare(ddp, ctx_id, outputs, n);
}

td_status_t
td_ddp_dist_backward(td_ddp_t *ddp, int64_t ctx_id, td_tensor_t *loss)
{
    td_status_t status, st;

    status = td_ddp_prepare_dist_backward(ddp, ctx_id, &loss, 1);
    if (status != TD_OK) {
        return status;
    }
    status = td_dist_backward(ctx_id, &loss, 1, 0);
    /* always: the peers take part in what was launched (DDP3) */
    st = td_ddp_wait(ddp);
    return status != TD_OK ? status : st;
}

td_status_t
td_ddp_backward(td_ddp_t *ddp, td_tensor_t *loss)
{
    td_status_t status = td_ddp_prepare_backward(ddp, &loss, 1);

    if (status != TD_OK) {
        return status;
    }
    return td_backward(&loss, NULL, 1, 0, 0);
}

void
td__ddp_bucket_order(td_ddp_t *ddp, int *order, int *rebuilt)
{
    int k = 0;

    pthread_mutex_lock(&ddp->lock);
    for (int b = 0; b < ddp->n_buckets; b++) {
        for (int j = 0; j < ddp->buckets[b].n_params; j++) {
            order[k++] = ddp->buckets[b].params[j];
        }
    }
    *rebuilt = ddp->rebuilt;
    pthread_mutex_unlock(&ddp->lock);
}

td_status_t
td__ddp_set_bucket_order(td_ddp_t *ddp, const int *order, int rebuilt)
{
    int *seen = calloc((size_t)ddp->n + 1, sizeof(int));
    td_status_t status = TD_OK;

    if (seen == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "ddp: out of memory");
    }
    for (int i = 0; i < ddp->n; i++) {
        if (order[i] < 0 || order[i] >= ddp->n || seen[order[i]]++) {
            free(seen);
            return td_error(TD_ERR_INVALID, "ddp: bucket order entry %d names "
                            "parameter %d of %d (or twice)", i, order[i],
                            ddp->n);
        }
    }
    free(seen);
    pthread_mutex_lock(&ddp->lock);
    if (ddp->in_backward) {
        status = td_error(TD_ERR_INVALID, "ddp: bucket order set during a "
                          "backward");
    } else {
        status = buckets_build(ddp, order);
        if (status == TD_OK) {
            ddp->rebuilt = rebuilt != 0;
        }
    }
    pthread_mutex_unlock(&ddp->lock);
    return status;
}

/* DDP4: rebuild the buckets in rank 0's arrival order. */
static td_status_t
rebuild_from_arrival(td_ddp_t *ddp)
{
    int64_t n = ddp->n;
    td_tensor_t *ord;
    int *order;
    td_status_t status;

    ddp->rebuilt = 1;
    status = td_tensor_empty(&n, 1, TD_INT64, TD_CPU, &ord);
    if (status != TD_OK) {
        return status;
    }
    int64_t *o = td_tensor_data(ord);
    /* arrival order, completed by any never-ready ones in reverse order */
    int k = 0;
    int *have = calloc((size_t)ddp->n, sizeof(int));
    order = calloc((size_t)ddp->n, sizeof(int));
    if (have == NULL || order == NULL) {
        free(have);
        free(order);
        td_tensor_release(ord);
        return td_error(TD_ERR_NO_MEMORY, "ddp: out of memory");
    }
    for (int i = 0; i < ddp->n_arrived; i++) {
        o[k++] = ddp->arrival[i];
        have[ddp->arrival[i]] = 1;
    }
    for (int i = ddp->n - 1; i >= 0; i--) {
        if (!have[i]) {
            o[k++] = i;
        }
    }
    status = td_broadcast(ddp->group, ord, 0);
    for (int i = 0; status == TD_OK && i < ddp->n; i++) {
        if (o[i] < 0 || o[i] >= ddp->n) {
            status = td_error(TD_ERR_PROTOCOL, "ddp: rank 0's bucket order "
                              "names parameter %lld of %d", (long long)o[i],
                              ddp->n);
        }
        order[i] = (int)o[i];
    }
    if (status == TD_OK) {
        status = buckets_build(ddp, order);
    }
    free(have);
    free(order);
    td_tensor_release(ord);
    return status;
}

td_status_t
td_ddp_wait(td_ddp_t *ddp)
{
    return td__ddp_wait_scaled(ddp, 1.0);
}

/* FLAT *= SCALE on its device (Join's divisor, before the averages are
 * read or go back into a context). */
static void
scale_flat(td_tensor_t *flat, double scale)
{
    int64_t n = td_tensor_numel(flat);
    td_operand_t in = {td_tensor_data(flat), (const int64_t[]){1}};

    td__kernels_get(td_tensor_device(flat))->unary(
        TD_UN_MUL_SCALAR, td_tensor_dtype(flat), td_tensor_data(flat), in,
        scale, &n, 1);
}

td_status_t
td__ddp_wait_scaled(td_ddp_t *ddp, double scale)
{
    td_status_t status = TD_OK;
    char name[32];
    double wait_s;

    if (ddp == NULL) {
        return td_error(TD_ERR_INVALID, "ddp: the DDP object is NULL");
    }
    /* 0: until done, bounded by the collectives' own timeout */
    wait_s = ddp->opts.timeout_s > 0 ? ddp->opts.timeout_s : -1;
    pthread_mutex_lock(&ddp->lock);
    if (!ddp->require_sync) {
        ddp->in_backward = 0;
        pthread_mutex_unlock(&ddp->lock);
        return TD_OK;                         /* DDP5 */
    }
    if (ddp->error != TD_OK) {
        status = td_error(ddp->error, "%s", ddp->errmsg);
    } else if (ddp->next_launch < ddp->n_buckets) {
        /* DDP3: PyTorch's message, with the parameters named */
        char list[384] = "";
        size_t len = 0;
        int missing = 0;

        for (int i = 0; i < ddp->n; i++) {
            if (!ddp->ready[i]) {
                if (len < sizeof(list) - 64) {
                    len += snprintf(list + len, sizeof(list) - len, "%s%s",
                                    missing ? ", " : "",
                                    param_name(ddp, i, name, sizeof(name)));
                }
                missing++;
            }
        }
        status = td_error(TD_ERR_STATE, "ddp: rank %d: %d parameter(s) "
                          "received no gradient in this backward: %s. Your "
                          "model has parameters that were not used in "
                          "producing the loss: create the DDP object with "
                          "find_unused_parameters = 1 (and call "
                          "td_ddp_backward or td_ddp_prepare_backward with "
                          "the loss), or make sure every parameter "
                          "contributes to it", td_group_rank(ddp->group),
                          missing, list);
    }
    /* Always wait for what was launched: the peers take part in it. */
    for (int i = 0; i < ddp->next_launch; i++) {
        bucket_t *b = &ddp->buckets[i];
        td_status_t st = b->work != NULL ? td_work_wait(b->work, wait_s)
                                         : TD_OK;      /* DDP8: done */
        if (st != TD_OK && status == TD_OK) {
            status = st;
        }
        td_work_release(b->work);
        b->work = NULL;
    }
    for (int i = 0; i < ddp->next_launch; i++) {
        bucket_t *b = &ddp->buckets[i];
        td_tensor_t *flat = dist_mode(ddp) ? b->ctx_flat : b->flat;

        if (status == TD_OK && scale != 1.0) {
            scale_flat(flat, scale);
        }
        td_tensor_bump_version(flat);
        atomic_store(&flat->storage->pending, 0);
    }
    if (status == TD_OK && dist_mode(ddp)) {
        status = scatter_context_grads(ddp);         /* DDP9 */
    }
    ddp->in_backward = 0;
    if (status == TD_OK && !ddp->rebuilt) {
        status = rebuild_from_arrival(ddp);
    }
    iteration_reset(ddp);
    pthread_mutex_unlock(&ddp->lock);
    return status;
}

void
td_ddp_set_require_sync(td_ddp_t *ddp, int on)
{
    pthread_mutex_lock(&ddp->lock);
    ddp->require_sync = on != 0;
    pthread_mutex_unlock(&ddp->lock);
}

/* ---- creation ------------------------------------------------------------ */

static td_status_t
check_params(td_tensor_t *const *params, int n)
{
    if (params == NULL || n < 1 || n > DDP_PARAMS_MAX) {
        return td_error(TD_ERR_INVALID, "ddp: %d parameters; give between 1 "
                        "and %d", params == NULL ? 0 : n, DDP_PARAMS_MAX);
    }
    for (int i = 0; i < n; i++) {
        td_tensor_t *p = params[i];

        if (p == NULL) {
            return td_error(TD_ERR_INVALID, "ddp: parameter %d is NULL", i);
        }
        if (!td_tensor_is_leaf(p) || !td_tensor_requires_grad(p)) {
            return td_error(TD_ERR_INVALID, "ddp: parameter %d is not a leaf "
                            "that requires grad", i);
        }
        if (td_tensor_device(p).type != td_tensor_device(params[0]).type ||
            td_tensor_device(p).index != td_tensor_device(params[0]).index) {
            char a[24], b[24];

            return td_error(TD_ERR_UNSUPPORTED, "ddp: parameter %d is on %s, "
                            "parameter 0 on %s (one device per replica)", i,
                            td_device_str(td_tensor_device(p), a, sizeof(a)),
                            td_device_str(td_tensor_device(params[0]), b,
                                          sizeof(b)));
        }
        if (!td_tensor_is_contiguous(p)) {
            return td_error(TD_ERR_INVALID, "ddp: parameter %d is not "
                            "contiguous", i);
        }
        for (int j = 0; j < i; j++) {
            if (params[j] == p) {
                return td_error(TD_ERR_INVALID, "ddp: parameter %d is "
                                "parameter %d again", i, j);
            }
        }
    }
    return TD_OK;
}

td_status_t
td_ddp_create(td_tensor_t *const *params, int n, const td_ddp_opts_t *opts,
              td_ddp_t **ddp_p)
{
    td_ddp_t *ddp;
    int *order = NULL;
    td_status_t status;

    status = check_params(params, n);
    if (status != TD_OK) {
        return status;
    }
    ddp = calloc(1, sizeof(*ddp));
    if (ddp == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "ddp: out of memory");
    }
    ddp->opts = opts != NULL ? *opts : td_ddp_defaults();
    if (ddp->opts.first_bucket_bytes == 0) {
        ddp->opts.first_bucket_bytes = 1 * MIB;
    }
    if (ddp->opts.bucket_cap_bytes == 0) {
        ddp->opts.bucket_cap_bytes = 25 * MIB;
    }
    ddp->group = ddp->opts.group != NULL ? ddp->opts.group : td_group_world();
    if (ddp->group == NULL) {
        free(ddp);
        return td_error(TD_ERR_STATE, "ddp: no process group (call td_init "
                        "first, or give opts.group)");
    }
    if (td_group_rank(ddp->group) < 0) {
        free(ddp);
        return td_error(TD_ERR_STATE, "ddp: this rank is not a member of "
                        "the group");
    }
    pthread_mutex_init(&ddp->lock, NULL);
    ddp->n = n;
    ddp->require_sync = 1;
    ddp->params = calloc((size_t)n, sizeof(*ddp->params));
    ddp->ctx = calloc((size_t)n, sizeof(*ddp->ctx));
    ddp->hooked = calloc((size_t)n, sizeof(int));
    ddp->bucket_of = calloc((size_t)n, sizeof(int));
    ddp->slot_of = calloc((size_t)n, sizeof(int));
    ddp->ready = calloc((size_t)n, sizeof(int));
    ddp->arrival = calloc((size_t)n, sizeof(int));
    order = calloc((size_t)n, sizeof(int));
    if (ddp->params == NULL || ddp->ctx == NULL || ddp->hooked == NULL ||
        ddp->bucket_of == NULL || ddp->slot_of == NULL ||
        ddp->ready == NULL || ddp->arrival == NULL || order == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "ddp: out of memory");
        goto err;
    }
    if (ddp->opts.names != NULL) {
        ddp->names = calloc((size_t)n, sizeof(char *));
        if (ddp->names == NULL) {
            status = td_error(TD_ERR_NO_MEMORY, "ddp: out of memory");
            goto err;
        }
        for (int i = 0; i < n; i++) {
            ddp->names[i] = ddp->opts.names[i] ? strdup(ddp->opts.names[i])
                                               : NULL;
        }
        ddp->opts.names = NULL;   /* not kept: the caller's may go away */
    }
    for (int i = 0; i < n; i++) {
        ddp->params[i] = td_tensor_retain(params[i]);
        order[i] = n - 1 - i;     /* reverse registration order */
    }
    /* Replicas start equal: rank 0's values everywhere. */
    if (ddp->opts.broadcast_parameters && td_group_size(ddp->group) > 1) {
        for (int i = 0; i < n; i++) {
            status = td_broadcast(ddp->group, ddp->params[i], 0);
            if (status != TD_OK) {
                goto err;
            }
            td_tensor_bump_version(ddp->params[i]);
        }
    }
    status = buckets_build(ddp, order);
    if (status != TD_OK) {
        goto err;
    }
    for (int i = 0; i < n; i++) {
        ddp->ctx[i] = (hook_ctx_t){ddp, i};
        status = td_tensor_register_post_accumulate_hook(ddp->params[i],
                                                         post_accumulate,
                                                         &ddp->ctx[i]);
        if (status != TD_OK) {
            goto err;
        }
        ddp->hooked[i] = 1;
    }
    iteration_reset(ddp);
    free(order);
    *ddp_p = ddp;
    return TD_OK;

err:
    free(order);
    td_ddp_destroy(ddp);
    return status;
}

td_status_t
td_ddp_create_mlp(td_mlp_t *mlp, const td_ddp_opts_t *opts, td_ddp_t **ddp_p)
{
    int n = mlp != NULL ? td_mlp_num_params(mlp) : 0;
    td_ddp_opts_t o = opts != NULL ? *opts : td_ddp_defaults();
    char **names;
    td_status_t status;

    if (mlp == NULL) {
        return td_error(TD_ERR_INVALID, "ddp: the MLP is NULL");
    }
    names = calloc((size_t)n, sizeof(*names));
    if (names == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "ddp: out of memory");
    }
    for (int i = 0; i < n; i++) {
        names[i] = malloc(32);
        if (names[i] != NULL) {
            snprintf(names[i], 32, "layers.%d.%s", i / 2,
                     i % 2 ? "bias" : "weight");
        }
    }
    if (o.names == NULL) {
        o.names = (const char *const *)names;
    }
    status = td_ddp_create(td_mlp_params(mlp), n, &o, ddp_p);
    for (int i = 0; i < n; i++) {
        free(names[i]);
    }
    free(names);
    return status;
}

td_status_t
td_ddp_broadcast_buffers(td_ddp_t *ddp, td_tensor_t *const *buffers, int n)
{
    td_status_t status;

    if (ddp == NULL || (n > 0 && buffers == NULL)) {
        return td_error(TD_ERR_INVALID, "ddp: NULL DDP object or buffers");
    }
    for (int i = 0; i < n; i++) {
        status = td_broadcast(ddp->group, buffers[i], 0);
        if (status != TD_OK) {
            return status;
        }
        td_tensor_bump_version(buffers[i]);
    }
    return TD_OK;
}

int
td_ddp_num_buckets(const td_ddp_t *ddp)
{
    return ddp->n_buckets;
}

const int *
td_ddp_bucket_params(const td_ddp_t *ddp, int b, int *n_p)
{
    if (b < 0 || b >= ddp->n_buckets) {
        *n_p = 0;
        return NULL;
    }
    *n_p = ddp->buckets[b].n_params;
    return ddp->buckets[b].params;
}

td_tensor_t *
td_ddp_bucket_tensor(const td_ddp_t *ddp, int b)
{
    return b >= 0 && b < ddp->n_buckets ? ddp->buckets[b].flat : NULL;
}

int
td_ddp_num_params(const td_ddp_t *ddp)
{
    return ddp->n;
}

td_tensor_t *
td_ddp_param(const td_ddp_t *ddp, int i)
{
    return i >= 0 && i < ddp->n ? ddp->params[i] : NULL;
}

int
td_ddp_has_comm_hook(const td_ddp_t *ddp)
{
    return ddp->opts.comm_hook != NULL;
}

td_group_t *
td_ddp_group(const td_ddp_t *ddp)
{
    return ddp->group;
}

td_status_t
td_ddp_set_group(td_ddp_t *ddp, td_group_t *group)
{
    if (ddp == NULL || group == NULL) {
        return td_error(TD_ERR_INVALID, "ddp: td_ddp_set_group: %s is NULL",
                        ddp == NULL ? "ddp" : "group");
    }
    if (td_group_rank(group) < 0) {
        return td_error(TD_ERR_INVALID, "ddp: td_ddp_set_group: this rank is "
                        "not a member of the group");
    }
    pthread_mutex_lock(&ddp->lock);
    if (ddp->in_backward) {
        pthread_mutex_unlock(&ddp->lock);
        return td_error(TD_ERR_STATE, "ddp: td_ddp_set_group during an "
                        "iteration: call td_ddp_wait first");
    }
    iteration_reset(ddp);
    ddp->group = group;
    ddp->opts.group = group;
    pthread_mutex_unlock(&ddp->lock);
    return TD_OK;
}

void
td_ddp_destroy(td_ddp_t *ddp)
{
    if (ddp == NULL) {
        return;
    }
    for (int i = 0; i < ddp->n && ddp->params != NULL; i++) {
        if (ddp->hooked != NULL && ddp->hooked[i]) {
            td_tensor_remove_post_accumulate_hook(ddp->params[i],
                                                  post_accumulate,
                                                  &ddp->ctx[i]);
        }
        /* leave a plain gradient behind, not a view of a freed bucket
         * (the view would keep the bucket alive anyway; a copy frees it) */
        td_tensor_t *g = td_tensor_grad(ddp->params[i]), *c;
        if (g != NULL && td_tensor_clone(g, &c) == TD_OK) {
            td_tensor_set_grad(ddp->params[i], c);
            td_tensor_release(c);
        }
        td_tensor_release(ddp->params[i]);
    }
    if (ddp->buckets != NULL) {
        for (int i = 0; i < ddp->n_buckets; i++) {
            if (ddp->buckets[i].work != NULL) {
                td_work_wait(ddp->buckets[i].work, -1);
            }
        }
        buckets_free(ddp->buckets, ddp->n_buckets);
    }
    for (int i = 0; ddp->names != NULL && i < ddp->n; i++) {
        free(ddp->names[i]);
    }
    free(ddp->names);
    free(ddp->params);
    free(ddp->ctx);
    free(ddp->hooked);
    free(ddp->bucket_of);
    free(ddp->slot_of);
    free(ddp->ready);
    free(ddp->arrival);
    pthread_mutex_destroy(&ddp->lock);
    free(ddp);
}
