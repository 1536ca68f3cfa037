/* syncbn_peer.c: one rank of the SyncBatchNorm test (tests/ddp/test_syncbn.sh),
 * over real collectives and UCX. Run as `todist-run -n N syncbn_peer`.
 *
 * Rank r holds rows [off_r, off_r + n_r) of a fixed float64 batch X with
 * uneven n_r (5, 2, 7); every rank also computes the reference: single-
 * process td_batch_norm over the whole X, loss sum(y * L) for fixed L.
 * SyncBatchNorm's output and input gradient must equal the reference's
 * rows, the group sum of its weight and bias gradients the reference's,
 * its running statistics the reference's (two train steps), and the eval
 * step its output, all within 1e-10. Each check is agreed over the group;
 * rank 0 prints "PASS name" or "FAIL name: detail". */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>
#include "tests/peer_agree.h"
#include <todist/syncbn.h>

#define C   4
#define TOL 1e-10

static const int64_t rows[3] = {5, 2, 7};
static int rank, size;

static td_tensor_t *
rand_t(int64_t r, int64_t c, double scale, uint64_t seed)
{
    int64_t shape[2] = {r, c};
    td_tensor_t *t, *s;

    td_tensor_empty(shape, c ? 2 : 1, TD_FLOAT64, TD_CPU, &t);
    td_tensor_normal_(t, 1.0, scale, seed);
    td_tensor_clone(t, &s);
    td_tensor_release(t);
    return s;
}

/* rows [off, off + n) of T as a new leaf */
static td_tensor_t *
rows_of(td_tensor_t *t, int64_t off, int64_t n, int leaf)
{
    td_tensor_t *v, *c;

    td_tensor_narrow(t, 0, off, n, &v);
    td_tensor_clone(v, &c);
    td_tensor_release(v);
    if (leaf) {
        td_tensor_set_requires_grad(c, 1);
    }
    return c;
}

/* loss = sum(y * l); grads of (x, weight, bias) into G */
static td_status_t
step(td_tensor_t *y, td_tensor_t *l, td_tensor_t **ins, td_tensor_t **g)
{
    td_tensor_t *p = NULL, *s = NULL;
    td_status_t st = td_mul(y, l, &p);

    if (st == TD_OK) {
        st = td_sum(p, &s);
    }
    if (st == TD_OK) {
        st = td_grad(&s, NULL, 1, ins, 3, 0, 0, 0, g);
    }
    td_tensor_release(p);
    td_tensor_release(s);
    return st;
}

