/* runtime/ddp/zero.c: ZeRO-1 (todist/zero.h). The flat parameter vector is
 * cut into balanced shards (Z1); collectives need equal blocks, so the
 * communication buffer holds N blocks of S = ceil(T / N) elements, block r
 * being shard r followed by at most one element of padding. A precomputed
 * list of segments (parameter, offset in it, offset in the buffer, count)
 * maps parameters to blocks: a parameter spanning shards has one segment
 * per shard. The shard's optimizer is an ordinary td_optim_t over one
 * shard-length leaf whose .grad is a view of the reduce-scatter output.
 * The parameters' gradients are their .grad, or (td_zero_dist_step*)
 * their gradients in a distributed autograd context. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <todist/dist_autograd.h>
#include <todist/zero.h>
#include <todist/ops.h>
#include "base/log.h"
#include "runtime/ddp/ddp_internal.h"

typedef struct {
    int     param;     /* index into params */
    int64_t in_param;  /* first element inside the parameter */
    int64_t in_buf;    /* first element inside the padded buffer */
    int64_t count;
    int     owner;     /* group rank owning these elements */
} seg_t;

struct td_zero {
    td_group_t   *group;
    int           rank, size;
    int           n;
    td_tensor_t **params;
    td_dtype_t    dtype;
    size_t        esize;
    int64_t       total, off, len, block;   /* T, shard start/len, S */
    seg_t        *segs;
    int           n_segs;
    td_tensor_t  *buf;          /* [N * S]: packed grads, gathered params */
    td_tensor_t  *rs_out;       /* [S]: this shard's averaged gradient */
    td_tensor_t  *ag_in;        /* [S]: this shard's parameters */
    td_tensor_t  *shard;        /* leaf view of ag_in[0:len], .grad rs_out */
    td_optim_t   *opt;          /* NULL when len == 0 (T < N) */
    int           slots;        /* state buffers of the optimizer */
};

/* Z1 */
static int64_t
shard_start(int64_t total, int size, int r)
{
    int64_t base = total / size, rem = total % size;

    return r * base + (r < rem ? r : rem);
}

static td_status_t
make_segments(td_zero_t *z)
{
    int64_t flat = 0;
    int cap = z->n + z->size, owner = 0;

    z->segs = calloc((size_t)cap, sizeof(*z->segs));
    if (z->segs == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "zero: out of memory");
    }
    for (int i = 0; i < z->n; i++) {
        int64_t numel = td_tensor_numel(z->params[i]), done = 0;

        while (done < numel) {
            int64_t end;

            while (flat >= shard_start(z->total, z->size, owner + 1)) {
                owner++;
            }
            end = shard_start(z->total, z->size, owner + 1);
            int64_t count = numel - done < end - flat ? numel - done
                                                      : end - flat;
            if (z->n_segs == cap) {
                return td_error(TD_ERR_STATE, "zero: more than %d segments "
                                "(%d params, group of %d)", cap, z->n,
                                z->size);
            }
            z->segs[z->n_segs++] = (seg_t){
                i, done, owner * z->block +
                         (flat - shard_start(z->total, z->size, owner)),
                count, owner};
            done += count;
            flat += count;
        }
    }
    return TD_OK;
}

static td_status_t
check_params(td_tensor_t *const *params, int n)
{
    for (int i = 0; i < n; i++) {
        td_tensor_t *p = params[i];

        if (p == NULL || !td_tensor_is_leaf(p) ||
            !td_tensor_requires_grad(p) || !td_tensor_is_contiguous(p) ||
            td_tensor_device(p).type != TD_DEVICE_CPU ||
            td_tensor_dtype(p) != td_tensor_dtype(params[0]) ||
            (td_tensor_dtype(p) != TD_FLOAT32 &&
             td_tensor_dtype(p) != TD_FLOAT64)) {
            return td_error(TD_ERR_INVALID, "zero: parameter %d must be a "
                            "contiguous CPU leaf requiring grad, float32 or "
                            "float64 like parameter 0", i);
        }
        for (int j = 0; j < i; j++) {
            if (params[j] == p) {
                return td_error(TD_ERR_INVALID, "zero: parameters %d and %d "
                                "are the same tensor", j, i);
            }
        }
    }
    return TD_OK;
}

