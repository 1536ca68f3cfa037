/* runtime/ddp/syncbn.c: SyncBatchNorm (todist/syncbn.h): batch statistics
 * over a group with two all_reduces of float64 per-channel sums, and a
 * backward node that all_reduces sum(dy) and sum(dy (x - mean)) before the
 * kernel table's bn_backward_elemt.
 *
 * Invariants (SBN1-SBN5):
 *   SBN1 the forward issues exactly two all_reduce(SUM) on the group in
 *        train mode ([sum x, count] then [sum (x - mean)^2]), none in eval
 *        mode; the backward exactly one ([sum dy, sum dy xmu]). Every rank
 *        issues the same sequence, whatever its N_r (0 rows included).
 *   SBN2 the mean is the group's (sum / total count) before the squared
 *        deviations are summed (two-pass, as td_batch_norm), so the
 *        statistics equal the concatenated batch's to rounding.
 *   SBN3 gx uses the reduced sums and the group's count; grad weight and
 *        grad bias use the local sums (PyTorch's sync_batch_norm).
 *   SBN4 the node holds the group (borrowed: groups outlive the graphs
 *        built on them), x and weight as saved tensors, and a float64 [2, C]
 *        (mean, invstd).
 *   SBN5 a failed all_reduce fails the op or the backward with the
 *        collective's error; nothing is left half-updated (the running
 *        statistics move only after both forward reductions succeeded). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "runtime/tensor/ops_internal.h"
#include <todist/autograd.h>
#include <todist/syncbn.h>

typedef struct {
    td_saved_t   x, w;
    td_tensor_t *stats;     /* float64 [2, C]: mean, invstd */
    td_group_t  *group;
    double       count;     /* the group's total N */
} syncbn_state_t;

static void
syncbn_release_saved(td_node_t *node)
{
    syncbn_state_t *st = td_node_state(node);

    td_saved_release(&st->x);
    td_saved_release(&st->w);
}

static void
syncbn_destroy(void *p)
{
    syncbn_state_t *st = p;

    td_saved_release(&st->x);
    td_saved_release(&st->w);
    td_tensor_release(st->stats);
    free(st);
}

/* a [C] tensor of DTYPE holding V[C] */
static td_status_t
vec_of(const double *v, int64_t c, td_dtype_t dtype, td_tensor_t **out)
{
    td_tensor_t *t;
    td_status_t status = td_tensor_from_data(v, &c, 1, TD_FLOAT64, &t);

    if (status != TD_OK || dtype == TD_FLOAT64) {
        *out = status == TD_OK ? t : NULL;
        return status;
    }
    status = td_tensor_to_dtype(t, dtype, out);
    td_tensor_release(t);
    return status;
}

static td_status_t
syncbn_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    syncbn_state_t *st = td_node_state(node);
    td_tensor_t *x = NULL, *w = NULL, *gc = NULL, *xc = NULL, *wc = NULL;
    td_tensor_t *red = NULL;
    const double *mean = td_tensor_data(st->stats);
    const double *invstd;
    double *sums, *local = NULL;
    int64_t n, c, rshape[1];
    const td_kernels_t *k;
    td_status_t status;

    if (td_grad_enabled()) {
        status = td_error(TD_ERR_UNSUPPORTED, "sync_batch_norm: double "
                          "backward (create_graph) is not supported");
        goto out;
    }
    TD_OP_TRY(td_saved_unpack(&st->x, node, &x));
    if (st->w.tensor != NULL) {
        TD_OP_TRY(td_saved_unpack(&st->w, node, &w));
    }
    n = x->shape[0];
    c = x->shape[1];
    invstd = mean + c;
    k = td__kernels_get(x->device);
    rshape[0] = 2 * c;
    TD_OP_TRY(td_tensor_empty(rshape, 1, TD_FLOAT64, TD_CPU, &red));
    sums = td_tensor_data(red);
    local = malloc(2 * (size_t)c * sizeof(double));
    if (local == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "sync_batch_norm: out of memory "
                          "(backward, C=%lld)", (long long)c);
        goto out;
    }
    TD_OP_TRY(td_tensor_contiguous(gin[0], &gc));
    TD_OP_TRY(td_tensor_contiguous(x, &xc));
    if (w != NULL) {
        TD_OP_TRY(td_tensor_contiguous(w, &wc));
    }
    k->bn_backward_reduce(x->dtype, td_tensor_data(gc), td_tensor_data(xc), n,
                          c, mean, sums, sums + c);
    memcpy(local, sums, 2 * (size_t)c * sizeof(double));
    TD_OP_TRY(td_all_reduce(st->group, red, TD_REDUCE_SUM));
    if (node->next[0].node != NULL) {
        TD_OP_TRY(td_tensor_empty(x->shape, 2, x->dtype, x->device,
                                  &gout[0]));
        k->bn_backward_elemt(x->dtype, td_tensor_data(gout[0]),
                             td_tensor_data(gc), td_tensor_data(xc), n, c,
                             mean, invstd, wc ? td_tensor_data(wc) : NULL,
                             sums, sums + c, st->count);
    }
    for (int64_t i = 0; i < c; i++) {
        local[c + i] *= invstd[i];
    }
    if (node->n_next > 1 && node->next[1].node != NULL) {
        TD_OP_TRY(vec_of(local + c, c, x->dtype, &gout[1]));
    }
    if (node->n_next > 2 && node->next[2].node != NULL) {
        TD_OP_TRY(vec_of(local, c, x->dtype, &gout[2]));
    }
