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

#include <stdio.h>
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

enum { ZERO_MAX_SLOTS = 4, ZERO_META = 11 };
/* the replica's neighbour sends its averaged gradient under this tag on
 * the group (td_zero_step with replicate, zero.h R2) */
#define ZERO_REP_TAG (TD_TAG_MAX - 0x5a)
/* the re-shard moves the flat state in pieces of this many elements */
#define ZERO_CHUNK ((int64_t)1 << 20)

/* What depends on the group the shards are cut for: remade by a
 * re-shard (td_zero_set_group) and swapped in whole. */
typedef struct {
    td_group_t   *group;
    int           rank, size;
    int          *wr;           /* [size]: the members' world ranks */
    int64_t       off, len, block;   /* shard start/len, S */
    seg_t        *segs;
    int           n_segs;
    td_tensor_t  *buf;          /* [N * S]: packed grads, gathered params */
    td_tensor_t  *rs_out;       /* [S]: this shard's averaged gradient */
    td_tensor_t  *ag_in;        /* [S]: this shard's parameters */
    td_tensor_t  *shard;        /* leaf view of ag_in[0:len], .grad rs_out */
    td_optim_t   *opt;          /* NULL when len == 0 (T < N) */
    /* replicate (R1-R4): the ring neighbour (rank + 1) % size's shard */
    int64_t       roff, rlen;
    td_tensor_t  *rep;          /* leaf [rlen]: its parameters before a step */
    td_tensor_t  *rgrad;        /* [rlen]: its averaged gradient */
    td_optim_t   *ropt;         /* NULL when rlen == 0 or size 1 */
    td_tensor_t  *snap[ZERO_MAX_SLOTS]; /* own state before the last step */
} cut_t;

struct td_zero {
    int           n;
    td_tensor_t **params;
    td_dtype_t    dtype;
    size_t        esize;
    int64_t       total;        /* T */
    int           slots;        /* state buffers of the optimizer */
    td_zero_opts_t opts;
    cut_t         c;
    int           replicate;
    int64_t       t;            /* steps applied to the own state */
    int           pending;      /* R3: own state at t, the all-gather failed */
    int64_t       rt;           /* steps applied to the replica */
    int           rpend;        /* R3: rep and rgrad hold step rt + 1's inputs */
};

/* Z1 */
static int64_t
shard_start(int64_t total, int size, int r)
{
    int64_t base = total / size, rem = total % size;

    return r * base + (r < rem ? r : rem);
}

