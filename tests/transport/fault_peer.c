/* fault_peer.c: one rank of the fault-injection tests (tests/transport/test_faults.sh)
 * that prove "never a wrong result reported as success" under TODIST_FAULT.
 * Run as `todist-run -n 3 fault_peer MODE` with faults on; every outcome
 * is printed as one line the test reads:
 *
 *   OK <what>                 the call succeeded with exactly the reference
 *   ERROR <what>: <message>   the call failed with a non-empty message
 *   WRONG <what>: <detail>    it succeeded with a wrong value, failed
 *                             without a message, or ran past its bound
 *
 * Modes:
 *   coll      every rank: all_reduce, broadcast, all_gather and a ring of
 *             isend/irecv at 1, 1000 and 40000 elements (the last above the
 *             64 KiB ring and single-copy thresholds), in a fresh group per
 *             round (a failed operation breaks its group for good);
 *   backward  rank 0: a distributed backward across ranks 1 and 2 whose
 *             leaves live on rank 0, checked against the exact gradients;
 *   optim     rank 0: backward plus a distributed SGD step on parameters
 *             owned by ranks 1 and 2, read back after every step.
 * Values are small dyadic rationals, so every reference is exact and
 * compared bit for bit. Every rank ends with
 *   "rank R: td_finalize ended in S s: ok|<error>". */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <todist/todist.h>

static int rank, size;
static double bound_s;          /* an operation's timeout plus a margin */

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Print the outcome of one call that took TOOK seconds and ended in ST
 * with the message ERR; 1 when it was a success. */