td_status_t
td_zero_create(td_tensor_t *const *params, int n, const td_zero_opts_t *opts,
               td_zero_t **zero_p)
{
    td_tensor_t *view = NULL, *gview = NULL;
    td_zero_t *z;
    td_status_t st;
    int64_t shape[1];

    if (params == NULL || n < 1 || opts == NULL || zero_p == NULL) {
        return td_error(TD_ERR_INVALID, "zero: create needs parameters "
                        "(n=%d), options and an output", n);
    }
    if ((st = check_params(params, n)) != TD_OK) {
        return st;
    }
    z = calloc(1, sizeof(*z));
    if (z == NULL || (z->params = calloc((size_t)n, sizeof(*z->params))) ==
        NULL) {
        free(z);
        return td_error(TD_ERR_NO_MEMORY, "zero: out of memory");
    }
    z->group = opts->group != NULL ? opts->group : td_group_world();
    z->rank = td_group_rank(z->group);
    z->size = td_group_size(z->group);
    if (z->group == NULL || z->rank < 0) {
        free(z->params);
        free(z);
        return td_error(TD_ERR_STATE, "zero: this rank is not in the group "
                        "(or td_init was not called)");
    }
    z->n = n;
    z->dtype = td_tensor_dtype(params[0]);
    z->esize = td_dtype_size(z->dtype);
    for (int i = 0; i < n; i++) {
        z->params[i] = td_tensor_retain(params[i]);
        z->total += td_tensor_numel(params[i]);
    }
    z->off = shard_start(z->total, z->size, z->rank);
    z->len = shard_start(z->total, z->size, z->rank + 1) - z->off;
    z->block = (z->total + z->size - 1) / z->size;
    if (z->block == 0) {
        z->block = 1;               /* all parameters empty */
    }
    if ((st = make_segments(z)) != TD_OK) {
        goto fail;
    }
    shape[0] = z->block * z->size;
    if ((st = td_tensor_zeros(shape, 1, z->dtype, &z->buf)) != TD_OK) {
        goto fail;
    }
    shape[0] = z->block;
    if ((st = td_tensor_zeros(shape, 1, z->dtype, &z->rs_out)) != TD_OK ||
        (st = td_tensor_zeros(shape, 1, z->dtype, &z->ag_in)) != TD_OK) {
        goto fail;
    }
    td__zero_sync_shard(z);
    if (z->len > 0) {
        if ((st = td_tensor_narrow(z->ag_in, 0, 0, z->len, &view)) != TD_OK ||
            (st = td_tensor_detach(view, &z->shard)) != TD_OK ||
            (st = td_tensor_set_requires_grad(z->shard, 1)) != TD_OK ||
            (st = td_tensor_narrow(z->rs_out, 0, 0, z->len, &gview)) != TD_OK ||
            (st = td_tensor_set_grad(z->shard, gview)) != TD_OK) {
            goto fail;
        }
        switch (opts->optim) {
        case TD_ZERO_SGD:
            st = td_optim_sgd(&z->shard, 1, &opts->sgd, &z->opt);
            z->slots = opts->sgd.momentum != 0 ? 1 : 0;
            break;
        case TD_ZERO_ADAM:
            st = td_optim_adam(&z->shard, 1, &opts->adam, &z->opt);
            z->slots = opts->adam.amsgrad ? 3 : 2;
            break;
        case TD_ZERO_ADAMW:
            st = td_optim_adamw(&z->shard, 1, &opts->adam, &z->opt);
            z->slots = opts->adam.amsgrad ? 3 : 2;
            break;
        default:
            st = td_error(TD_ERR_INVALID, "zero: unknown optimizer %d",
                          (int)opts->optim);
        }
        if (st != TD_OK) {
            goto fail;
        }
    }
    td_tensor_release(view);
    td_tensor_release(gview);
    *zero_p = z;
    return TD_OK;

fail:
    td_tensor_release(view);
    td_tensor_release(gview);
    td_zero_free(z);
    return st;
}