static td_status_t
make_segments(td_zero_t *z, cut_t *c)
{
    int64_t flat = 0;
    int cap = z->n + c->size, owner = 0;

    c->segs = calloc((size_t)cap, sizeof(*c->segs));
    if (c->segs == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "zero: out of memory");
    }
    for (int i = 0; i < z->n; i++) {
        int64_t numel = td_tensor_numel(z->params[i]), done = 0;

        while (done < numel) {
            int64_t end;

            while (flat >= shard_start(z->total, c->size, owner + 1)) {
                owner++;
            }
            end = shard_start(z->total, c->size, owner + 1);
            int64_t count = numel - done < end - flat ? numel - done
                                                      : end - flat;
            if (c->n_segs == cap) {
                return td_error(TD_ERR_STATE, "zero: more than %d segments "
                                "(%d params, group of %d)", cap, z->n,
                                c->size);
            }
            c->segs[c->n_segs++] = (seg_t){
                i, done, owner * c->block +
                         (flat - shard_start(z->total, c->size, owner)),
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

/* The optimizer of the options over the one leaf LEAF. */
static td_status_t
make_optim(const td_zero_t *z, td_tensor_t *leaf, td_optim_t **opt_p)
{
    switch (z->opts.optim) {
    case TD_ZERO_SGD:
        return td_optim_sgd(&leaf, 1, &z->opts.sgd, opt_p);
    case TD_ZERO_ADAM:
        return td_optim_adam(&leaf, 1, &z->opts.adam, opt_p);
    case TD_ZERO_ADAMW:
        return td_optim_adamw(&leaf, 1, &z->opts.adam, opt_p);
    default:
        return td_error(TD_ERR_INVALID, "zero: unknown optimizer %d",
                        (int)z->opts.optim);
    }
}

static void
cut_free(cut_t *c)
{
    td_optim_free(c->ropt);
    td_tensor_release(c->rep);
    td_tensor_release(c->rgrad);
    for (int b = 0; b < ZERO_MAX_SLOTS; b++) {
        td_tensor_release(c->snap[b]);
    }
    td_optim_free(c->opt);
    td_tensor_release(c->shard);
    td_tensor_release(c->ag_in);
    td_tensor_release(c->rs_out);
    td_tensor_release(c->buf);
    free(c->segs);
    free(c->wr);
    memset(c, 0, sizeof(*c));
}

/* Cut the flat vector for GROUP into *C: segments, buffers, the shard's
 * optimizer (fresh state), and with replicate the neighbour's replica and
 * the snapshot buffers. */
static td_status_t
cut_make(td_zero_t *z, td_group_t *group, cut_t *c)
{
    td_tensor_t *view = NULL, *gview = NULL;
    td_status_t st;
    int64_t shape[1];

    memset(c, 0, sizeof(*c));
    c->group = group;
    c->rank = td_group_rank(group);
    c->size = td_group_size(group);
    if (c->rank < 0 || c->size < 1) {
        return td_error(TD_ERR_STATE, "zero: this rank is not in the group "
                        "(or td_init was not called)");
    }
    if ((c->wr = calloc((size_t)c->size, sizeof(*c->wr))) == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "zero: out of memory");
    }
    for (int r = 0; r < c->size; r++) {
        c->wr[r] = td_group_world_rank(group, r);
    }
    c->off = shard_start(z->total, c->size, c->rank);
    c->len = shard_start(z->total, c->size, c->rank + 1) - c->off;
    c->block = (z->total + c->size - 1) / c->size;
    if (c->block == 0) {
        c->block = 1;               /* all parameters empty */
    }
    if ((st = make_segments(z, c)) != TD_OK) {
        goto fail;
    }
    shape[0] = c->block * c->size;
    if ((st = td_tensor_zeros(shape, 1, z->dtype, &c->buf)) != TD_OK) {
        goto fail;
    }
    shape[0] = c->block;
    if ((st = td_tensor_zeros(shape, 1, z->dtype, &c->rs_out)) != TD_OK ||
        (st = td_tensor_zeros(shape, 1, z->dtype, &c->ag_in)) != TD_OK) {
        goto fail;
    }
    if (c->len > 0) {
        if ((st = td_tensor_narrow(c->ag_in, 0, 0, c->len, &view)) != TD_OK ||
            (st = td_tensor_detach(view, &c->shard)) != TD_OK ||
            (st = td_tensor_set_requires_grad(c->shard, 1)) != TD_OK ||
            (st = td_tensor_narrow(c->rs_out, 0, 0, c->len, &gview)) !=
                TD_OK ||
            (st = td_tensor_set_grad(c->shard, gview)) != TD_OK ||
            (st = make_optim(z, c->shard, &c->opt)) != TD_OK) {
            goto fail;
        }
    }
    for (int b = 0; z->replicate && c->len > 0 && b < z->slots; b++) {
        shape[0] = c->len;
        if ((st = td_tensor_zeros(shape, 1, TD_FLOAT64, &c->snap[b])) !=
            TD_OK) {
            goto fail;
        }
    }
    if (z->replicate && c->size > 1) {
        int nb = (c->rank + 1) % c->size;

        c->roff = shard_start(z->total, c->size, nb);
        c->rlen = shard_start(z->total, c->size, nb + 1) - c->roff;
        if (c->rlen > 0) {
            shape[0] = c->rlen;
            if ((st = td_tensor_zeros(shape, 1, z->dtype, &c->rep)) != TD_OK ||
                (st = td_tensor_zeros(shape, 1, z->dtype, &c->rgrad)) !=
                    TD_OK ||
                (st = td_tensor_set_requires_grad(c->rep, 1)) != TD_OK ||
                (st = td_tensor_set_grad(c->rep, c->rgrad)) != TD_OK ||
                (st = make_optim(z, c->rep, &c->ropt)) != TD_OK) {
                goto fail;
            }
        }
    }
    td_tensor_release(view);
    td_tensor_release(gview);
    return TD_OK;

fail:
    td_tensor_release(view);
    td_tensor_release(gview);
    cut_free(c);
    return st;
}

td_status_t
td_zero_create(td_tensor_t *const *params, int n, const td_zero_opts_t *opts,
               td_zero_t **zero_p)
{
    td_zero_t *z;
    td_status_t st;

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
    z->opts = *opts;
    z->replicate = opts->replicate != 0;
    switch (opts->optim) {
    case TD_ZERO_SGD:
        z->slots = opts->sgd.momentum != 0 ? 1 : 0;
        break;
    case TD_ZERO_ADAM:
    case TD_ZERO_ADAMW:
        z->slots = opts->adam.amsgrad ? 3 : 2;
        break;
    default:
        free(z->params);
        free(z);
        return td_error(TD_ERR_INVALID, "zero: unknown optimizer %d",
                        (int)opts->optim);
    }
    z->n = n;
    z->dtype = td_tensor_dtype(params[0]);
    z->esize = td_dtype_size(z->dtype);
    for (int i = 0; i < n; i++) {
        z->params[i] = td_tensor_retain(params[i]);
        z->total += td_tensor_numel(params[i]);
    }
    if (td_group_world() == NULL && opts->group == NULL) {
        st = td_error(TD_ERR_STATE, "zero: this rank is not in the group "
                      "(or td_init was not called)");
        goto fail;
    }
    st = cut_make(z, opts->group != NULL ? opts->group : td_group_world(),
                  &z->c);
    if (st != TD_OK) {
        goto fail;
    }
    td__zero_sync_shard(z);
    *zero_p = z;
    return TD_OK;

fail:
    td_zero_free(z);
    return st;
}

/* Z4: the shard's parameters are the flat vector's elements. */
void
td__zero_sync_shard(td_zero_t *z)
{
    const cut_t *c = &z->c;

    for (int s = 0; s < c->n_segs; s++) {
        const seg_t *g = &c->segs[s];

        if (g->owner == c->rank) {
            memcpy((char *)td_tensor_data(c->ag_in) +
                   (size_t)(g->in_buf - c->rank * c->block) * z->esize,
                   (char *)td_tensor_data(z->params[g->param]) +
                   (size_t)g->in_param * z->esize, (size_t)g->count * z->esize);
        }
    }
}

td_group_t *
td__zero_group(const td_zero_t *z)
{
    return z->c.group;
}

td_optim_t *
td_zero_optim(const td_zero_t *z)
{
    return z->c.opt;
}

void
td__zero_replica(const td_zero_t *z, int64_t *offset_p, int64_t *len_p,
                 td_optim_t **opt_p)
{
    *offset_p = z->c.roff;
    *len_p = z->c.ropt != NULL ? z->c.rlen : 0;
    *opt_p = z->c.ropt;
}

void
td__zero_loaded(td_zero_t *z, int64_t step)
{
    z->t = z->rt = step;
    z->pending = z->rpend = 0;
    td__zero_sync_shard(z);
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
                            "and dtype", (long long)ctx, z->c.rank);
        }
        return td_error(TD_ERR_INVALID, "zero: parameter %d has %s on "
                        "rank %d", i, grad == NULL ? "no .grad" :
                        "a .grad that is not a contiguous tensor of its "
                        "shape and dtype", z->c.rank);
    }
    *grad_p = grad;
    return TD_OK;
}

