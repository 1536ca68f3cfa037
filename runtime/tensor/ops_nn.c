/* runtime/tensor/ops_nn.c: the network ops: matmul and linear (through
 * the device's gemm kernel), softmax and log_softmax, embedding,
 * embedding_bag and dropout, each forward followed by its backward. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tensor/ops_internal.h"
#include <todist/ops.h>

/* ---- matmul ------------------------------------------------------------ */

/* How cblas reads the last two dims of T: row-major with leading dim, or
 * transposed. 0 if neither (needs a contiguous copy). */
static int
mat_layout(const td_tensor_t *t, int *trans, int64_t *ld)
{
    int64_t r = t->shape[t->ndim - 2], c = t->shape[t->ndim - 1];
    int64_t sr = t->strides[t->ndim - 2], sc = t->strides[t->ndim - 1];

    if ((sc == 1 || c == 1) && (r == 1 || sr >= (c > 1 ? c : 1))) {
        *trans = 0;
        *ld = r == 1 ? (c > 1 ? c : 1) : sr;
        return 1;
    }
    if ((sr == 1 || r == 1) && (c == 1 || sc >= (r > 1 ? r : 1))) {
        *trans = 1;
        *ld = c == 1 ? (r > 1 ? r : 1) : sc;
        return 1;
    }
    return 0;
}

static td_status_t
matmul_raw(td_tensor_t *a, td_tensor_t *b, td_tensor_t **out_p)
{
    int64_t shape[TD_MAX_DIMS], sa[TD_MAX_DIMS], sb[TD_MAX_DIMS];
    int64_t m = a->shape[a->ndim - 2], k = a->shape[a->ndim - 1];
    int64_t n = b->shape[b->ndim - 1], lda, ldb, nbatch = 1;
    td_tensor_t *ac = NULL, *bc = NULL, *out = NULL;
    const td_kernels_t *kern = td__kernels_get(a->device);
    size_t es = td_dtype_size(a->dtype);
    int ta, tb, nd, bnd;
    td_status_t status;

    if (b->shape[b->ndim - 2] != k) {
        return td_error(TD_ERR_SHAPE, "matmul: shapes %s and %s: inner "
                        "dimensions %lld and %lld differ", TD_SHAPE_STR(a),
                        TD_SHAPE_STR(b), (long long)k,
                        (long long)b->shape[b->ndim - 2]);
    }
    if (!mat_layout(a, &ta, &lda)) {
        if ((status = td_tensor_contiguous(a, &ac)) != TD_OK) {
            return status;
        }
        a = ac;
        mat_layout(a, &ta, &lda);
    }
    if (!mat_layout(b, &tb, &ldb)) {
        if ((status = td_tensor_contiguous(b, &bc)) != TD_OK) {
            goto out;
        }
        b = bc;
        mat_layout(b, &tb, &ldb);
    }
    /* batch dims broadcast like elementwise ops */
    {
        td_tensor_t ha = *a, hb = *b;
        ha.ndim = a->ndim - 2;
        hb.ndim = b->ndim - 2;
        status = td__op_broadcast_shape("matmul", &ha, &hb, shape, &bnd, sa, sb);
        if (status != TD_OK) {
            goto out;
        }
    }
    nd = bnd + 2;
    shape[bnd] = m;
    shape[bnd + 1] = n;
    for (int d = 0; d < bnd; d++) {
        nbatch *= shape[d];
    }
    status = td_tensor_empty(shape, nd, a->dtype, a->device, &out);
    if (status != TD_OK) {
        goto out;
    }
    if (m * n == 0) {
        goto done;
    }
    if (k == 0) {
        td_tensor_zero_(out);
        goto done;
    }
    for (int64_t bi = 0; bi < nbatch; bi++) {
        int64_t rem = bi, oa = 0, ob = 0;
        for (int d = bnd - 1; d >= 0; d--) {
            int64_t idx = rem % shape[d];
            rem /= shape[d];
            oa += idx * sa[d];
            ob += idx * sb[d];
        }
        status = kern->gemm(a->dtype, ta, tb, m, n, k, 1.0,
                            (char *)td_tensor_data(a) + oa * (int64_t)es,
                            lda,
                            (char *)td_tensor_data(b) + ob * (int64_t)es,
                            ldb, 0.0,
                            (char *)td_tensor_data(out) +
                                bi * m * n * (int64_t)es, n);
        if (status != TD_OK) {
            goto out;
        }
    }
done:
    *out_p = out;
    out = NULL;
out:
    td_tensor_release(out);
    td_tensor_release(ac);
    td_tensor_release(bc);
    return status;
}