static int
outcome_msg(td_status_t st, int right, double took, const char *err,
            const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int
outcome_msg(td_status_t st, int right, double took, const char *err,
            const char *fmt, ...)
{
    char what[160];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (took > bound_s) {
        printf("WRONG %s: ended after %.1f s, past its bound of %.1f s\n",
               what, took, bound_s);
    } else if (st == TD_OK && right) {
        printf("OK %s\n", what);
    } else if (st == TD_OK) {
        printf("WRONG %s: success with a wrong value\n", what);
    } else if (err[0] == '\0') {
        printf("WRONG %s: status %d without a message\n", what, st);
    } else {
        printf("ERROR %s: %s\n", what, err);
    }
    fflush(stdout);
    return st == TD_OK && right;
}

/* The start of a call: no earlier message may pass for its own. */
static double
start(void)
{
    td_error_clear();
    return now_s();
}

#define outcome(st, right, t0, ...) \
    outcome_msg(st, right, now_s() - (t0), td_last_error(), __VA_ARGS__)

static td_tensor_t *
vec(td_dtype_t dt, int64_t n)
{
    td_tensor_t *t = NULL;

    if (td_tensor_zeros(&n, 1, dt, &t) != TD_OK) {
        fprintf(stderr, "rank %d: tensor of %" PRId64 ": %s\n", rank, n,
                td_last_error());
        exit(2);
    }
    return t;
}

/* ---- collectives --------------------------------------------------------- */

/* What rank R contributes at element I of round K: a small integer, so
 * sums are exact in float32. */
static float
val(int r, int64_t i, int k)
{
    return (float)((r + 1) * 3 + (i % 97) + k % 5);
}

static void
mode_coll(int rounds)
{
    static const int64_t sizes[] = { 1, 1000, 40000 };
    int n_ok = 0, n_err = 0;

    for (int k = 0; k < rounds; k++) {
        int *ranks = malloc(sizeof(int) * (size_t)size);
        td_group_t *g = NULL;

        for (int i = 0; i < size; i++) {
            ranks[i] = i;
        }
        if (td_group_new(ranks, size, &g) != TD_OK) {
            fprintf(stderr, "rank %d: td_group_new: %s\n", rank,
                    td_last_error());
            exit(2);
        }
        free(ranks);
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            int64_t n = sizes[s];
            td_tensor_t *t = vec(TD_FLOAT32, n), *in = vec(TD_FLOAT32, n);
            td_tensor_t *out = vec(TD_FLOAT32, n * size);
            float *p = td_tensor_data(t), *q = td_tensor_data(out);
            int right, root = k % size;
            double t0;
            td_status_t st;

            /* all_reduce(sum) */
            for (int64_t i = 0; i < n; i++) {
                p[i] = val(rank, i, k);
            }
            t0 = start();
            st = td_all_reduce(g, t, TD_REDUCE_SUM);
            right = 1;
            for (int64_t i = 0; i < n && right; i++) {
                float want = 0;
                for (int r = 0; r < size; r++) {
                    want += val(r, i, k);
                }
                right = p[i] == want;
            }
            if (outcome(st, right, t0, "coll rank %d round %d all_reduce "
                        "n=%" PRId64, rank, k, n)) n_ok++; else n_err++;

            /* broadcast from ROOT */
            for (int64_t i = 0; i < n; i++) {
                p[i] = rank == root ? val(root, i, k) : -1.0f;
            }
            t0 = start();
            st = td_broadcast(g, t, root);
            right = 1;
            for (int64_t i = 0; i < n && right; i++) {
                right = p[i] == val(root, i, k);
            }
            if (outcome(st, right, t0, "coll rank %d round %d broadcast "
                        "n=%" PRId64, rank, k, n)) n_ok++; else n_err++;

            /* all_gather */
            float *pi = td_tensor_data(in);
            for (int64_t i = 0; i < n; i++) {
                pi[i] = val(rank, i, k);
            }
            for (int64_t i = 0; i < n * size; i++) {
                q[i] = -1.0f;
            }
            t0 = start();
            st = td_all_gather(g, out, in);
            right = 1;
            for (int64_t i = 0; i < n * size && right; i++) {
                right = q[i] == val((int)(i / n), i % n, k);
            }
            if (outcome(st, right, t0, "coll rank %d round %d all_gather "
                        "n=%" PRId64, rank, k, n)) n_ok++; else n_err++;

            /* a ring of point-to-point messages: to rank+1, from rank-1 */
            td_work_t *ws = NULL, *wr = NULL;
            td_status_t ss, sr;
            int from = (rank + size - 1) % size;
            for (int64_t i = 0; i < n; i++) {
                p[i] = -1.0f;
            }
            t0 = start();
            /* each call's own message, taken as soon as it fails */
            char smsg[512] = "", rmsg[512] = "";
            ss = td_isend(g, in, (rank + 1) % size, k, &ws);
            snprintf(smsg, sizeof(smsg), "%s", td_last_error());
            td_error_clear();
            sr = td_irecv(g, t, from, k, &wr);
            if (sr == TD_OK) {
                sr = td_work_wait(wr, -1);
            }
            snprintf(rmsg, sizeof(rmsg), "%s", td_last_error());
            if (ss == TD_OK) {
                td_error_clear();
                ss = td_work_wait(ws, -1);
                snprintf(smsg, sizeof(smsg), "%s", td_last_error());
            }
            td_work_release(ws);
            td_work_release(wr);
            right = 1;
            for (int64_t i = 0; i < n && right; i++) {
                right = p[i] == val(from, i, k);
            }
            /* the receive decides the value; the send must end too */
            if (outcome_msg(sr, right, now_s() - t0, rmsg, "coll rank %d round %d "
                            "recv n=%" PRId64, rank, k, n)) n_ok++; else n_err++;
            if (outcome_msg(ss, 1, now_s() - t0, smsg, "coll rank %d round %d send "
                            "n=%" PRId64, rank, k, n)) n_ok++; else n_err++;

            td_tensor_release(t);
            td_tensor_release(in);
            td_tensor_release(out);
        }
        td_group_destroy(g);
    }
    printf("rank %d: coll: %d ok, %d failed\n", rank, n_ok, n_err);
}

/* ---- distributed backward ------------------------------------------------ */

/* mul(a, b) -> a * b, recorded by distributed autograd inside a context */
static td_status_t
fn_mul(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *a,
       td_rpc_list_t *result)
{
    td_tensor_t *x = NULL, *y = NULL, *out = NULL;
    td_status_t st;

    (void)arg;
    (void)info;
    if (td_rpc_list_tensor(a, 0, &x) != TD_OK ||
        td_rpc_list_tensor(a, 1, &y) != TD_OK) {
        return td_error(TD_ERR_INVALID, "mul: needs two tensors");
    }
    st = td_mul(x, y, &out);
    if (st == TD_OK) {
        st = td_rpc_list_add_tensor(result, out);
    }
    td_tensor_release(out);
    return st;
}