/* Z4: the shard's parameters are the flat vector's elements. */
void
td__zero_sync_shard(td_zero_t *z)
{
    for (int s = 0; s < z->n_segs; s++) {
        const seg_t *g = &z->segs[s];

        if (g->owner == z->rank) {
            memcpy((char *)td_tensor_data(z->ag_in) +
                   (size_t)(g->in_buf - z->rank * z->block) * z->esize,
                   (char *)td_tensor_data(z->params[g->param]) +
                   (size_t)g->in_param * z->esize, (size_t)g->count * z->esize);
        }
    }
}

td_group_t *
td__zero_group(const td_zero_t *z)
{
    return z->group;
}

td_optim_t *
td_zero_optim(const td_zero_t *z)
{
    return z->opt;
}

/* The gradient of parameter I: its .grad (CTX TD_DIST_NO_CONTEXT,
 * borrowed into *HELD NULL) or its gradient in distributed autograd
 * context CTX (a new reference in *HELD). */
static td_status_t
grad_of(td_zero_t *z, int i, int64_t ctx, td_tensor_t **grad_p,
        td_tensor_t **held)
{
    td_tensor_t *grad;

    *held = NULL;
    if (ctx == TD_DIST_NO_CONTEXT) {
        grad = td_tensor_grad(z->params[i]);
    } else if (td_dist_get_gradient(ctx, z->params[i], held) == TD_OK) {
        grad = *held;
    } else {
        td_error_clear();
        grad = NULL;
    }
    if (grad == NULL || !td_tensor_is_contiguous(grad) ||
        td_tensor_dtype(grad) != z->dtype ||
        td_tensor_numel(grad) != td_tensor_numel(z->params[i])) {
        td_tensor_release(*held);
        *held = NULL;
        if (ctx != TD_DIST_NO_CONTEXT) {
            return td_error(TD_ERR_INVALID, "zero: parameter %d has %s in "
                            "distributed autograd context %lld on rank %d",
                            i, grad == NULL ? "no gradient" : "a gradient "
                            "that is not a contiguous tensor of its shape "
                            "and dtype", (long long)ctx, z->rank);
        }
        return td_error(TD_ERR_INVALID, "zero: parameter %d has %s on "
                        "rank %d", i, grad == NULL ? "no .grad" :
                        "a .grad that is not a contiguous tensor of its "
                        "shape and dtype", z->rank);
    }
    *grad_p = grad;
    return TD_OK;
}

/* Copy the parameters' gradient segments (.grad, or context CTX's) into
 * the padded buffer (ALL) or only this rank's shard straight into
 * rs_out. */
static td_status_t
pack_grads(td_zero_t *z, int all, int64_t ctx)
{
    char *buf = td_tensor_data(all ? z->buf : z->rs_out);
    int64_t base = all ? 0 : z->rank * z->block;

    for (int s = 0; s < z->n_segs; s++) {
        const seg_t *g = &z->segs[s];
        td_tensor_t *grad = NULL, *held;
        td_status_t st;

        if (!all && g->owner != z->rank) {
            continue;
        }
        st = grad_of(z, g->param, ctx, &grad, &held);
        if (st != TD_OK) {
            return st;
        }
        memcpy(buf + (size_t)(g->in_buf - base) * z->esize,
               (char *)td_tensor_data(grad) + (size_t)g->in_param * z->esize,
               (size_t)g->count * z->esize);
        td_tensor_release(held);
    }
    return TD_OK;
}

/* Steps 2-3: step the shard, gather every shard into every parameter. */
static td_status_t
step_and_gather(td_zero_t *z)
{
    td_status_t st;
    const char *buf;

    if (z->opt != NULL && (st = td_optim_step(z->opt)) != TD_OK) {
        return st;
    }
    if ((st = td_all_gather(z->group, z->buf, z->ag_in)) != TD_OK) {
        return st;
    }
    buf = td_tensor_data(z->buf);
    for (int s = 0; s < z->n_segs; s++) {
        const seg_t *g = &z->segs[s];

        memcpy((char *)td_tensor_data(z->params[g->param]) +
               (size_t)g->in_param * z->esize,
               buf + (size_t)g->in_buf * z->esize,
               (size_t)g->count * z->esize);
    }
    for (int i = 0; i < z->n; i++) {
        td_tensor_bump_version(z->params[i]);
    }
    return TD_OK;
}