/* ga = g b^T, gb = a^T g, each summed over broadcast batch dims */
static td_status_t
matmul_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *g = gin[0], *a = NULL, *b = NULL;
    td_tensor_t *t1 = NULL, *t2 = NULL, *t3 = NULL, *t4 = NULL;
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &a));
    TD_OP_TRY(td_saved_unpack(&st->sv[1], node, &b));
    if (td__autograd_output_needed(node, 0)) {
        TD_OP_TRY(td_tensor_transpose(b, -1, -2, &t1));
        TD_OP_TRY(td_matmul(g, t1, &t2));
        TD_OP_TRY(td__sum_to(t2, a->shape, a->ndim, &gout[0]));
    }
    if (td__autograd_output_needed(node, 1)) {
        TD_OP_TRY(td_tensor_transpose(a, -1, -2, &t3));
        TD_OP_TRY(td_matmul(t3, g, &t4));
        TD_OP_TRY(td__sum_to(t4, b->shape, b->ndim, &gout[1]));
    }
out:
    td_tensor_release(t1);
    td_tensor_release(t2);
    td_tensor_release(t3);
    td_tensor_release(t4);
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t matmul_ops = TD_OP_NODE("MmBackward",
                                                   matmul_backward);

td_status_t
td_matmul(td_tensor_t *a, td_tensor_t *b, td_tensor_t **out_p)
{
    td_tensor_t *ins[2] = {a, b}, *a2 = NULL, *b2 = NULL, *r = NULL, *out;
    td_op_state_t *st = NULL;
    td_status_t status = td__op_check_pair("matmul", a, b);

    if (status != TD_OK) {
        return status;
    }
    if (a->ndim == 0 || b->ndim == 0) {
        return td_error(TD_ERR_SHAPE, "matmul: both arguments need at least "
                        "1 dimension (got %s and %s)", TD_SHAPE_STR(a),
                        TD_SHAPE_STR(b));
    }
    /* 1-D operands: as torch, a vector is a row (left) or column (right),
     * and that dim is removed from the result; views keep autograd */
    if (a->ndim == 1 || b->ndim == 1) {
        status = a->ndim == 1 ? td_tensor_unsqueeze(a, 0, &a2)
                              : (a2 = td_tensor_retain(a), TD_OK);
        if (status == TD_OK) {
            status = b->ndim == 1 ? td_tensor_unsqueeze(b, 1, &b2)
                                  : (b2 = td_tensor_retain(b), TD_OK);
        }
        if (status == TD_OK) {
            status = td_matmul(a2, b2, &r);
        }
        if (status == TD_OK && b->ndim == 1) {
            status = td_tensor_squeeze(r, -1, &out);
            td_tensor_release(r);
            r = status == TD_OK ? out : NULL;
        }
        if (status == TD_OK && a->ndim == 1) {
            status = td_tensor_squeeze(r, -2, &out);
            td_tensor_release(r);
            r = status == TD_OK ? out : NULL;
        }
        td_tensor_release(a2);
        td_tensor_release(b2);
        if (status == TD_OK) {
            *out_p = r;
        }
        return status;
    }
    status = matmul_raw(a, b, &out);
    if (status != TD_OK) {
        return status;
    }
    if (td__op_needs_state(ins, 2)) {
        st = td__op_state_new();
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "matmul: out of memory");
        }
        td_saved_init(&st->sv[0], a);
        td_saved_init(&st->sv[1], b);
    }
    return td__op_finish(&matmul_ops, st, ins, 2, out, out_p);
}

