/* runtime/tensor/batchnorm.c: batch normalisation over the features of a
 * [N, C] input (td_batch_norm) and the BatchNorm1d module. The forward and
 * the first-order backward are the kernel table's bn_* loops; with
 * create_graph the backward is composed from the public ops, recomputing
 * the batch statistics from x so that it is itself differentiable.
 *
 * Invariants:
 *  1. Batch statistics are two-pass (mean, then the sum of squared
 *     deviations from it) in double, so they match PyTorch's to rounding.
 *  2. Normalisation uses the biased batch variance; the running variance
 *     moves towards the unbiased one (times N / (N - 1)).
 *  3. The running statistics change only in train mode, in place, once per
 *     forward, and never enter the autograd graph.
 *  4. The node saves x, weight and a float64 [2, C] tensor (mean, invstd
 *     of the forward); in eval mode these are the running statistics'.
 * Thread-safe as the ops are; a module is used by one thread at a time. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "runtime/tensor/ops_internal.h"
#include <todist/batchnorm.h>
#include <todist/ops.h>

/* First order: the two kernel passes with the saved statistics. */
static td_status_t
bn_backward_fused(td_node_t *node, td_tensor_t *x, td_tensor_t *w,
                  td_tensor_t *stats, int training, td_tensor_t *g,
                  td_tensor_t **gout)
{
    const td_kernels_t *k = td__kernels_get(x->device);
    int64_t n = x->shape[0], c = x->shape[1], cshape[1] = {c};
    const double *mean = td_tensor_data(stats), *invstd = mean + c;
    td_tensor_t *gc = NULL, *xc = NULL, *wc = NULL;
    double *sums = NULL;
    td_status_t status;

    sums = malloc(2 * (size_t)c * sizeof(double) + 1);
    if (sums == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "batch_norm: out of memory "
                        "(backward, C=%lld)", (long long)c);
    }
    TD_OP_TRY(td_tensor_contiguous(g, &gc));
    TD_OP_TRY(td_tensor_contiguous(x, &xc));
    if (w != NULL) {
        TD_OP_TRY(td_tensor_contiguous(w, &wc));
    }
    k->bn_backward_reduce(x->dtype, td_tensor_data(gc), td_tensor_data(xc), n,
                          c, mean, sums, sums + c);
    if (node->next[0].node != NULL) {
        TD_OP_TRY(td_tensor_empty(x->shape, 2, x->dtype, x->device,
                                  &gout[0]));
        k->bn_backward_elemt(x->dtype, td_tensor_data(gout[0]),
                             td_tensor_data(gc), td_tensor_data(xc), n, c,
                             mean, invstd, wc ? td_tensor_data(wc) : NULL,
                             training ? sums : NULL,
                             training ? sums + c : NULL, (double)n);
    }
    for (int i = 0; i < c; i++) {
        sums[c + i] *= invstd[i];     /* grad weight = sum g xhat */
    }
    if (node->n_next > 1 && node->next[1].node != NULL) {
        TD_OP_TRY(td_tensor_from_data(sums + c, cshape, 1, TD_FLOAT64,
                                      &gout[1]));
        if (x->dtype != TD_FLOAT64) {
            td_tensor_t *t = gout[1];
            status = td_tensor_to_dtype(t, x->dtype, &gout[1]);
            td_tensor_release(t);
            TD_OP_TRY(status);
        }
    }
    if (node->n_next > 2 && node->next[2].node != NULL) {
        TD_OP_TRY(td_tensor_from_data(sums, cshape, 1, TD_FLOAT64, &gout[2]));
        if (x->dtype != TD_FLOAT64) {
            td_tensor_t *t = gout[2];
            status = td_tensor_to_dtype(t, x->dtype, &gout[2]);
            td_tensor_release(t);
            TD_OP_TRY(status);
        }
    }
out:
    free(sums);
    td_tensor_release(gc);
    td_tensor_release(xc);
    td_tensor_release(wc);
    return status;
}

/* create_graph: xhat and invstd from the public ops (from x in train mode,
 * from the saved running statistics in eval mode), then
 * gx = invstd (gxhat - mean(gxhat) - xhat mean(gxhat xhat)) in train mode,
 * gx = invstd gxhat in eval mode; gxhat = g weight. */