/* rpc_sync(DST, "mul", A, B) into *OUT (a new reference). */
static td_status_t
rmul(int dst, td_tensor_t *a, td_tensor_t *b, td_tensor_t **out)
{
    td_rpc_list_t *args = NULL, *res = NULL;
    td_tensor_t *t = NULL;
    td_status_t st;

    *out = NULL;
    st = td_rpc_list_create(&args);
    if (st == TD_OK) {
        st = td_rpc_list_add_tensor(args, a);
    }
    if (st == TD_OK) {
        st = td_rpc_list_add_tensor(args, b);
    }
    if (st == TD_OK) {
        st = td_rpc_sync(dst, "mul", args, TD_RPC_DEFAULT_TIMEOUT, &res);
    }
    if (st == TD_OK) {
        st = td_rpc_list_tensor(res, 0, &t);
    }
    if (st == TD_OK) {
        *out = td_tensor_retain(t);
    }
    td_rpc_list_free(args);
    td_rpc_list_free(res);
    return st;
}

static td_tensor_t *
leaf(int64_t n, int k, int which)
{
    td_tensor_t *t = vec(TD_FLOAT64, n);
    double *p = td_tensor_data(t);

    for (int64_t i = 0; i < n; i++) {
        /* quarters in [-2, 2] */
        p[i] = (double)((int)((i * 7 + k * 3 + which * 5) % 17) - 8) / 4.0;
    }
    td_tensor_set_requires_grad(t, 1);
    return t;
}

/* 1 when the context's gradient of LEAF is exactly WANT[0..n-1]. */
static int
grad_is(int64_t ctx, td_tensor_t *leaf_t, const double *want, int64_t n)
{
    td_tensor_t *g = NULL;
    int right;

    if (td_dist_get_gradient(ctx, leaf_t, &g) != TD_OK ||
        td_tensor_numel(g) != n || td_tensor_dtype(g) != TD_FLOAT64) {
        td_tensor_release(g);
        return 0;
    }
    right = memcmp(td_tensor_data(g), want, sizeof(double) * (size_t)n) == 0;
    td_tensor_release(g);
    return right;
}

/* loss = sum(mul@2(mul@1(a, b), a)) + sum(mul@2(b, b)):
 * d/da = 2ab, d/db = a^2 + 2b, exact for quarters. */
static void
mode_backward(int iters)
{
    const int64_t n = 16;
    int n_ok = 0, n_err = 0;

    for (int k = 0; k < iters; k++) {
        td_tensor_t *a = leaf(n, k, 0), *b = leaf(n, k, 1);
        td_tensor_t *r1 = NULL, *r2 = NULL, *r3 = NULL;
        td_tensor_t *s2 = NULL, *s3 = NULL, *loss = NULL;
        double ga[16], gb[16];
        const double *pa = td_tensor_data(a), *pb = td_tensor_data(b);
        int64_t ctx;
        int right = 0;
        double t0 = start();
        td_status_t st;

        td_dist_autograd_begin(&ctx);
        st = rmul(1, a, b, &r1);
        if (st == TD_OK) {
            st = rmul(2, r1, a, &r2);
        }
        if (st == TD_OK) {
            st = rmul(2, b, b, &r3);
        }
        if (st == TD_OK && (st = td_sum(r2, &s2)) == TD_OK &&
            (st = td_sum(r3, &s3)) == TD_OK) {
            st = td_add(s2, s3, &loss);
        }
        if (st == TD_OK) {
            st = td_dist_backward(ctx, &loss, 1, 0);
        }
        if (st == TD_OK) {
            for (int64_t i = 0; i < n; i++) {
                ga[i] = 2 * pa[i] * pb[i];
                gb[i] = pa[i] * pa[i] + 2 * pb[i];
            }
            right = grad_is(ctx, a, ga, n) && grad_is(ctx, b, gb, n);
        }
        if (outcome(st, right, t0, "backward %d", k)) n_ok++; else n_err++;
        td_dist_autograd_end(ctx);
        td_tensor_release(loss);
        td_tensor_release(s3);
        td_tensor_release(s2);
        td_tensor_release(r3);
        td_tensor_release(r2);
        td_tensor_release(r1);
        td_tensor_release(b);
        td_tensor_release(a);
    }
    printf("backward: %d ok, %d failed\n", n_ok, n_err);
}

/* ---- the distributed optimizer ------------------------------------------- */

#define NPAR 8