/* gx = g W, gW = g^T x, gb = sum over rows of g */
static td_status_t
linear_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *g = gin[0], *x = NULL, *w = NULL, *t1 = NULL;
    int dims[1] = {0};
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &x));
    TD_OP_TRY(td_saved_unpack(&st->sv[1], node, &w));
    if (td__autograd_output_needed(node, 0)) {
        TD_OP_TRY(td_matmul(g, w, &gout[0]));
    }
    if (td__autograd_output_needed(node, 1)) {
        TD_OP_TRY(td_tensor_transpose(g, 0, 1, &t1));
        TD_OP_TRY(td_matmul(t1, x, &gout[1]));
    }
    if (td__autograd_output_needed(node, 2)) {
        TD_OP_TRY(td_sum_dims(g, dims, 1, 0, &gout[2]));
    }
out:
    td_tensor_release(t1);
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t linear_ops = TD_OP_NODE("LinearBackward",
                                                   linear_backward);

td_status_t
td_linear(td_tensor_t *x, td_tensor_t *w, td_tensor_t *bias,
          td_tensor_t **out_p)
{
    td_tensor_t *ins[3] = {x, w, bias}, *x2 = NULL, *out, *r;
    const td_kernels_t *kern;
    int64_t shape[TD_MAX_DIMS], n_rows, in, nout, ldw;
    td_op_state_t *st = NULL;
    int tw;
    td_status_t status = td__op_check_pair("linear", x, w);

    if (status == TD_OK && bias != NULL) {
        status = td__op_check_pair("linear", x, bias);
    }
    if (status != TD_OK) {
        return status;
    }
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1] ||
        (bias != NULL && (bias->ndim != 1 || bias->shape[0] != w->shape[0]))) {
        return td_error(TD_ERR_SHAPE, "linear: input %s, weight %s, bias %s "
                        "do not fit (weight is [out, in])", TD_SHAPE_STR(x),
                        TD_SHAPE_STR(w), bias ? TD_SHAPE_STR(bias) : "none");
    }
    if (x->ndim != 2) {
        /* fold leading dims into rows; views keep autograd */
        int64_t s2[2] = {-1, x->shape[x->ndim - 1]};
        status = td_tensor_reshape(x, s2, 2, &x2);
        if (status == TD_OK) {
            status = td_linear(x2, w, bias, &r);
            td_tensor_release(x2);
        }
        if (status != TD_OK) {
            return status;
        }
        memcpy(shape, x->shape, sizeof(shape));
        shape[x->ndim - 1] = w->shape[0];
        status = td_tensor_reshape(r, shape, x->ndim, out_p);
        td_tensor_release(r);
        return status;
    }
    n_rows = x->shape[0];
    in = x->shape[1];
    nout = w->shape[0];
    status = td_tensor_contiguous(x, &x2);
    if (status != TD_OK) {
        return status;
    }
    shape[0] = n_rows;
    shape[1] = nout;
    status = td_tensor_empty(shape, 2, x->dtype, x->device, &out);
    if (status != TD_OK) {
        td_tensor_release(x2);
        return status;
    }
    kern = td__kernels_get(x->device);
    if (bias != NULL) {
        /* out = bias broadcast over rows, then gemm with beta = 1 */
        int64_t bst[2] = {0, bias->strides[0]};
        kern->copy(out->dtype, (td_operand_t){td_tensor_data(out), out->strides},
                   bias->dtype, (td_operand_t){td_tensor_data(bias), bst},
                   out->shape, 2);
    }
    if (!mat_layout(w, &tw, &ldw)) {
        td_tensor_t *wc;
        status = td_tensor_contiguous(w, &wc);
        if (status != TD_OK) {
            td_tensor_release(x2);
            td_tensor_release(out);
            return status;
        }
        td_tensor_release(x2);
        x2 = NULL;
        status = td_linear(x, wc, bias, out_p);
        td_tensor_release(wc);
        td_tensor_release(out);
        return status;
    }
    if (n_rows * nout > 0) {
        if (in > 0) {
            /* out[N, out] (+)= x[N, in] * w[out, in]^T: w read transposed */
            status = kern->gemm(x->dtype, 0, !tw, n_rows, nout, in, 1.0,
                                td_tensor_data(x2), in > 0 ? in : 1,
                                td_tensor_data(w), ldw,
                                bias != NULL ? 1.0 : 0.0,
                                td_tensor_data(out), nout);
            if (status != TD_OK) {
                td_tensor_release(x2);
                td_tensor_release(out);
                return status;
            }
        } else if (bias == NULL) {
            td_tensor_zero_(out);
        }
    }
    td_tensor_release(x2);
    if (td__op_needs_state(ins, 3)) {
        st = td__op_state_new();
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "linear: out of memory");
        }
        td_saved_init(&st->sv[0], x);
        td_saved_init(&st->sv[1], w);
    }
    return td__op_finish(&linear_ops, st, ins, 3, out, out_p);
}