/* Copy the parameters' gradient segments (.grad, or context CTX's) of
 * the owners in WHICH into their places: WHICH -1, every owner, into the
 * padded buffer; this rank, into rs_out; its neighbour, into rgrad (R2). */
static td_status_t
pack_grads(td_zero_t *z, int which, int64_t ctx)
{
    cut_t *c = &z->c;
    char *buf = td_tensor_data(which < 0 ? c->buf :
                               which == c->rank ? c->rs_out : c->rgrad);
    int64_t base = which < 0 ? 0 : which * c->block;

    for (int s = 0; s < c->n_segs; s++) {
        const seg_t *g = &c->segs[s];
        td_tensor_t *grad = NULL, *held;
        td_status_t st;

        if (which >= 0 && g->owner != which) {
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

/* R2: the neighbour's parameters before its step, into rep. */
static void
pack_rep_params(td_zero_t *z)
{
    cut_t *c = &z->c;
    int nb = (c->rank + 1) % c->size;

    for (int s = 0; s < c->n_segs; s++) {
        const seg_t *g = &c->segs[s];

        if (g->owner == nb) {
            memcpy((char *)td_tensor_data(c->rep) +
                   (size_t)(g->in_buf - nb * c->block) * z->esize,
                   (char *)td_tensor_data(z->params[g->param]) +
                   (size_t)g->in_param * z->esize, (size_t)g->count * z->esize);
        }
    }
}

/* R2 without DDP: each rank sends its averaged gradient (rs_out) to the
 * rank that keeps its replica, (rank - 1) % size, and receives its
 * neighbour's into rgrad. A rank with an empty shard sends nothing, and
 * its replica holder (rlen 0) receives nothing. */
static td_status_t
swap_rep_grads(td_zero_t *z)
{
    cut_t *c = &z->c;
    td_tensor_t *mine = NULL;
    td_work_t *w = NULL;
    td_status_t st = TD_OK, wst;

    if (c->len > 0) {
        st = td_tensor_narrow(c->rs_out, 0, 0, c->len, &mine);
        if (st == TD_OK) {
            st = td_isend(c->group, mine, (c->rank + c->size - 1) % c->size,
                          ZERO_REP_TAG, &w);
        }
    }
    if (st == TD_OK && c->rlen > 0) {
        st = td_recv(c->group, c->rgrad, (c->rank + 1) % c->size,
                     ZERO_REP_TAG, NULL);
    }
    if (w != NULL) {
        wst = td_work_wait(w, -1);
        st = st != TD_OK ? st : wst;
    }
    td_work_release(w);
    td_tensor_release(mine);
    return st;
}

/* R3: keep the own state of step t - 1 (SAVE), or put it back. */
static td_status_t
snapshot(td_zero_t *z, int save)
{
    for (int b = 0; z->c.opt != NULL && b < z->slots; b++) {
        td_tensor_t *buf;
        td_status_t st = td_optim_buffer(z->c.opt, 0, b, &buf);

        if (st != TD_OK) {
            return st;
        }
        if (save) {
            memcpy(td_tensor_data(z->c.snap[b]), td_tensor_data(buf),
                   td_tensor_nbytes(buf));
        } else {
            memcpy(td_tensor_data(buf), td_tensor_data(z->c.snap[b]),
                   td_tensor_nbytes(buf));
        }
    }
    return TD_OK;
}

/* R3: apply step rt + 1 to the replica from the inputs in rep / rgrad. */
static td_status_t
replica_step(td_zero_t *z, double lr)
{
    td_status_t st = TD_OK;

    if (z->c.ropt != NULL) {
        td_optim_set_lr(z->c.ropt, lr);
        st = td_optim_step(z->c.ropt);
    }
    if (st == TD_OK) {
        z->rt++;
        z->rpend = 0;
    }
    return st;
}

static double
own_lr(const td_zero_t *z)
{
    if (z->c.opt != NULL) {
        return td_optim_lr(z->c.opt);
    }
    return z->opts.optim == TD_ZERO_SGD ? z->opts.sgd.lr : z->opts.adam.lr;
}

/* Steps 2-3: step the shard, gather every shard into every parameter;
 * with replicate, the snapshot before and the replica's step after
 * (R3). */
static td_status_t
step_and_gather(td_zero_t *z)
{
    cut_t *c = &z->c;
    td_status_t st;
    const char *buf;

    if (z->replicate && (st = snapshot(z, 1)) != TD_OK) {
        return st;
    }
    if (c->opt != NULL && (st = td_optim_step(c->opt)) != TD_OK) {
        return st;
    }
    z->t++;
    z->pending = 1;
    z->rpend = z->replicate;
    if ((st = td_all_gather(c->group, c->buf, c->ag_in)) != TD_OK) {
        return st;
    }
    buf = td_tensor_data(c->buf);
    for (int s = 0; s < c->n_segs; s++) {
        const seg_t *g = &c->segs[s];

        memcpy((char *)td_tensor_data(z->params[g->param]) +
               (size_t)g->in_param * z->esize,
               buf + (size_t)g->in_buf * z->esize,
               (size_t)g->count * z->esize);
    }
    for (int i = 0; i < z->n; i++) {
        td_tensor_bump_version(z->params[i]);
    }
    z->pending = 0;
    if (z->replicate) {
        return replica_step(z, own_lr(z));
    }
    return TD_OK;
}

/* Steps 1-3 (AVERAGED 0) or 2-3 from the gradients of CTX. */
static td_status_t
zero_step(td_zero_t *z, int averaged, int64_t ctx)
{
    td_status_t st;
    cut_t *c;

    if (z == NULL) {
        return td_error(TD_ERR_INVALID, "zero: step of NULL");
    }
    c = &z->c;
    if (td_group_size(c->group) != c->size ||
        td_group_rank(c->group) != c->rank) {                  /* Z5 */
        return td_error(TD_ERR_STATE, "zero: its group has %d members (this "
                        "rank %d), the shards were cut for %d (rank %d): the "
                        "group shrank or grew (todist/elastic.h); re-shard "
                        "with td_zero_set_group", td_group_size(c->group),
                        td_group_rank(c->group), c->size, c->rank);
    }
    if (z->pending && z->replicate) {                          /* R3 */
        return td_error(TD_ERR_STATE, "zero: step %lld's all-gather failed "
                        "on rank %d: recover (todist/elastic.h) and "
                        "re-shard with td_zero_set_group before the next "
                        "step", (long long)z->t, c->rank);
    }
    td__zero_sync_shard(z);                                    /* Z4 */
    if (averaged) {
        st = pack_grads(z, c->rank, ctx);
    } else if ((st = pack_grads(z, -1, ctx)) == TD_OK) {
        st = td_reduce_scatter(c->group, c->rs_out, c->buf, TD_REDUCE_AVG);
    }
    if (st == TD_OK && c->rep != NULL) {                      /* R2 */
        pack_rep_params(z);
        if (averaged) {
            st = pack_grads(z, (c->rank + 1) % c->size, ctx);
        }
    }
    if (st == TD_OK && !averaged && z->replicate && c->size > 1) {
        st = swap_rep_grads(z);
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

/* ---- re-shard (td_zero_set_group, td_zero_join): R4 ------------------ */

/* One row per new member in the re-shard's table. */
enum { M_HAS, M_ORANK, M_OSIZE, M_T, M_PEND, M_RT, M_RPEND, M_LR, M_TOTAL,
       M_SLOTS, M_REPL };

/* Where old shard Q's state comes from: the new member holding it (-1:
 * nobody) and whether from its replica. */
typedef struct {
    int who;
    int rep;
} prov_t;

static int64_t
meta(const int64_t *tab, int m, int f)
{
    return tab[(size_t)m * ZERO_META + (size_t)f];
}

/* The table's verdict (the same on every member): the step every shard
 * is brought to (*TARGET_P), the learning rate, and each old shard's
 * provider in PROV[old size]. */
static td_status_t
plan_reshard(const td_zero_t *z, const int64_t *tab, int n_new,
             int64_t *target_p, double *lr_p, prov_t **prov_p, int *osize_p)
{
    int first = -1, osize = 0;
    int64_t target = -1;
    prov_t *prov;

    for (int m = 0; m < n_new; m++) {
        if (!meta(tab, m, M_HAS)) {
            continue;
        }
        if (first < 0) {
            first = m;
            osize = (int)meta(tab, m, M_OSIZE);
        }
        if (meta(tab, m, M_OSIZE) != osize ||
            meta(tab, m, M_TOTAL) != z->total ||
            meta(tab, m, M_SLOTS) != z->slots ||
            meta(tab, m, M_REPL) != meta(tab, first, M_REPL) ||
            meta(tab, m, M_ORANK) < 0 || meta(tab, m, M_ORANK) >= osize) {
            return td_error(TD_ERR_STATE, "zero: re-shard: group rank %d's "
                            "optimizer (old rank %lld of %lld, %lld "
                            "elements, %lld state buffers) does not match "
                            "group rank %d's (%d ranks, %lld elements, %d)",
                            m, (long long)meta(tab, m, M_ORANK),
                            (long long)meta(tab, m, M_OSIZE),
                            (long long)meta(tab, m, M_TOTAL),
                            (long long)meta(tab, m, M_SLOTS), first, osize,
                            (long long)z->total, z->slots);
        }
        if (meta(tab, m, M_T) - meta(tab, m, M_PEND) > target) {
            target = meta(tab, m, M_T) - meta(tab, m, M_PEND);
        }
    }
    if (first < 0) {
        return td_error(TD_ERR_STATE, "zero: re-shard: none of the group's "
                        "%d members holds optimizer state (all joined)",
                        n_new);
    }
    if ((prov = calloc((size_t)osize, sizeof(*prov))) == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "zero: out of memory");
    }
    for (int q = 0; q < osize; q++) {
        int holder = (q + osize - 1) % osize;
        int64_t len = shard_start(z->total, osize, q + 1) -
                      shard_start(z->total, osize, q);

        prov[q].who = -1;
        for (int m = 0; len > 0 && m < n_new; m++) {
            int64_t t = meta(tab, m, M_T), rt = meta(tab, m, M_RT);

            if (!meta(tab, m, M_HAS)) {
                continue;
            }
            if (meta(tab, m, M_ORANK) == q &&
                (t == target ||
                 (t == target + 1 && meta(tab, m, M_PEND) &&
                  meta(tab, m, M_REPL)))) {
                prov[q] = (prov_t){m, 0};
                break;                          /* the owner first */
            }
            if (osize > 1 && meta(tab, m, M_ORANK) == holder &&
                meta(tab, m, M_REPL) &&
                (rt == target || (rt + 1 == target &&
                                  meta(tab, m, M_RPEND)))) {
                prov[q] = (prov_t){m, 1};
            }
        }
        if (len > 0 && prov[q].who < 0) {
            char why[160];
            td_status_t st;

            int owner = 0;

            for (int m = 0; m < n_new; m++) {
                owner |= meta(tab, m, M_HAS) && meta(tab, m, M_ORANK) == q;
            }
            if (owner) {
                snprintf(why, sizeof(why), "its owner (old rank %d) applied "
                         "step %lld, which did not complete everywhere, and "
                         "keeps no snapshot (td_zero_opts_t.replicate)", q,
                         (long long)target + 1);
            } else if (!meta(tab, first, M_REPL)) {
                snprintf(why, sizeof(why), "its owner (old rank %d) left and "
                         "the optimizer keeps no replica "
                         "(td_zero_opts_t.replicate)", q);
            } else if (osize == 1) {
                snprintf(why, sizeof(why), "its owner, the only rank, left");
            } else {
                snprintf(why, sizeof(why), "its owner (old rank %d) and the "
                         "rank keeping its replica (old rank %d) both left",
                         q, holder);
            }
            st = td_error(TD_ERR_STATE, "zero: re-shard: the optimizer state "
                          "of shard %d of %d (%lld elements) at step %lld is "
                          "lost: %s; free the optimizer, make it again over "
                          "the group and td_checkpoint_load the last "
                          "checkpoint", q, osize, (long long)len,
                          (long long)target, why);
            free(prov);
            return st;
        }
    }
    {
        uint64_t bits = (uint64_t)meta(tab, first, M_LR);

        memcpy(lr_p, &bits, sizeof(*lr_p));
    }
    *target_p = target;
    *prov_p = prov;
    *osize_p = osize;
    return TD_OK;
}

/* Copy the elements [LO, HI) of the flat state buffer B that this rank
 * provides (old cut O, PROV) into CHUNK (int64 bits, starting at C0). */
static td_status_t
fill_chunk(td_zero_t *z, const cut_t *o, const prov_t *prov, int osize,
           int me, int b, int64_t c0, int64_t n, int64_t *chunk)
{
    for (int pass = 0; pass < 2; pass++) {
        int q = pass == 0 ? o->rank : (o->rank + 1) % osize;
        td_optim_t *opt = pass == 0 ? o->opt : o->ropt;
        int64_t so = shard_start(z->total, osize, q);
        int64_t se = shard_start(z->total, osize, q + 1);
        int64_t lo = so > c0 ? so : c0, hi = se < c0 + n ? se : c0 + n;
        td_tensor_t *buf;
        td_status_t st;

        if (osize < 2 && pass == 1) {
            break;
        }
        if (prov[q].who != me || prov[q].rep != pass || lo >= hi ||
            opt == NULL) {
            continue;
        }
        if ((st = td_optim_buffer(opt, 0, b, &buf)) != TD_OK) {
            return st;
        }
        memcpy(chunk + (lo - c0), (const double *)td_tensor_data(buf) +
               (lo - so), (size_t)(hi - lo) * sizeof(double));
    }
    return TD_OK;
}

/* Copy the new cut's elements of CHUNK into its optimizers' buffer B. */
static td_status_t
take_chunk(const cut_t *c, int b, int64_t c0, int64_t n, const int64_t *chunk)
{
    for (int pass = 0; pass < 2; pass++) {
        td_optim_t *opt = pass == 0 ? c->opt : c->ropt;
        int64_t so = pass == 0 ? c->off : c->roff;
        int64_t se = so + (pass == 0 ? c->len : c->rlen);
        int64_t lo = so > c0 ? so : c0, hi = se < c0 + n ? se : c0 + n;
        td_tensor_t *buf;
        td_status_t st;

        if (opt == NULL || lo >= hi) {
            continue;
        }
        if ((st = td_optim_buffer(opt, 0, b, &buf)) != TD_OK) {
            return st;
        }
        memcpy((double *)td_tensor_data(buf) + (lo - so), chunk + (lo - c0),
               (size_t)(hi - lo) * sizeof(double));
    }
    return TD_OK;
}

static td_status_t
zero_reshard(td_zero_t *z, td_group_t *group, int has_state)
{
    int n_new = td_group_size(group), me = td_group_rank(group), osize = 0;
    int64_t shape[1], target = 0;
    td_tensor_t *tt = NULL, *ct = NULL;
    prov_t *prov = NULL;
    double lr = 0;
    cut_t nc;
    td_status_t st;
    int64_t *tab;

    memset(&nc, 0, sizeof(nc));
    if (me < 0) {
        return td_error(TD_ERR_STATE, "zero: re-shard: this rank is not a "
                        "member of the group");
    }
    shape[0] = (int64_t)n_new * ZERO_META;
    if ((st = td_tensor_zeros(shape, 1, TD_INT64, &tt)) != TD_OK) {
        return st;
    }
    tab = td_tensor_data(tt);
    if (has_state) {
        int64_t *row = tab + (size_t)me * ZERO_META;
        double l = own_lr(z);
        uint64_t bits;

        memcpy(&bits, &l, sizeof(bits));
        row[M_HAS] = 1;
        row[M_ORANK] = z->c.rank;
        row[M_OSIZE] = z->c.size;
        row[M_T] = z->t;
        row[M_PEND] = z->pending;
        row[M_RT] = z->rt;
        row[M_RPEND] = z->rpend;
        row[M_LR] = (int64_t)bits;
        row[M_TOTAL] = z->total;
        row[M_SLOTS] = z->slots;
        row[M_REPL] = z->replicate;
    }
    if ((st = td_all_reduce(group, tt, TD_REDUCE_SUM)) != TD_OK ||
        (st = plan_reshard(z, tab, n_new, &target, &lr, &prov, &osize)) !=
            TD_OK) {
        goto out;
    }
    /* bring what this rank provides to the target step: the own state
     * back to its snapshot, the replica one step on */
    if (has_state && z->replicate && z->t == target + 1 && z->pending) {
        if ((st = snapshot(z, 0)) != TD_OK) {
            goto out;
        }
        z->t = target;
        z->pending = 0;
    }
    if (has_state && z->rt + 1 == target && z->rpend &&
        (st = replica_step(z, lr)) != TD_OK) {
        goto out;
    }
    if ((st = cut_make(z, group, &nc)) != TD_OK) {
        goto out;
    }
    shape[0] = z->total < ZERO_CHUNK ? (z->total > 0 ? z->total : 1)
                                     : ZERO_CHUNK;
    if ((st = td_tensor_zeros(shape, 1, TD_INT64, &ct)) != TD_OK) {
        goto out;
    }
    /* the flat state, piece by piece: each old shard written by its one
     * provider, zeros elsewhere; an integer sum moves the bits exactly */
    for (int b = 0; b < z->slots; b++) {
        for (int64_t c0 = 0; c0 < z->total; c0 += shape[0]) {
            int64_t n = z->total - c0 < shape[0] ? z->total - c0 : shape[0];
            int64_t *chunk = td_tensor_data(ct);

            memset(chunk, 0, (size_t)shape[0] * sizeof(*chunk));
            if (has_state &&
                (st = fill_chunk(z, &z->c, prov, osize, me, b, c0, n,
                                 chunk)) != TD_OK) {
                goto out;
            }
            if ((st = td_all_reduce(group, ct, TD_REDUCE_SUM)) != TD_OK ||
                (st = take_chunk(&nc, b, c0, n, chunk)) != TD_OK) {
                goto out;
            }
        }
    }
    if ((nc.opt != NULL &&
         (st = td_optim_set_param_step(nc.opt, 0, target)) != TD_OK) ||
        (nc.ropt != NULL &&
         (st = td_optim_set_param_step(nc.ropt, 0, target)) != TD_OK)) {
        goto out;
    }
    if (nc.opt != NULL) {
        td_optim_set_lr(nc.opt, lr);
    }
    if (nc.ropt != NULL) {
        td_optim_set_lr(nc.ropt, lr);
    }
    cut_free(&z->c);
    z->c = nc;
    memset(&nc, 0, sizeof(nc));
    z->t = z->rt = target;
    z->pending = z->rpend = 0;
    td__zero_sync_shard(z);                                    /* Z4 */
out:
    cut_free(&nc);
    free(prov);
    td_tensor_release(ct);
    td_tensor_release(tt);
    return st;
}

td_status_t
td_zero_set_group(td_zero_t *z, td_group_t *group)
{
    if (z == NULL || group == NULL) {
        return td_error(TD_ERR_INVALID, "zero: set_group needs %s",
                        z == NULL ? "an optimizer" : "a group");
    }
    return zero_reshard(z, group, 1);
}

td_status_t
td_zero_join(td_zero_t *z)
{
    if (z == NULL) {
        return td_error(TD_ERR_INVALID, "zero: join needs an optimizer");
    }
    if (z->t != 0 || z->pending) {
        return td_error(TD_ERR_STATE, "zero: join: this optimizer already "
                        "stepped (%lld steps); td_zero_join is for a "
                        "replacement's new one", (long long)z->t);
    }
    return zero_reshard(z, z->c.group, 0);
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
        *offset_p = z->c.off;
    }
    if (len_p != NULL) {
        *len_p = z->c.len;
    }
    if (total_p != NULL) {
        *total_p = z->total;
    }
}

size_t
td_zero_state_bytes(const td_zero_t *z)
{
    return (size_t)z->c.len * (size_t)z->slots * sizeof(double);
}

void
td_zero_free(td_zero_t *z)
{
    if (z == NULL) {
        return;
    }
    cut_free(&z->c);
    for (int i = 0; i < z->n; i++) {
        td_tensor_release(z->params[i]);
    }
    free(z->params);
    free(z);
}
