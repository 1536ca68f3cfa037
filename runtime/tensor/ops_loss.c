/* runtime/tensor/ops_loss.c: the losses (nll, cross-entropy, mse) as
 * compositions of the differentiable ops, so their backward is the
 * composed one and they need no kernel of their own. */
#include "config.h"

#include "runtime/tensor/ops_internal.h"
#include <todist/ops.h>

static td_status_t
reduce(td_tensor_t *t, td_reduction_t reduction, td_tensor_t **out)
{
    switch (reduction) {
    case TD_REDUCTION_MEAN: return td_mean(t, out);
    case TD_REDUCTION_SUM: return td_sum(t, out);
    case TD_REDUCTION_NONE: *out = td_tensor_retain(t); return TD_OK;
    }
    return td_error(TD_ERR_INVALID, "loss: reduction=%d is unknown", reduction);
}

/* nll = -input[i, target[i]], reduced */
td_status_t
td_nll_loss(td_tensor_t *input, td_tensor_t *target, td_reduction_t reduction,
            td_tensor_t **out)
{
    td_tensor_t *picked, *r;
    td_status_t status;

    if (input->ndim != 2 || target->ndim != 1 ||
        target->shape[0] != input->shape[0]) {
        return td_error(TD_ERR_SHAPE, "nll_loss: input %s and target %s (need "
                        "[N, C] and [N])", TD_SHAPE_STR(input),
                        TD_SHAPE_STR(target));
    }
    status = td_gather_dim(input, 1, target, &picked);
    if (status != TD_OK) {
        return status;
    }
    status = reduce(picked, reduction, &r);
    td_tensor_release(picked);
    if (status != TD_OK) {
        return status;
    }
    status = td_neg(r, out);
    td_tensor_release(r);
    return status;
}

td_status_t
td_cross_entropy(td_tensor_t *logits, td_tensor_t *target,
                 td_reduction_t reduction, td_tensor_t **out)
{
    td_tensor_t *lp;
    td_status_t status;

    if (logits->ndim != 2) {
        return td_error(TD_ERR_SHAPE, "cross_entropy: logits %s are not "
                        "[N, C]", TD_SHAPE_STR(logits));
    }
    status = td_log_softmax(logits, 1, &lp);
    if (status != TD_OK) {
        return status;
    }
    status = td_nll_loss(lp, target, reduction, out);
    td_tensor_release(lp);
    return status;
}

td_status_t
td_mse_loss(td_tensor_t *a, td_tensor_t *b, td_reduction_t reduction,
            td_tensor_t **out)
{
    td_tensor_t *d, *sq;
    td_status_t status;

    if (!td__shape_equal(a, b)) {
        return td_error(TD_ERR_SHAPE, "mse_loss: input %s and target %s "
                        "differ", TD_SHAPE_STR(a), TD_SHAPE_STR(b));
    }
    status = td_sub(a, b, &d);
    if (status != TD_OK) {
        return status;
    }
    status = td_mul(d, d, &sq);
    td_tensor_release(d);
    if (status != TD_OK) {
        return status;
    }
    status = reduce(sq, reduction, out);
    td_tensor_release(sq);
    return status;
}