/* ---- softmax ---------------------------------------------------------- */

/* softmax or log_softmax of A along DIM into a new tensor (no node) */
static td_status_t
softmax_raw(td_tensor_t *a, int dim, int log_out, td_tensor_t **out_p)
{
    int64_t outer, inner;
    td_tensor_t *xc, *out;
    td_status_t status = td_tensor_contiguous(a, &xc);

    if (status != TD_OK) {
        return status;
    }
    status = td_tensor_empty(a->shape, a->ndim, a->dtype, a->device, &out);
    if (status != TD_OK) {
        td_tensor_release(xc);
        return status;
    }
    td_op_around(a->shape, a->ndim, dim, &outer, &inner);
    td__kernels_get(a->device)->softmax(a->dtype, log_out, td_tensor_data(out),
                                       td_tensor_data(xc), outer,
                                       a->shape[dim], inner);
    td_tensor_release(xc);
    *out_p = out;
    return TD_OK;
}

/* First order: y = softmax(x), then one fused pass of the kernel. */
static td_status_t
softmax_backward_fused(td_tensor_t *x, td_tensor_t *g, int dim, int log_out,
                       td_tensor_t **out_p)
{
    int64_t outer, inner;
    td_tensor_t *y = NULL, *gc = NULL, *out = NULL;
    td_status_t status = softmax_raw(x, dim, 0, &y);

    if (status == TD_OK) {
        status = td_tensor_contiguous(g, &gc);
    }
    if (status == TD_OK) {
        status = td_tensor_empty(x->shape, x->ndim, x->dtype, x->device, &out);
    }
    if (status == TD_OK) {
        td_op_around(x->shape, x->ndim, dim, &outer, &inner);
        td__kernels_get(x->device)->softmax_backward(
            x->dtype, log_out, td_tensor_data(out), td_tensor_data(y),
            td_tensor_data(gc), outer, x->shape[dim], inner);
        *out_p = out;
    }
    td_tensor_release(y);
    td_tensor_release(gc);
    return status;
}

/* d softmax = y (g - sum(g y)), y = softmax(x) */
static td_status_t
softmax_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *g = gin[0], *a = NULL;
    td_tensor_t *t1 = NULL, *t2 = NULL, *t3 = NULL, *t4 = NULL;
    int dims[1] = {st->dim};
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &a));
    if (!td_grad_enabled()) {
        TD_OP_TRY(softmax_backward_fused(a, g, st->dim, 0, &gout[0]));
        goto out;
    }
    TD_OP_TRY(td_softmax(a, st->dim, &t1));
    TD_OP_TRY(td_mul(g, t1, &t2));
    TD_OP_TRY(td_sum_dims(t2, dims, 1, 1, &t3));
    TD_OP_TRY(td_sub(g, t3, &t4));
    TD_OP_TRY(td_mul(t1, t4, &gout[0]));
out:
    td_tensor_release(t1);
    td_tensor_release(t2);
    td_tensor_release(t3);
    td_tensor_release(t4);
    return td_op_backward_done(status, node, gout);
}