static void
check_syncbn(void)
{
    int64_t ntot = 0, off = 0, n = rows[rank];
    td_batchnorm1d_t ref = {0}, bn = {0};
    double e_out = 0, e_gx = 0, e_gwb = 0, e_run = 0, e_eval = 0;
    int ok = 1;

    for (int r = 0; r < size; r++) {
        off += r < rank ? rows[r] : 0;
        ntot += rows[r];
    }
    if (td_batchnorm1d_init(&ref, C, TD_FLOAT64) != TD_OK ||
        td_batchnorm1d_init(&bn, C, TD_FLOAT64) != TD_OK) {
        snprintf(detail, sizeof(detail), "init: %s", td_last_error());
        ok = 0;
    }
    td_tensor_uniform_(ref.weight, 0.5, 1.5, 3);
    td_tensor_uniform_(ref.bias, -0.5, 0.5, 4);
    td_tensor_copy_(bn.weight, ref.weight);
    td_tensor_copy_(bn.bias, ref.bias);
    for (int it = 0; it < 3 && ok; it++) {
        td_tensor_t *X = rand_t(ntot, C, 2.0, 100 + it);
        td_tensor_t *L = rand_t(ntot, C, 1.0, 200 + it);
        td_tensor_t *xf = rows_of(X, 0, ntot, 1), *x = rows_of(X, off, n, 1);
        td_tensor_t *l = rows_of(L, off, n, 0);
        td_tensor_t *yf = NULL, *y = NULL, *gf[3] = {0}, *g[3] = {0};
        td_tensor_t *insf[3] = {xf, ref.weight, ref.bias};
        td_tensor_t *ins[3] = {x, bn.weight, bn.bias};
        td_tensor_t *yrows = NULL, *gxrows = NULL;

        ref.training = bn.training = it < 2;
        if (td_batchnorm1d_forward(&ref, xf, &yf) != TD_OK ||
            step(yf, L, insf, gf) != TD_OK) {
            snprintf(detail, sizeof(detail), "reference step %d: %s", it,
                     td_last_error());
            ok = 0;
        } else if (td_syncbn_forward(&bn, NULL, x, &y) != TD_OK ||
                   step(y, l, ins, g) != TD_OK) {
            snprintf(detail, sizeof(detail), "syncbn step %d on rank %d "
                     "(%lld rows): %s", it, rank, (long long)n,
                     td_last_error());
            ok = 0;
        } else {
            td_tensor_narrow(yf, 0, off, n, &yrows);
            td_tensor_narrow(gf[0], 0, off, n, &gxrows);
            if (it < 2) {
                e_out = fmax(e_out, maxdiff(y, yrows));
                e_gx = fmax(e_gx, maxdiff(g[0], gxrows));
                for (int i = 1; i < 3; i++) {
                    if (td_all_reduce(td_group_world(), g[i],
                                      TD_REDUCE_SUM) != TD_OK) {
                        e_gwb = INFINITY;
                    }
                    e_gwb = fmax(e_gwb, maxdiff(g[i], gf[i]));
                }
                e_run = fmax(e_run, maxdiff(bn.running_mean,
                                            ref.running_mean));
                e_run = fmax(e_run, maxdiff(bn.running_var, ref.running_var));
            } else {
                e_eval = fmax(e_eval, maxdiff(y, yrows));
                e_eval = fmax(e_eval, maxdiff(g[0], gxrows));
            }
        }
        for (int i = 0; i < 3; i++) {
            td_tensor_release(gf[i]);
            td_tensor_release(g[i]);
        }
        td_tensor_release(yrows);
        td_tensor_release(gxrows);
        td_tensor_release(yf);
        td_tensor_release(y);
        td_tensor_release(X);
        td_tensor_release(L);
        td_tensor_release(xf);
        td_tensor_release(x);
        td_tensor_release(l);
    }
    if (ok) {
        snprintf(detail, sizeof(detail), "rank %d (%lld of %lld rows): out "
                 "%.3g gx %.3g gw/gb %.3g running %.3g eval %.3g", rank,
                 (long long)n, (long long)ntot, e_out, e_gx, e_gwb, e_run,
                 e_eval);
    }
    agree(ok && e_out < TOL, "forward_equals_batchnorm_over_concatenated_batch");
    agree(ok && e_gx < TOL, "input_gradient_equals_concatenated_rows");
    agree(ok && e_gwb < TOL, "weight_bias_gradients_sum_to_concatenated");
    agree(ok && e_run < TOL, "running_statistics_equal_concatenated");
    agree(ok && e_eval < TOL, "eval_mode_uses_running_statistics");
    agree(ok && ref.num_batches_tracked == 2 && bn.num_batches_tracked == 2,
          "num_batches_tracked_counts_train_steps");
    td_batchnorm1d_destroy(&ref);
    td_batchnorm1d_destroy(&bn);
}

/* A group with one row in total cannot normalise: every rank gets the
 * error (the count is reduced first), nobody hangs. */
static void
check_too_few_rows(void)
{
    int64_t shape[2] = {rank == 0 ? 1 : 0, C};
    td_tensor_t *x, *y = NULL;
    td_status_t st;

    td_tensor_zeros(shape, 2, TD_FLOAT64, &x);
    st = td_sync_batch_norm(NULL, x, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5,
                            &y);
    snprintf(detail, sizeof(detail), "rank %d: status %d: %s", rank, (int)st,
             st == TD_OK ? "" : td_last_error());
    agree(st == TD_ERR_SHAPE && strstr(td_last_error(), "1 rows") != NULL,
          "one_row_in_the_group_is_an_error_on_every_rank");
    td_tensor_release(y);
    td_tensor_release(x);
}

/* SyncBatchNorm inside a DDP model: linear (W) -> SyncBatchNorm -> loss.
 * The backward runs SyncBN's all_reduce between DDP's bucket all_reduces
 * on the same group; after td_ddp_wait, size x the averaged gradients
 * must equal the single-process gradients over the concatenated batch. */