out:
    free(local);
    td_tensor_release(red);
    td_tensor_release(gc);
    td_tensor_release(xc);
    td_tensor_release(wc);
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t syncbn_ops = {
    "SyncBatchNormBackward", syncbn_backward, syncbn_release_saved,
    syncbn_destroy
};

td_status_t
td_sync_batch_norm(td_group_t *group, td_tensor_t *x,
                   td_tensor_t *running_mean, td_tensor_t *running_var,
                   td_tensor_t *weight, td_tensor_t *bias, int training,
                   double momentum, double eps, td_tensor_t **out_p)
{
    td_tensor_t *ins[3] = {x, weight, bias};
    td_tensor_t *xc = NULL, *wc = NULL, *bc = NULL, *stats = NULL;
    td_tensor_t *red = NULL, *out = NULL;
    syncbn_state_t *st = NULL;
    const td_kernels_t *k;
    int64_t n, c, shape[2];
    double *mean, *invstd, *r, total;
    td_status_t status;

    if (!training) {
        /* eval: the running statistics, nothing to synchronise */
        return td_batch_norm(x, running_mean, running_var, weight, bias, 0,
                             momentum, eps, out_p);
    }
    if (group == NULL) {
        group = td_group_world();
    }
    if (x->ndim != 2 || !td_dtype_is_float(x->dtype) ||
        x->device.type != TD_DEVICE_CPU) {
        return td_error(TD_ERR_SHAPE, "sync_batch_norm: input %s (%s) on rank "
                        "%d is not a float [N, C] cpu tensor",
                        TD_SHAPE_STR(x), td_dtype_name(x->dtype),
                        td_group_rank(group));
    }
    n = x->shape[0];
    c = x->shape[1];
    for (int i = 1; i < 3; i++) {
        td_tensor_t *v = ins[i];
        if (v != NULL && (v->dtype != x->dtype || v->ndim != 1 ||
                          v->shape[0] != c ||
                          v->device.type != TD_DEVICE_CPU)) {
            return td_error(TD_ERR_SHAPE, "sync_batch_norm: %s %s does not "
                            "fit input %s on rank %d (needs [C] cpu of the "
                            "input's dtype)", i == 1 ? "weight" : "bias",
                            TD_SHAPE_STR(v), TD_SHAPE_STR(x),
                            td_group_rank(group));
        }
    }
    if (!(eps > 0) || !(momentum >= 0 && momentum <= 1)) {
        return td_error(TD_ERR_INVALID, "sync_batch_norm: eps=%g must be > 0 "
                        "and momentum=%g in [0, 1]", eps, momentum);
    }
    if ((running_mean == NULL) != (running_var == NULL) ||
        (running_mean != NULL &&
         (running_mean->dtype != x->dtype || running_var->dtype != x->dtype ||
          td_tensor_numel(running_mean) != c ||
          td_tensor_numel(running_var) != c ||
          !td_tensor_is_contiguous(running_mean) ||
          !td_tensor_is_contiguous(running_var)))) {
        return td_error(TD_ERR_SHAPE, "sync_batch_norm: running_mean and "
                        "running_var must both be contiguous [%lld] of the "
                        "input's dtype, or both NULL (rank %d)", (long long)c,
                        td_group_rank(group));
    }
    shape[0] = 2;
    shape[1] = c;
    status = td_tensor_empty(shape, 2, TD_FLOAT64, TD_CPU, &stats);
    if (status == TD_OK) {
        shape[0] = c + 1;
        status = td_tensor_empty(shape, 1, TD_FLOAT64, TD_CPU, &red);
    }
    if (status == TD_OK) {
        status = td_tensor_contiguous(x, &xc);
    }
    if (status == TD_OK && weight != NULL) {
        status = td_tensor_contiguous(weight, &wc);
    }
    if (status == TD_OK && bias != NULL) {
        status = td_tensor_contiguous(bias, &bc);
    }
    if (status != TD_OK) {
        goto err;
    }
    k = td__kernels_get(x->device);
    mean = td_tensor_data(stats);
    invstd = mean + c;
    r = td_tensor_data(red);
    /* pass 1: the group's sum and count, then its mean */
    k->bn_sums(x->dtype, td_tensor_data(xc), n, c, NULL, r, invstd);
    r[c] = (double)n;
    status = td_all_reduce(group, red, TD_REDUCE_SUM);
    if (status != TD_OK) {
        goto err;
    }
    total = r[c];
    if (total < 2) {
        status = td_error(TD_ERR_SHAPE, "sync_batch_norm: expected more than "
                          "1 value per channel when training, the group has "
                          "%.0f rows (rank %d holds %lld)", total,
                          td_group_rank(group), (long long)n);
        goto err;
    }
    for (int64_t i = 0; i < c; i++) {
        mean[i] = r[i] / total;
    }
    /* pass 2: squared deviations from the group's mean (SBN2) */
    k->bn_sums(x->dtype, td_tensor_data(xc), n, c, mean, invstd, r);
    r[c] = 0;
    status = td_all_reduce(group, red, TD_REDUCE_SUM);
    if (status != TD_OK) {
        goto err;
    }
    for (int64_t i = 0; i < c; i++) {
        invstd[i] = 1.0 / sqrt(r[i] / total + eps);
    }
    if (running_mean != NULL) {
        td__bn_running_update(running_mean, mean, momentum, c);
        for (int64_t i = 0; i < c; i++) {
            r[i] = r[i] / (total - 1);      /* unbiased */
        }
        td__bn_running_update(running_var, r, momentum, c);
    }
    status = td_tensor_empty(x->shape, 2, x->dtype, x->device, &out);
    if (status != TD_OK) {
        goto err;
    }
    k->bn_apply(x->dtype, td_tensor_data(out), td_tensor_data(xc), n, c, mean,
                invstd, wc ? td_tensor_data(wc) : NULL,
                bc ? td_tensor_data(bc) : NULL);
    if (td__op_needs_state(ins, 3)) {
        st = calloc(1, sizeof(*st));
        if (st == NULL) {
            status = td_error(TD_ERR_NO_MEMORY, "sync_batch_norm: out of "
                              "memory");
            goto err;
        }
        td_saved_init(&st->x, x);
        if (weight != NULL) {
            td_saved_init(&st->w, weight);
        }
        st->stats = td_tensor_retain(stats);
        st->group = group;
        st->count = total;
        status = td__autograd_record(&syncbn_ops, st, ins, 3, out);
        if (status != TD_OK) {
            goto err;
        }
    }
    td_tensor_release(xc);
    td_tensor_release(wc);
    td_tensor_release(bc);
    td_tensor_release(red);
    td_tensor_release(stats);
    *out_p = out;
    return TD_OK;

err:
    td_tensor_release(out);
    td_tensor_release(xc);
    td_tensor_release(wc);
    td_tensor_release(bc);
    td_tensor_release(red);
    td_tensor_release(stats);
    return status;
}

td_status_t
td_syncbn_forward(td_batchnorm1d_t *bn, td_group_t *group, td_tensor_t *x,
                  td_tensor_t **out)
{
    td_status_t status = td_sync_batch_norm(group, x, bn->running_mean,
                                            bn->running_var, bn->weight,
                                            bn->bias, bn->training,
                                            bn->momentum, bn->eps, out);

    if (status == TD_OK && bn->training) {
        bn->num_batches_tracked++;
    }
    return status;
}