/* d log_softmax = g - softmax(x) sum(g) */
static td_status_t
log_softmax_backward(td_node_t *node, td_tensor_t *const *gin,
                     td_tensor_t **gout)
{
    td_op_state_t *st = td_node_state(node);
    td_tensor_t *g = gin[0], *a = NULL, *t1 = NULL, *t2 = NULL, *t3 = NULL;
    int dims[1] = {st->dim};
    td_status_t status;

    TD_OP_TRY(td_saved_unpack(&st->sv[0], node, &a));
    if (!td_grad_enabled()) {
        TD_OP_TRY(softmax_backward_fused(a, g, st->dim, 1, &gout[0]));
        goto out;
    }
    TD_OP_TRY(td_softmax(a, st->dim, &t1));
    TD_OP_TRY(td_sum_dims(g, dims, 1, 1, &t2));
    TD_OP_TRY(td_mul(t1, t2, &t3));
    TD_OP_TRY(td_sub(g, t3, &gout[0]));
out:
    td_tensor_release(t1);
    td_tensor_release(t2);
    td_tensor_release(t3);
    return td_op_backward_done(status, node, gout);
}

static const td_node_ops_t softmax_ops =
    TD_OP_NODE("SoftmaxBackward", softmax_backward);
static const td_node_ops_t log_softmax_ops =
    TD_OP_NODE("LogSoftmaxBackward", log_softmax_backward);

static td_status_t
softmax_impl(td_tensor_t *a, int dim, int log_out, td_tensor_t **out_p)
{
    const char *name = log_out ? "log_softmax" : "softmax";
    td_tensor_t *out;
    td_op_state_t *st = NULL;
    td_status_t status = td__op_check_float(name, a);

    if (status != TD_OK) {
        return status;
    }
    if (a->ndim == 0) {
        return td_error(TD_ERR_SHAPE, "%s: needs at least 1 dimension", name);
    }
    if (dim < 0) {
        dim += a->ndim;
    }
    if (dim < 0 || dim >= a->ndim) {
        return td_error(TD_ERR_RANGE, "%s: dim out of range for %s", name,
                        TD_SHAPE_STR(a));
    }
    status = softmax_raw(a, dim, log_out, &out);
    if (status != TD_OK) {
        return status;
    }
    if (td__op_needs_state(&a, 1)) {
        st = td__op_state_new();
        if (st == NULL) {
            td_tensor_release(out);
            return td_error(TD_ERR_NO_MEMORY, "%s: out of memory", name);
        }
        st->dim = dim;
        td_saved_init(&st->sv[0], a);
    }
    return td__op_finish(log_out ? &log_softmax_ops : &softmax_ops, st, &a, 1,
                        out, out_p);
}

td_status_t
td_softmax(td_tensor_t *a, int dim, td_tensor_t **out)
{
    return softmax_impl(a, dim, 0, out);
}

td_status_t
td_log_softmax(td_tensor_t *a, int dim, td_tensor_t **out)
{
    return softmax_impl(a, dim, 1, out);
}

/* ---- embeddings and dropout ------------------------------------------ */

td_status_t
td_embedding(td_tensor_t *weight, td_tensor_t *indices, td_tensor_t **out)
{
    int64_t flat[1] = {td_tensor_numel(indices)}, shape[TD_MAX_DIMS];
    td_tensor_t *fi, *rows;
    td_status_t status;

    if (weight->ndim != 2 || indices->ndim >= TD_MAX_DIMS) {
        return td_error(TD_ERR_SHAPE, "embedding: weight %s is not [V, D]",
                        TD_SHAPE_STR(weight));
    }
    status = td_tensor_reshape(indices, flat, 1, &fi);
    if (status != TD_OK) {
        return status;
    }
    status = td_index_select(weight, 0, fi, &rows);
    td_tensor_release(fi);
    if (status != TD_OK) {
        return status;
    }
    memcpy(shape, indices->shape, (size_t)indices->ndim * sizeof(int64_t));
    shape[indices->ndim] = weight->shape[1];
    status = td_tensor_reshape(rows, shape, indices->ndim + 1, out);
    td_tensor_release(rows);
    return status;
}

