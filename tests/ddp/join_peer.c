/* join_peer.c: one rank of the Join test (tests/ddp/test_join.sh), over real
 * collectives and UCX. Run as `todist-run -n N join_peer`.
 *
 * Rank r holds B_r batches (3 and 10 at 2 ranks; 3, 10 and 7 at 3 ranks)
 * of a linear model's regression in float64, trained with DDP (two
 * buckets) and SGD with momentum inside a join context. Every rank must
 * finish (no hang), end with the same parameters, and those must equal a
 * reference computed on each rank without communication: at iteration t
 * the gradient is the sum of the gradients of the ranks with B_r > t,
 * divided by the group size (PyTorch's default) or, with
 * divide_by_initial_world_size = 0, by their number. A rank with no batch
 * at all is an error on every rank, not a hang. Each check is agreed over
 * the group; rank 0 prints "PASS name" or "FAIL name: detail". */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>
#include "tests/peer_agree.h"
#include <todist/join.h>

#define TOL 1e-10

static const int batches2[2] = {3, 10}, batches3[3] = {3, 10, 7};
static int rank, size;

static int
nbatches(int r)
{
    return size == 2 ? batches2[r] : batches3[r];
}

/* W [3, 4], b [3], the same on every rank */
static void
model_init(td_tensor_t **p)
{
    int64_t ws[2] = {3, 4}, bs[1] = {3};

    td_tensor_empty(ws, 2, TD_FLOAT64, TD_CPU, &p[0]);
    td_tensor_empty(bs, 1, TD_FLOAT64, TD_CPU, &p[1]);
    td_tensor_uniform_(p[0], -0.5, 0.5, 11);
    td_tensor_uniform_(p[1], -0.5, 0.5, 12);
    td_tensor_set_requires_grad(p[0], 1);
    td_tensor_set_requires_grad(p[1], 1);
}

/* mse(x W^T + b, y) on rank R's batch T */
static td_status_t
loss_of(td_tensor_t **p, int r, int t, td_tensor_t **loss)
{
    int64_t xs[2] = {5, 4}, ys[2] = {5, 3};
    td_tensor_t *x, *y, *o = NULL;
    td_status_t st;

    td_tensor_empty(xs, 2, TD_FLOAT64, TD_CPU, &x);
    td_tensor_empty(ys, 2, TD_FLOAT64, TD_CPU, &y);
    td_tensor_uniform_(x, -1, 1, 1000 + 97 * (uint64_t)r + (uint64_t)t);
    td_tensor_uniform_(y, -1, 1, 5000 + 89 * (uint64_t)r + (uint64_t)t);
    st = td_linear(x, p[0], p[1], &o);
    if (st == TD_OK) {
        st = td_mse_loss(o, y, TD_REDUCTION_MEAN, loss);
    }
    td_tensor_release(o);
    td_tensor_release(x);
    td_tensor_release(y);
    return st;
}

/* The reference: every rank's gradients computed locally. */
static void
reference(td_tensor_t **ref, int divide_by_initial)
{
    int maxb = 0;
    td_sgd_opts_t so = {.lr = 0.05, .momentum = 0.9};
    td_optim_t *opt;

    for (int r = 0; r < size; r++) {
        maxb = nbatches(r) > maxb ? nbatches(r) : maxb;
    }
    td_optim_sgd(ref, 2, &so, &opt);
    for (int t = 0; t < maxb; t++) {
        td_tensor_t *sum[2] = {NULL, NULL};
        int active = 0;

        for (int r = 0; r < size; r++) {
            td_tensor_t *loss, *g[2], *s;
            if (t >= nbatches(r)) {
                continue;
            }
            active++;
            loss_of(ref, r, t, &loss);
            td_grad(&loss, NULL, 1, ref, 2, 0, 0, 0, g);
            for (int i = 0; i < 2; i++) {
                if (sum[i] == NULL) {
                    sum[i] = g[i];
                } else {
                    td_add(sum[i], g[i], &s);
                    td_tensor_release(sum[i]);
                    td_tensor_release(g[i]);
                    sum[i] = s;
                }
            }
            td_tensor_release(loss);
        }
        for (int i = 0; i < 2; i++) {
            td_tensor_t *avg;
            td_mul_scalar(sum[i], 1.0 / (divide_by_initial ? size : active),
                          &avg);
            td_tensor_set_grad(ref[i], avg);
            td_tensor_release(avg);
            td_tensor_release(sum[i]);
        }
        td_optim_step(opt);
    }
    td_optim_free(opt);
}