static td_status_t
bn_backward_composed(td_node_t *node, td_tensor_t *x, td_tensor_t *w,
                     td_tensor_t *stats, int training, double eps,
                     td_tensor_t *g, td_tensor_t **gout)
{
    enum { MEAN, XMU, SQ, VAR, VE, INVSTD, XHAT, GXHAT, GX_XHAT, A, B,
           T1, T2, T3, STATS, NTMP };
    td_tensor_t *t[NTMP] = {0};
    int dims[1] = {0};
    td_status_t status;

    if (training) {
        TD_OP_TRY(td_mean_dims(x, dims, 1, 1, &t[MEAN]));
        TD_OP_TRY(td_sub(x, t[MEAN], &t[XMU]));
        TD_OP_TRY(td_mul(t[XMU], t[XMU], &t[SQ]));
        TD_OP_TRY(td_mean_dims(t[SQ], dims, 1, 1, &t[VAR]));
        TD_OP_TRY(td_add_scalar(t[VAR], eps, &t[VE]));
        TD_OP_TRY(td_pow_scalar(t[VE], -0.5, &t[INVSTD]));
    } else {
        TD_OP_TRY(td_tensor_to_dtype(stats, x->dtype, &t[STATS]));
        TD_OP_TRY(td_tensor_narrow(t[STATS], 0, 0, 1, &t[MEAN]));
        TD_OP_TRY(td_tensor_narrow(t[STATS], 0, 1, 1, &t[INVSTD]));
        TD_OP_TRY(td_sub(x, t[MEAN], &t[XMU]));
    }
    TD_OP_TRY(td_mul(t[XMU], t[INVSTD], &t[XHAT]));
    if (w != NULL) {
        TD_OP_TRY(td_mul(g, w, &t[GXHAT]));
    } else {
        t[GXHAT] = td_tensor_retain(g);
    }
    if (node->next[0].node != NULL) {
        if (training) {
            TD_OP_TRY(td_mean_dims(t[GXHAT], dims, 1, 1, &t[A]));
            TD_OP_TRY(td_mul(t[GXHAT], t[XHAT], &t[GX_XHAT]));
            TD_OP_TRY(td_mean_dims(t[GX_XHAT], dims, 1, 1, &t[B]));
            TD_OP_TRY(td_sub(t[GXHAT], t[A], &t[T1]));
            TD_OP_TRY(td_mul(t[XHAT], t[B], &t[T2]));
            TD_OP_TRY(td_sub(t[T1], t[T2], &t[T3]));
            TD_OP_TRY(td_mul(t[T3], t[INVSTD], &gout[0]));
        } else {
            TD_OP_TRY(td_mul(t[GXHAT], t[INVSTD], &gout[0]));
        }
    }
    if (node->n_next > 1 && node->next[1].node != NULL) {
        td_tensor_release(t[T1]);
        t[T1] = NULL;
        TD_OP_TRY(td_mul(g, t[XHAT], &t[T1]));
        TD_OP_TRY(td_sum_dims(t[T1], dims, 1, 0, &gout[1]));
    }
    if (node->n_next > 2 && node->next[2].node != NULL) {
        TD_OP_TRY(td_sum_dims(g, dims, 1, 0, &gout[2]));
    }
out:
    for (int i = 0; i < NTMP; i++) {
        td_tensor_release(t[i]);
    }
    return status;
}

static td_status_t
bn_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *x = NULL, *w = NULL, *stats = NULL;
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &x));
    if (st->sv[1].tensor != NULL) {
        TD_OP_TRY(td_saved_unpack(&st->sv[1], node, &w));
    }
    TD_OP_TRY(td_saved_unpack(&st->sv[2], node, &stats));
    if (!td_grad_enabled()) {
        status = bn_backward_fused(node, x, w, stats, st->dim, gin[0], gout);
    } else {
        status = bn_backward_composed(node, x, w, stats, st->dim, st->c,
                                      gin[0], gout);
    }
out:
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t bn_ops = TD_OP_NODE("NativeBatchNormBackward",
                                               bn_backward);

static td_status_t
check_vec(const char *what, td_tensor_t *v, td_tensor_t *x, int contig)
{
    if (v == NULL) {
        return TD_OK;
    }
    if (v->dtype != x->dtype || v->ndim != 1 || v->shape[0] != x->shape[1] ||
        (contig && !td_tensor_is_contiguous(v))) {
        return td_error(TD_ERR_SHAPE, "batch_norm: %s %s does not fit input "
                        "%s (needs [C]%s of the input's dtype)", what,
                        TD_SHAPE_STR(v), TD_SHAPE_STR(x),
                        contig ? ", contiguous," : "");
    }
    if (v->device.type != x->device.type || v->device.index != x->device.index) {
        return td_error(TD_ERR_INVALID, "batch_norm: %s is on another device "
                        "than the input", what);
    }
    return TD_OK;
}