/* make_param(INT which) -> a float64 leaf of NPAR quarters */
static td_status_t
fn_make_param(void *arg, const td_rpc_call_info_t *info,
              const td_rpc_list_t *a, td_rpc_list_t *result)
{
    int64_t which = 0;
    td_tensor_t *t;
    td_status_t st;

    (void)arg;
    (void)info;
    if (td_rpc_list_int(a, 0, &which) != TD_OK) {
        return td_error(TD_ERR_INVALID, "make_param: needs an int");
    }
    t = leaf(NPAR, 0, (int)which);
    st = td_rpc_list_add_tensor(result, t);
    td_tensor_release(t);
    return st;
}

/* The owner's current value of REF into VAL (outside any context); retried,
 * as fetches are subject to the faults too. 0 on success. */
static int
peek(td_rref_t *ref, double *val)
{
    for (int tries = 0; tries < 20; tries++) {
        td_rpc_list_t *v = NULL;
        td_tensor_t *t = NULL;
        int got = 0;

        if (td_rref_to_here(ref, TD_RPC_DEFAULT_TIMEOUT, &v) == TD_OK &&
            td_rpc_list_tensor(v, 0, &t) == TD_OK &&
            td_tensor_numel(t) == NPAR) {
            memcpy(val, td_tensor_data(t), sizeof(double) * NPAR);
            got = 1;
        }
        td_rpc_list_free(v);
        if (got) {
            return 0;
        }
    }
    return -1;
}

/* x_k for parameter J at step K: the gradient of sum(w * x) is x */
static double
xval(int j, int64_t i, int k)
{
    return (double)((int)((i * 5 + j * 3 + k) % 9) - 4) / 2.0;
}

static void
mode_optim(int iters)
{
    const double lr = 0.25;
    td_rref_t *w[2] = { NULL, NULL };
    td_dist_optimizer_t *opt = NULL;
    td_sgd_opts_t sgd = { .lr = lr };
    double cur[2][NPAR];
    int n_ok = 0, n_err = 0;

    for (int j = 0; j < 2; j++) {
        td_rpc_list_t *args = NULL;

        td_rpc_list_create(&args);
        td_rpc_list_add_int(args, j);
        for (int tries = 0; w[j] == NULL && tries < 20; tries++) {
            if (td_remote(1 + j, "make_param", args, TD_RPC_DEFAULT_TIMEOUT,
                          &w[j]) != TD_OK) {
                w[j] = NULL;
            }
        }
        td_rpc_list_free(args);
        if (w[j] == NULL || peek(w[j], cur[j]) != 0) {
            printf("SETUP FAILED: parameter %d: %s\n", j, td_last_error());
            return;
        }
    }
    for (int tries = 0; opt == NULL && tries < 20; tries++) {
        if (td_dist_optimizer_sgd(w, 2, &sgd, &opt) != TD_OK) {
            opt = NULL;
        }
    }
    if (opt == NULL) {
        printf("SETUP FAILED: optimizer: %s\n", td_last_error());
        return;
    }
    for (int k = 0; k < iters; k++) {
        td_tensor_t *loss = NULL, *parts[2] = { NULL, NULL };
        double after[2][NPAR], want[2][NPAR];
        int64_t ctx;
        int stepped = 0, right = 1;
        double t0 = start();
        td_status_t st = TD_OK;

        td_dist_autograd_begin(&ctx);
        for (int j = 0; j < 2 && st == TD_OK; j++) {
            td_rpc_list_t *v = NULL;
            td_tensor_t *p = NULL, *x = vec(TD_FLOAT64, NPAR), *px = NULL;
            double *xp = td_tensor_data(x);

            for (int64_t i = 0; i < NPAR; i++) {
                xp[i] = xval(j, i, k);
            }
            st = td_rref_to_here(w[j], TD_RPC_DEFAULT_TIMEOUT, &v);
            if (st == TD_OK) {
                st = td_rpc_list_tensor(v, 0, &p);
            }
            if (st == TD_OK && (st = td_mul(p, x, &px)) == TD_OK) {
                st = td_sum(px, &parts[j]);
            }
            td_tensor_release(px);
            td_tensor_release(x);
            td_rpc_list_free(v);
        }
        if (st == TD_OK) {
            st = td_add(parts[0], parts[1], &loss);
        }
        if (st == TD_OK) {
            st = td_dist_backward(ctx, &loss, 1, 0);
        }
        if (st == TD_OK) {
            stepped = 1;
            st = td_dist_optimizer_step(opt, ctx);
        }
        td_status_t st_step = st;
        double took = now_s() - t0;     /* the read-back below is not */
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", td_last_error());
        td_dist_autograd_end(ctx);
        /* read back what the owners now hold */
        for (int j = 0; j < 2; j++) {
            if (peek(w[j], after[j]) != 0) {
                printf("SETUP FAILED: cannot read parameter %d back: %s\n",
                       j, td_last_error());
                return;
            }
            for (int64_t i = 0; i < NPAR; i++) {
                want[j][i] = cur[j][i] - lr * xval(j, i, k);
            }
            int applied = memcmp(after[j], want[j], sizeof(want[j])) == 0;
            int kept = memcmp(after[j], cur[j], sizeof(cur[j])) == 0;
            if (st_step == TD_OK) {
                right = right && applied;       /* exactly one step */
            } else if (stepped ? !(applied || kept) : !kept) {
                /* a failed step may have reached some owners, but none may
                 * hold anything but the old value or exactly one step */
                printf("WRONG step %d: parameter %d on rank %d is neither "
                       "its old value nor one step (after an error)\n", k,
                       j, 1 + j);
            } else if (applied) {
                printf("NOTE step %d: failed, but rank %d applied it (a "
                       "partial step)\n", k, 1 + j);
            }
            memcpy(cur[j], after[j], sizeof(cur[j]));
        }
        if (outcome_msg(st_step, right, took, msg, "step %d", k)) {
            n_ok++;
        } else {
            n_err++;
        }
        td_tensor_release(loss);
        td_tensor_release(parts[0]);
        td_tensor_release(parts[1]);
    }
    printf("optim: %d ok, %d failed\n", n_ok, n_err);
    td_dist_optimizer_destroy(opt);
    td_rref_release(w[0]);
    td_rref_release(w[1]);
}