td_status_t
td_embedding_bag(td_tensor_t *weight, td_tensor_t *indices,
                 td_tensor_t *offsets, td_bag_mode_t mode, td_tensor_t **out)
{
    int64_t n = td_tensor_numel(indices), nb, shape[2], col[2];
    td_tensor_t *bag = NULL, *rows = NULL, *scale = NULL, *scaled = NULL;
    td_tensor_t *scale64 = NULL;
    const int64_t *off;
    int64_t bad;
    td_status_t status;

    if (weight->ndim != 2 || indices->ndim != 1 || offsets->ndim != 1 ||
        offsets->dtype != TD_INT64 || !td_tensor_is_contiguous(offsets)) {
        return td_error(TD_ERR_SHAPE, "embedding_bag: weight %s, indices %s, "
                        "offsets %s (need [V, D], [n], int64 [B])",
                        TD_SHAPE_STR(weight), TD_SHAPE_STR(indices),
                        TD_SHAPE_STR(offsets));
    }
    nb = offsets->shape[0];
    off = td_tensor_data(offsets);
    col[0] = n;
    col[1] = 1;
    status = td_tensor_empty(&n, 1, TD_INT64, TD_CPU, &bag);
    if (status == TD_OK) {
        status = td_tensor_empty(col, 2, TD_FLOAT64, TD_CPU, &scale64);
    }
    if (status != TD_OK) {
        goto out;
    }
    /* bag[j] = the bag of index j; scale[j] = 1 / |bag| for mean, in
     * double, converted once */
    bad = td__kernels_get(TD_CPU)->bag_plan(off, nb, n, mode == TD_BAG_MEAN,
                                           td_tensor_data(bag),
                                           td_tensor_data(scale64));
    if (bad >= 0) {
        status = td_error(TD_ERR_RANGE, "embedding_bag: offsets[%lld]=%lld "
                          "(must start at 0, not decrease, stay <= %lld)",
                          (long long)bad, (long long)off[bad], (long long)n);
        goto out;
    }
    status = td_tensor_empty(col, 2, weight->dtype, TD_CPU, &scale);
    if (status == TD_OK) {
        status = td_tensor_copy_(scale, scale64);
    }
    if (status != TD_OK) {
        goto out;
    }
    status = td_index_select(weight, 0, indices, &rows);
    if (status == TD_OK) {
        status = td_mul(rows, scale, &scaled);
    }
    if (status == TD_OK) {
        shape[0] = nb;
        shape[1] = weight->shape[1];
        status = td_index_add_new(shape, 2, 0, bag, scaled, out);
    }
out:
    td_tensor_release(scale64);
    td_tensor_release(bag);
    td_tensor_release(rows);
    td_tensor_release(scale);
    td_tensor_release(scaled);
    return status;
}

td_status_t
td_dropout(td_tensor_t *a, double p, int training, uint64_t seed,
           td_tensor_t **out)
{
    td_tensor_t *mask;
    td_status_t status;

    if (p < 0 || p > 1) {
        return td_error(TD_ERR_RANGE, "dropout: p=%g is outside [0, 1]", p);
    }
    if (!training || p == 0) {
        *out = td_tensor_retain(a);
        return TD_OK;
    }
    status = td__op_check_float("dropout", a);
    if (status == TD_OK) {
        status = td_tensor_empty(a->shape, a->ndim, a->dtype, a->device, &mask);
    }
    if (status != TD_OK) {
        return status;
    }
    /* mask = (u >= p) / (1 - p), u the uniform stream of SEED: the mask
     * depends on (seed, i) only, on every device */
    td__kernels_get(a->device)->dropout_mask(a->dtype, td_tensor_data(mask),
                                            td_tensor_numel(mask), p, seed);
    status = td_mul(a, mask, out);
    td_tensor_release(mask);
    return status;
}