/* Steps 1-3 (AVERAGED 0) or 2-3 from the gradients of CTX. */
static td_status_t
zero_step(td_zero_t *z, int averaged, int64_t ctx)
{
    td_status_t st;

    if (z == NULL) {
        return td_error(TD_ERR_INVALID, "zero: step of NULL");
    }
    if (td_group_size(z->group) != z->size ||
        td_group_rank(z->group) != z->rank) {                  /* Z5 */
        return td_error(TD_ERR_STATE, "zero: its group has %d members (this "
                        "rank %d), the shards were cut for %d (rank %d): the "
                        "group shrank or grew (todist/elastic.h); make the "
                        "ZeRO optimizer again over the group and load the "
                        "last checkpoint", td_group_size(z->group), td_group_rank(z->group),
                        z->size, z->rank);
    }
    if (averaged) {
        st = pack_grads(z, 0, ctx);
    } else if ((st = pack_grads(z, 1, ctx)) == TD_OK) {
        st = td_reduce_scatter(z->group, z->rs_out, z->buf, TD_REDUCE_AVG);
    }
    return st != TD_OK ? st : step_and_gather(z);
}

td_status_t
td_zero_step(td_zero_t *z)
{
    return zero_step(z, 0, TD_DIST_NO_CONTEXT);
}

td_status_t
td_zero_step_averaged(td_zero_t *z)
{
    return zero_step(z, 1, TD_DIST_NO_CONTEXT);
}

/* The context forms: CTX_ID must name one (TD_DIST_NO_CONTEXT is .grad's). */
static td_status_t
zero_dist_step(td_zero_t *z, int averaged, int64_t ctx_id)
{
    if (ctx_id == TD_DIST_NO_CONTEXT) {
        return td_error(TD_ERR_INVALID, "zero: td_zero_dist_step%s needs a "
                        "distributed autograd context, got %lld",
                        averaged ? "_averaged" : "", (long long)ctx_id);
    }
    return zero_step(z, averaged, ctx_id);
}

td_status_t
td_zero_dist_step(td_zero_t *z, int64_t ctx_id)
{
    return zero_dist_step(z, 0, ctx_id);
}

td_status_t
td_zero_dist_step_averaged(td_zero_t *z, int64_t ctx_id)
{
    return zero_dist_step(z, 1, ctx_id);
}

td_status_t
td_zero_zero_grad(td_zero_t *z)
{
    for (int i = 0; z != NULL && i < z->n; i++) {
        td_tensor_t *g = td_tensor_grad(z->params[i]);

        if (g != NULL) {
            td_status_t st = td_tensor_zero_(g);

            if (st != TD_OK) {
                return st;
            }
        }
    }
    return TD_OK;
}

void
td_zero_shard(const td_zero_t *z, int64_t *offset_p, int64_t *len_p,
              int64_t *total_p)
{
    if (offset_p != NULL) {
        *offset_p = z->off;
    }
    if (len_p != NULL) {
        *len_p = z->len;
    }
    if (total_p != NULL) {
        *total_p = z->total;
    }
}

size_t
td_zero_state_bytes(const td_zero_t *z)
{
    return (size_t)z->len * (size_t)z->slots * sizeof(double);
}

void
td_zero_free(td_zero_t *z)
{
    if (z == NULL) {
        return;
    }
    td_optim_free(z->opt);
    td_tensor_release(z->shard);
    td_tensor_release(z->ag_in);
    td_tensor_release(z->rs_out);
    td_tensor_release(z->buf);
    for (int i = 0; i < z->n; i++) {
        td_tensor_release(z->params[i]);
    }
    free(z->params);
    free(z->segs);
    free(z);
}