int
main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "coll";
    int iters = argc > 2 ? atoi(argv[2]) : 10;
    double fin_timeout;
    td_status_t st;

    setvbuf(stdout, NULL, _IOLBF, 0);
    td_rpc_register("mul", fn_mul, NULL);
    td_rpc_register("make_param", fn_make_param, NULL);
    st = td_init(NULL);
    if (st != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 1;
    }
    rank = td_world()->rank;
    size = td_world()->world_size;
    /* how long one operation may take: the timeouts it can run into, one
     * after another, plus a margin for a loaded machine */
    double rpc_s = td_rpc_default_timeout();
    double coll_s = getenv("TODIST_COLL_TIMEOUT") != NULL
                    ? atof(getenv("TODIST_COLL_TIMEOUT")) : 60;
    double bw_s = getenv("TODIST_DIST_BACKWARD_TIMEOUT") != NULL
                  ? atof(getenv("TODIST_DIST_BACKWARD_TIMEOUT")) : 60;
    if (strcmp(mode, "coll") == 0) {
        bound_s = 2 * coll_s + 10;     /* p2p: the receive, then the send */
    } else {
        /* three calls and the backward, or two fetches, the backward and
         * the step (a call to each owner) */
        bound_s = 4 * rpc_s + bw_s + 10;
    }
    if (strcmp(mode, "coll") == 0) {
        mode_coll(iters);
    } else if (rank == 0 && strcmp(mode, "backward") == 0) {
        mode_backward(iters);
    } else if (rank == 0 && strcmp(mode, "optim") == 0) {
        mode_optim(iters);
    }
    /* wait for the driver through the store (no faults there), so that
     * td_finalize's time below is its own on every rank */
    if (td_barrier(600) != TD_OK) {
        printf("rank %d: td_barrier: %s\n", rank, td_last_error());
    }
    fin_timeout = getenv("TODIST_FINALIZE_TIMEOUT") != NULL
                  ? atof(getenv("TODIST_FINALIZE_TIMEOUT")) : 300;
    double t0 = now_s();
    st = td_finalize();
    /* under faults an error is fine; a hang or crash is not */
    printf("rank %d: td_finalize ended in %.1f s%s: %s\n", rank, now_s() - t0,
           now_s() - t0 > fin_timeout + 10 ? " (PAST ITS TIMEOUT)" : "",
           st == TD_OK ? "ok" : td_last_error());
    return 0;
}