static void
check_with_ddp(void)
{
    int64_t ntot = 0, off = 0, n = rows[rank], ws[2] = {C, 3};
    td_batchnorm1d_t bn = {0}, rbn = {0};
    td_tensor_t *W = NULL, *rW = NULL, *X, *L, *x, *l, *xf;
    td_tensor_t *h = NULL, *y = NULL, *rh = NULL, *ry = NULL, *loss = NULL;
    td_tensor_t *p = NULL, *rp = NULL, *rl = NULL, *rg[3] = {0};
    td_ddp_t *ddp = NULL;
    td_ddp_opts_t o = td_ddp_defaults();
    double e = INFINITY;
    td_status_t st;

    for (int r = 0; r < size; r++) {
        off += r < rank ? rows[r] : 0;
        ntot += rows[r];
    }
    td_batchnorm1d_init(&bn, C, TD_FLOAT64);
    td_batchnorm1d_init(&rbn, C, TD_FLOAT64);
    td_tensor_empty(ws, 2, TD_FLOAT64, TD_CPU, &W);
    td_tensor_uniform_(W, -1, 1, 9);
    td_tensor_clone(W, &rW);
    td_tensor_set_requires_grad(W, 1);
    td_tensor_set_requires_grad(rW, 1);
    X = rand_t(ntot, 3, 1.5, 300);
    L = rand_t(ntot, C, 1.0, 301);
    x = rows_of(X, off, n, 0);
    l = rows_of(L, off, n, 0);
    xf = rows_of(X, 0, ntot, 0);
    td_tensor_t *params[3] = {W, bn.weight, bn.bias};
    td_tensor_t *rparams[3] = {rW, rbn.weight, rbn.bias};
    o.first_bucket_bytes = 8;     /* one bucket per parameter */
    o.bucket_cap_bytes = 8;
    st = td_ddp_create(params, 3, &o, &ddp);
    if (st == TD_OK) {
        st = td_linear(x, W, NULL, &h);
    }
    if (st == TD_OK) {
        st = td_syncbn_forward(&bn, NULL, h, &y);
    }
    if (st == TD_OK) {
        st = td_mul(y, l, &p);
    }
    if (st == TD_OK) {
        st = td_sum(p, &loss);
    }
    if (st == TD_OK) {
        st = td_ddp_backward(ddp, loss);
    }
    if (st == TD_OK) {
        st = td_ddp_wait(ddp);
    }
    if (st == TD_OK &&
        (td_linear(xf, rW, NULL, &rh) != TD_OK ||
         td_batchnorm1d_forward(&rbn, rh, &ry) != TD_OK ||
         td_mul(ry, L, &rp) != TD_OK || td_sum(rp, &rl) != TD_OK ||
         td_grad(&rl, NULL, 1, rparams, 3, 0, 0, 0, rg) != TD_OK)) {
        st = TD_ERR_STATE;
    }
    if (st == TD_OK) {
        e = 0;
        for (int i = 0; i < 3; i++) {
            td_tensor_t *scaled = NULL;
            td_mul_scalar(td_tensor_grad(params[i]), (double)size, &scaled);
            e = fmax(e, maxdiff(scaled, rg[i]));
            td_tensor_release(scaled);
        }
    }
    snprintf(detail, sizeof(detail), "rank %d: %s; size x DDP gradients vs "
             "concatenated batch %.3g", rank,
             st == TD_OK ? "ok" : td_last_error(), e);
    agree(st == TD_OK && e < TOL, "syncbn_inside_ddp_gradients_match");
    for (int i = 0; i < 3; i++) {
        td_tensor_release(rg[i]);
    }
    td_ddp_destroy(ddp);
    td_tensor_release(h);
    td_tensor_release(y);
    td_tensor_release(p);
    td_tensor_release(loss);
    td_tensor_release(rh);
    td_tensor_release(ry);
    td_tensor_release(rp);
    td_tensor_release(rl);
    td_tensor_release(X);
    td_tensor_release(L);
    td_tensor_release(x);
    td_tensor_release(l);
    td_tensor_release(xf);
    td_tensor_release(W);
    td_tensor_release(rW);
    td_batchnorm1d_destroy(&bn);
    td_batchnorm1d_destroy(&rbn);
}

int
main(void)
{
    td_status_t st = td_init(NULL);

    if (st != TD_OK) {
        fprintf(stderr, "syncbn_peer: td_init: %s\n", td_last_error());
        return 1;
    }
    rank = td_world()->rank;
    size = td_world()->world_size;
    if (size > 3) {
        fprintf(stderr, "syncbn_peer: at most 3 ranks (got %d)\n", size);
        td_finalize();
        return 1;
    }
    check_syncbn();
    check_too_few_rows();
    check_with_ddp();
    st = td_finalize();
    if (st != TD_OK) {
        fprintf(stderr, "syncbn_peer: td_finalize: %s\n", td_last_error());
        return 1;
    }
    return 0;
}