/* new = (1 - m) old + m v, in the buffer's dtype (also SyncBatchNorm's) */
void
td__bn_running_update(td_tensor_t *buf, const double *v, double m, int64_t c)
{
    if (buf->dtype == TD_FLOAT32) {
        float *p = td_tensor_data(buf);
        for (int64_t i = 0; i < c; i++) {
            p[i] = (float)((1 - m) * p[i] + m * v[i]);
        }
    } else {
        double *p = td_tensor_data(buf);
        for (int64_t i = 0; i < c; i++) {
            p[i] = (1 - m) * p[i] + m * v[i];
        }
    }
    td_tensor_bump_version(buf);
}

static void
load_doubles(td_tensor_t *buf, double *v, int64_t c)
{
    for (int64_t i = 0; i < c; i++) {
        v[i] = buf->dtype == TD_FLOAT32 ? ((float *)td_tensor_data(buf))[i]
                                        : ((double *)td_tensor_data(buf))[i];
    }
}

td_status_t
td_batch_norm(td_tensor_t *x, td_tensor_t *running_mean,
              td_tensor_t *running_var, td_tensor_t *weight,
              td_tensor_t *bias, int training, double momentum, double eps,
              td_tensor_t **out_p)
{
    td_tensor_t *ins[3] = {x, weight, bias};
    td_tensor_t *xc = NULL, *wc = NULL, *bc = NULL, *stats = NULL, *out = NULL;
    const td_kernels_t *k;
    td_op_state_t *st = NULL;
    int64_t n, c, sshape[2];
    double *mean, *invstd, *var = NULL;
    td_status_t status = td__op_check_float("batch_norm", x);

    if (status != TD_OK) {
        return status;
    }
    if (x->ndim != 2) {
        return td_error(TD_ERR_SHAPE, "batch_norm: input %s is not [N, C]",
                        TD_SHAPE_STR(x));
    }
    if (x->device.type != TD_DEVICE_CPU) {
        /* the per-channel statistics live in host memory */
        return td_error(TD_ERR_UNSUPPORTED, "batch_norm: input on device "
                        "type %d; only cpu tensors are supported",
                        (int)x->device.type);
    }
    n = x->shape[0];
    c = x->shape[1];
    if ((status = check_vec("weight", weight, x, 0)) != TD_OK ||
        (status = check_vec("bias", bias, x, 0)) != TD_OK ||
        (status = check_vec("running_mean", running_mean, x, 1)) != TD_OK ||
        (status = check_vec("running_var", running_var, x, 1)) != TD_OK) {
        return status;
    }
    if ((running_mean == NULL) != (running_var == NULL)) {
        return td_error(TD_ERR_INVALID, "batch_norm: running_mean and "
                        "running_var go together (one is NULL)");
    }
    if (!training && running_mean == NULL) {
        return td_error(TD_ERR_INVALID, "batch_norm: eval mode needs "
                        "running_mean and running_var");
    }
    if (training && n < 2) {
        return td_error(TD_ERR_SHAPE, "batch_norm: expected more than 1 value "
                        "per channel when training, got input %s",
                        TD_SHAPE_STR(x));
    }
    if (!(eps > 0) || !(momentum >= 0 && momentum <= 1)) {
        return td_error(TD_ERR_INVALID, "batch_norm: eps=%g must be > 0 and "
                        "momentum=%g in [0, 1]", eps, momentum);
    }
    sshape[0] = 2;
    sshape[1] = c;
    status = td_tensor_empty(sshape, 2, TD_FLOAT64, TD_CPU, &stats);
    if (status == TD_OK) {
        var = malloc((size_t)c * sizeof(double) + 1);
        if (var == NULL) {
            status = td_error(TD_ERR_NO_MEMORY, "batch_norm: out of memory "
                              "(C=%lld)", (long long)c);
        }
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
    if (status == TD_OK) {
        status = td_tensor_empty(x->shape, 2, x->dtype, x->device, &out);
    }
    if (status != TD_OK) {
        goto err;
    }
    k = td__kernels_get(x->device);
    mean = td_tensor_data(stats);
    invstd = mean + c;
    if (training) {
        k->bn_sums(x->dtype, td_tensor_data(xc), n, c, NULL, mean, var);
        for (int64_t i = 0; i < c; i++) {
            mean[i] /= (double)n;
        }
        k->bn_sums(x->dtype, td_tensor_data(xc), n, c, mean, invstd, var);
        for (int64_t i = 0; i < c; i++) {
            var[i] /= (double)n;
            invstd[i] = 1.0 / sqrt(var[i] + eps);
        }
        if (running_mean != NULL) {
            td__bn_running_update(running_mean, mean, momentum, c);
            for (int64_t i = 0; i < c; i++) {
                var[i] *= (double)n / (double)(n - 1);
            }
            td__bn_running_update(running_var, var, momentum, c);
        }
    } else {
        load_doubles(running_mean, mean, c);
        load_doubles(running_var, var, c);
        for (int64_t i = 0; i < c; i++) {
            invstd[i] = 1.0 / sqrt(var[i] + eps);
        }
    }
    k->bn_apply(x->dtype, td_tensor_data(out), td_tensor_data(xc), n, c, mean,
                invstd, wc ? td_tensor_data(wc) : NULL,
                bc ? td_tensor_data(bc) : NULL);
    if (td__op_needs_state(ins, 3)) {
        st = td__op_state_new();
        if (st == NULL) {
            status = td_error(TD_ERR_NO_MEMORY, "batch_norm: out of memory");
            goto err;
        }
        st->dim = training;
        st->c = eps;
        td_saved_init(&st->sv[0], x);
        if (weight != NULL) {
            td_saved_init(&st->sv[1], weight);
        }
        td_saved_init(&st->sv[2], stats);
    }
    free(var);
    td_tensor_release(xc);
    td_tensor_release(wc);
    td_tensor_release(bc);
    td_tensor_release(stats);
    return td__op_finish(&bn_ops, st, ins, 3, out, out_p);

err:
    free(var);
    td_tensor_release(out);
    td_tensor_release(xc);
    td_tensor_release(wc);
    td_tensor_release(bc);
    td_tensor_release(stats);
    return status;
}

/* ---- BatchNorm1d ------------------------------------------------------- */

td_status_t
td_batchnorm1d_init(td_batchnorm1d_t *bn, int64_t num_features,
                    td_dtype_t dtype)
{
    int64_t shape[1] = {num_features};
    td_status_t status;

    memset(bn, 0, sizeof(*bn));
    if (num_features < 1 || (dtype != TD_FLOAT32 && dtype != TD_FLOAT64)) {
        return td_error(TD_ERR_INVALID, "batchnorm1d: num_features=%lld must "
                        "be >= 1 and the dtype a float type",
                        (long long)num_features);
    }
    bn->num_features = num_features;
    bn->eps = 1e-5;
    bn->momentum = 0.1;
    bn->training = 1;
    status = td_tensor_full(shape, 1, dtype, 1.0, &bn->weight);
    if (status == TD_OK) {
        status = td_tensor_zeros(shape, 1, dtype, &bn->bias);
    }
    if (status == TD_OK) {
        status = td_tensor_zeros(shape, 1, dtype, &bn->running_mean);
    }
    if (status == TD_OK) {
        status = td_tensor_full(shape, 1, dtype, 1.0, &bn->running_var);
    }
    if (status == TD_OK) {
        status = td_tensor_set_requires_grad(bn->weight, 1);
    }
    if (status == TD_OK) {
        status = td_tensor_set_requires_grad(bn->bias, 1);
    }
    if (status != TD_OK) {
        td_batchnorm1d_destroy(bn);
    }
    return status;
}

void
td_batchnorm1d_destroy(td_batchnorm1d_t *bn)
{
    td_tensor_release(bn->running_var);
    td_tensor_release(bn->running_mean);
    td_tensor_release(bn->bias);
    td_tensor_release(bn->weight);
    memset(bn, 0, sizeof(*bn));
}

td_status_t
td_batchnorm1d_forward(td_batchnorm1d_t *bn, td_tensor_t *x,
                       td_tensor_t **out)
{
    td_status_t status = td_batch_norm(x, bn->running_mean, bn->running_var,
                                       bn->weight, bn->bias, bn->training,
                                       bn->momentum, bn->eps, out);

    if (status == TD_OK && bn->training) {
        bn->num_batches_tracked++;
    }
    return status;
}