static void
check_join(int divide_by_initial)
{
    td_tensor_t *p[2], *ref[2], *mx[2] = {NULL, NULL}, *mn[2] = {NULL, NULL};
    td_ddp_t *ddp = NULL;
    td_ddp_join_t *j = NULL;
    td_optim_t *opt = NULL;
    td_ddp_opts_t o = td_ddp_defaults();
    td_ddp_join_opts_t jo = {.divide_by_initial_world_size = divide_by_initial};
    td_sgd_opts_t so = {.lr = 0.05, .momentum = 0.9};
    td_status_t st;
    double d_ref = INFINITY, d_ranks = INFINITY;
    int last = -1, want_last = 0;
    char name[96];

    model_init(p);
    model_init(ref);
    o.first_bucket_bytes = 64;    /* W (96 B) and b: two buckets */
    o.bucket_cap_bytes = 64;
    st = td_ddp_create(p, 2, &o, &ddp);
    if (st == TD_OK) {
        st = td_optim_sgd(p, 2, &so, &opt);
    }
    if (st == TD_OK) {
        st = td_ddp_join_begin(ddp, &jo, &j);
    }
    for (int t = 0; st == TD_OK && t < nbatches(rank); t++) {
        td_tensor_t *loss = NULL;
        st = td_ddp_join_step(j);
        if (st == TD_OK) {
            st = loss_of(p, rank, t, &loss);
        }
        if (st == TD_OK) {
            st = td_ddp_backward(ddp, loss);
        }
        if (st == TD_OK) {
            st = td_ddp_join_wait(j);
        }
        if (st == TD_OK) {
            st = td_optim_step(opt);
        }
        if (st == TD_OK) {
            st = td_optim_zero_grad(opt);
        }
        td_tensor_release(loss);
    }
    if (st == TD_OK) {
        st = td_ddp_join_end(j);
    }
    if (st == TD_OK) {
        last = td_ddp_join_last_joiner(j);
        for (int r = 0; r < size; r++) {
            want_last = nbatches(r) > nbatches(want_last) ? r : want_last;
        }
        reference(ref, divide_by_initial);
        d_ref = fmax(maxdiff(p[0], ref[0]), maxdiff(p[1], ref[1]));
        /* equal on all ranks: the group's max and min agree */
        d_ranks = 0;
        for (int i = 0; i < 2; i++) {
            td_tensor_clone(p[i], &mx[i]);
            td_tensor_clone(p[i], &mn[i]);
            if (td_all_reduce(td_group_world(), mx[i], TD_REDUCE_MAX) != TD_OK ||
                td_all_reduce(td_group_world(), mn[i], TD_REDUCE_MIN) != TD_OK) {
                d_ranks = INFINITY;
            } else {
                d_ranks = fmax(d_ranks, maxdiff(mx[i], mn[i]));
            }
        }
    }
    snprintf(detail, sizeof(detail), "rank %d (%d batches): %s; vs reference "
             "%.3g, across ranks %.3g, last joiner %d (want %d)", rank,
             nbatches(rank), st == TD_OK ? "ok" : td_last_error(), d_ref,
             d_ranks, last, want_last);
    snprintf(name, sizeof(name), "uneven_inputs_finish_%s",
             divide_by_initial ? "divide_by_initial_world_size"
                               : "divide_by_active_ranks");
    agree(st == TD_OK, name);
    snprintf(name, sizeof(name), "final_parameters_equal_on_all_ranks_%s",
             divide_by_initial ? "initial" : "active");
    agree(st == TD_OK && d_ranks == 0 && last == want_last, name);
    snprintf(name, sizeof(name), "final_parameters_equal_reference_%s",
             divide_by_initial ? "initial" : "active");
    agree(st == TD_OK && d_ref < TOL, name);
    for (int i = 0; i < 2; i++) {
        td_tensor_release(mx[i]);
        td_tensor_release(mn[i]);
    }
    td_ddp_join_destroy(j);
    td_optim_free(opt);
    td_ddp_destroy(ddp);
    for (int i = 0; i < 2; i++) {
        td_tensor_release(p[i]);
        td_tensor_release(ref[i]);
    }
}

/* The last rank holds no batch: its join count says so and every rank's
 * join call fails with TD_ERR_UNSUPPORTED instead of hanging. */
static void
check_no_batch(void)
{
    td_tensor_t *p[2], *loss = NULL;
    td_ddp_t *ddp = NULL;
    td_ddp_join_t *j = NULL;
    td_status_t st;
    int mine = rank == size - 1 ? 0 : 2;

    model_init(p);
    st = td_ddp_create(p, 2, NULL, &ddp);
    if (st == TD_OK) {
        st = td_ddp_join_begin(ddp, NULL, &j);
    }
    for (int t = 0; st == TD_OK && t < mine; t++) {
        st = td_ddp_join_step(j);
        if (st == TD_OK) {
            st = loss_of(p, rank, t, &loss);
            td_tensor_release(loss);
        }
    }
    if (st == TD_OK) {
        st = td_ddp_join_end(j);
    }
    snprintf(detail, sizeof(detail), "rank %d: status %d: %s", rank, (int)st,
             st == TD_OK ? "" : td_last_error());
    agree(st == TD_ERR_UNSUPPORTED &&
          strstr(td_last_error(), "before their first iteration") != NULL,
          "rank_without_batches_is_an_error_on_every_rank");
    td_ddp_join_destroy(j);
    td_ddp_destroy(ddp);
    td_tensor_release(p[0]);
    td_tensor_release(p[1]);
}

int
main(void)
{
    td_status_t st = td_init(NULL);

    if (st != TD_OK) {
        fprintf(stderr, "join_peer: td_init: %s\n", td_last_error());
        return 1;
    }
    rank = td_world()->rank;
    size = td_world()->world_size;
    if (size < 2 || size > 3) {
        fprintf(stderr, "join_peer: 2 or 3 ranks (got %d)\n", size);
        td_finalize();
        return 1;
    }
    check_join(1);
    check_join(0);
    check_no_batch();
    st = td_finalize();
    if (st != TD_OK) {
        fprintf(stderr, "join_peer: td_finalize: %s\n", td_last_error());
        return 1;
    }
    return 0;
}
