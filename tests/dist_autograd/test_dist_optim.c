/* tests/dist_autograd/test_dist_optim.c: the distributed optimizer's per-owner part.
 * Gradients come from real distributed-autograd contexts (a local engine),
 * and the parameters after every step must equal torch.optim's (reference
 * values from tests/dist_autograd/gen_dist_optim_ref.py, committed in
 * tests/dist_autograd/dist_optim_ref.h), on the cpu and on a device (the
 * test backend's "cuda:1", host memory behind the kernel table: the
 * optimizer takes device tensors, its state lives beside them). Also:
 * skipped parameters, concurrent steps on one optimizer are serialized,
 * bad hyper-parameters are rejected. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kernels/device.h"
#include "tests/tap.h"
#include "tests/dist_autograd/dist_optim_ref.h"
#include <todist/dist_autograd.h>
#include <todist/dist_optim.h>
#include <todist/ops.h>

#define DEV1 ((td_device_t){TD_DEVICE_CUDA, 1})

static td_device_t on_device = {TD_DEVICE_CPU, 0};  /* where vec puts it */

static td_tensor_t *
vec(const double *v, int64_t n, int requires_grad)
{
    td_tensor_t *c = NULL, *t = NULL;

    td_tensor_from_data(v, &n, 1, TD_FLOAT64, &c);
    td_tensor_to(c, on_device, &t);
    td_tensor_release(c);
    if (requires_grad) {
        td_tensor_set_requires_grad(t, 1);
    }
    return t;
}

/* sum(p * g): d/dp = g */
static td_tensor_t *
dot(td_tensor_t *p, const double *g, int64_t n)
{
    td_tensor_t *gt = vec(g, n, 0), *m = NULL, *s = NULL;

    td_mul(p, gt, &m);
    td_sum(m, &s);
    td_tensor_release(gt);
    td_tensor_release(m);
    return s;
}

/* the largest |t - want| (T on any device); infinity when T is not on
 * ON_DEVICE (the optimizer must update it where it lives) */
static double
maxdiff(td_tensor_t *t, const double *want, int64_t n)
{
    td_device_t d = td_tensor_device(t);
    td_tensor_t *h = NULL;
    double m = 0;

    if (d.type != on_device.type || d.index != on_device.index ||
        td_tensor_to(t, TD_CPU, &h) != TD_OK) {
        return INFINITY;
    }
    for (int64_t i = 0; i < n; i++) {
        m = fmax(m, fabs(((double *)td_tensor_data(h))[i] - want[i]));
    }
    td_tensor_release(h);
    return m;
}

/* the configurations of tests/dist_autograd/gen_dist_optim_ref.py */
static td_status_t
create(int c, td_tensor_t *const *params, int n, td_dist_optim_t **o)
{
    td_sgd_opts_t s = {0};
    td_adam_opts_t a = td_adam_defaults();

    switch (c) {
    case 0:
        s.lr = 0.1;
        return td_dist_optim_sgd(params, n, &s, o);
    case 1:
        s.lr = 0.05;
        s.momentum = 0.9;
        s.dampening = 0.1;
        s.weight_decay = 0.01;
        return td_dist_optim_sgd(params, n, &s, o);
    case 2:
        s.lr = 0.05;
        s.momentum = 0.9;
        s.nesterov = 1;
        s.weight_decay = 0.01;
        return td_dist_optim_sgd(params, n, &s, o);
    case 3:
        a.lr = 0.01;
        return td_dist_optim_adam(params, n, &a, o);
    case 4:
        a.lr = 0.01;
        a.beta1 = 0.8;
        a.beta2 = 0.99;
        a.eps = 1e-6;
        a.weight_decay = 0.1;
        a.amsgrad = 1;
        return td_dist_optim_adam(params, n, &a, o);
    default:
        a = td_adamw_defaults();
        a.lr = 0.01;
        a.weight_decay = 0.05;
        return td_dist_optim_adamw(params, n, &a, o);
    }
}

static const char *names[REF_CONFIGS] = {
    "SGD", "SGD momentum+dampening+weight_decay", "SGD nesterov",
    "Adam", "Adam amsgrad+weight_decay+betas", "AdamW"};

static void
test_against_torch(int c, const char *where)
{
    double a0[6], b0[3] = {0.5, -0.25, 0.125};
    td_tensor_t *a, *b;
    td_dist_optim_t *o = NULL;
    double worst_a = 0, worst_b = 0;
    int bad = 0;

    for (int i = 0; i < 6; i++) {
        a0[i] = 0.1 * (i + 1) - 0.35;
    }
    a = vec(a0, 6, 1);
    b = vec(b0, 3, 1);
    is_int(create(c, (td_tensor_t *[]){a, b}, 2, &o), TD_OK,
           "%s on %s: create", names[c], where);
    if (o == NULL) {
        for (int i = 0; i < 4; i++) {
            ok(0, "%s on %s: no optimizer to step", names[c], where);
        }
        td_tensor_release(a);
        td_tensor_release(b);
        return;
    }
    for (int k = 0; k < REF_STEPS; k++) {
        double ga[6], gb[3];
        td_tensor_t *loss, *lb, *sum = NULL;
        int64_t ctx;

        for (int i = 0; i < 6; i++) {
            ga[i] = sin(i + 1.7 * k);
        }
        for (int i = 0; i < 3; i++) {
            gb[i] = cos(2 * i - 0.3 * k);
        }
        td_dist_autograd_begin(&ctx);
        loss = dot(a, ga, 6);
        if (k % 2 == 0) {                 /* B gets a gradient */
            lb = dot(b, gb, 3);
            td_add(loss, lb, &sum);
            td_tensor_release(loss);
            td_tensor_release(lb);
            loss = sum;
        }
        bad += td_dist_backward(ctx, &loss, 1, 0) != TD_OK;
        bad += td_dist_optim_step(o, ctx) != TD_OK;
        td_dist_autograd_end(ctx);
        td_tensor_release(loss);
        worst_a = fmax(worst_a, maxdiff(a, ref_a[c][k], 6));
        worst_b = fmax(worst_b, maxdiff(b, ref_b[c][k], 3));
    }
    is_int(bad, 0, "%s on %s: %d backwards and steps", names[c], where,
           REF_STEPS);
    ok(worst_a <= 1e-12, "%s on %s: A equals torch.optim after every step "
       "(%.2g)", names[c], where, worst_a);
    ok(worst_b <= 1e-12, "%s on %s: B (no gradient at steps 1, 3) equals "
       "torch (%.2g)", names[c], where, worst_b);
    ok(td_tensor_grad(a) == NULL, "%s on %s: .grad untouched", names[c],
       where);
    td_dist_optim_destroy(o);
    td_tensor_release(a);
    td_tensor_release(b);
}

/* The state of a parameter on a device lives on that device: SGD with
 * momentum keeps one buffer per parameter, made at the first step and
 * freed with the optimizer. */
static void
test_device_state(void)
{
    double v[4] = {1, 2, 3, 4};
    td_tensor_t *p = vec(v, 4, 1), *loss = NULL;
    td_sgd_opts_t hp = {.lr = 0.5, .momentum = 0.9};
    td_dist_optim_t *o = NULL;
    long live0, live1, live2;
    int64_t ctx;

    td_dist_optim_sgd(&p, 1, &hp, &o);
    live0 = td__device_test_live(1);
    td_sum(p, &loss);
    td_dist_autograd_begin(&ctx);
    td_dist_backward(ctx, &loss, 1, 0);
    is_int(td_dist_optim_step(o, ctx), TD_OK, "a step on cuda:1");
    td_dist_autograd_end(ctx);
    td_tensor_release(loss);
    live1 = td__device_test_live(1);
    td_dist_optim_destroy(o);
    live2 = td__device_test_live(1);
    ok(maxdiff(p, (double[]){0.5, 1.5, 2.5, 3.5}, 4) == 0,
       "... p -= 0.5 on cuda:1");
    is_int((int)(live1 - live0), 1, "the momentum buffer is a block of "
           "cuda:1");
    is_int((int)(live1 - live2), 1, "... freed with the optimizer");
    td_tensor_release(p);
}

/* ---- concurrent steps ---------------------------------------------------- */

static td_dist_optim_t *shared;
static td_tensor_t *shared_p;

static void *
stepper(void *arg)
{
    int *good = arg;

    *good = 1;
    for (int it = 0; it < 50; it++) {
        /* sum(p): its backward saves nothing, so another thread's step
         * (an in-place write to p) cannot invalidate this graph */
        td_tensor_t *loss = NULL;
        int64_t ctx;

        td_sum(shared_p, &loss);

        *good &= td_dist_autograd_begin(&ctx) == TD_OK;
        *good &= td_dist_backward(ctx, &loss, 1, 0) == TD_OK;
        *good &= td_dist_optim_step(shared, ctx) == TD_OK;
        td_dist_autograd_end(ctx);
        td_tensor_release(loss);
    }
    return NULL;
}

static void
test_concurrent(void)
{
    double zeros[1000] = {0};
    td_sgd_opts_t hp = {.lr = 0.5};
    pthread_t th[8];
    int good[8], all = 1, exact = 1;

    shared_p = vec(zeros, 1000, 1);
    td_dist_optim_sgd(&shared_p, 1, &hp, &shared);
    for (int k = 0; k < 8; k++) {
        pthread_create(&th[k], NULL, stepper, &good[k]);
    }
    for (int k = 0; k < 8; k++) {
        pthread_join(th[k], NULL);
        all &= good[k];
    }
    /* 8 x 50 steps of -0.5 each: exact in binary, lost updates show */
    for (int i = 0; i < 1000; i++) {
        exact &= ((double *)td_tensor_data(shared_p))[i] == -200.0;
    }
    ok(all, "8 threads x 50 contexts: every step succeeded");
    ok(exact, "concurrent steps on one optimizer are serialized (no lost "
       "update)");
    is_int(td_dist_optim_steps(shared), 400, "400 steps counted");
    td_dist_optim_destroy(shared);
    td_tensor_release(shared_p);
}

static void
test_rejects(void)
{
    double v[2] = {1, 2};
    td_tensor_t *p = vec(v, 2, 1), *q = NULL, *ip = NULL;
    td_sgd_opts_t hp = {.lr = -1};
    td_adam_opts_t ha = td_adam_defaults();
    td_dist_optim_t *o = NULL;
    int64_t two = 2;

    is_int(td_dist_optim_sgd(&p, 1, &hp, &o), TD_ERR_INVALID,
           "negative lr rejected");
    like(td_last_error(), "lr=-1", "... naming it");
    hp.lr = 0.1;
    hp.nesterov = 1;
    is_int(td_dist_optim_sgd(&p, 1, &hp, &o), TD_ERR_INVALID,
           "nesterov without momentum rejected");
    ha.beta2 = 1.0;
    is_int(td_dist_optim_adam(&p, 1, &ha, &o), TD_ERR_INVALID,
           "beta2 = 1 rejected");
    hp.nesterov = 0;
    td_mul_scalar(p, 2.0, &q);
    is_int(td_dist_optim_sgd(&q, 1, &hp, &o), TD_ERR_INVALID,
           "a non-leaf parameter rejected");
    td_tensor_zeros(&two, 1, TD_INT64, &ip);
    is_int(td_dist_optim_sgd(&ip, 1, &hp, &o), TD_ERR_DTYPE,
           "an int64 parameter rejected");
    ok(o == NULL, "no optimizer on failure");
    {
        int64_t ctx;
        is_int(td_dist_optim_sgd(&p, 1, &hp, &o), TD_OK, "valid create");
        td_dist_autograd_begin(&ctx);
        is_int(td_dist_optim_step(o, ctx), TD_OK,
               "step with no gradients at all is a no-op");
        ok(v[0] == 1 && ((double *)td_tensor_data(p))[0] == 1,
           "... parameters unchanged");
        td_dist_autograd_end(ctx);
        td_dist_optim_destroy(o);
    }
    td_tensor_release(p);
    td_tensor_release(q);
    td_tensor_release(ip);
}

int
main(void)
{
    plan(REF_CONFIGS * 5 * 2 + 1 + 4 + 3 + 10);
    for (int c = 0; c < REF_CONFIGS; c++) {
        test_against_torch(c, "cpu");
    }
    /* before anything touches a device; then the ops, the gradients and
     * the optimizer's updates run behind the test backend's kernel row */
    is_int(td__device_test_backend_install(2), TD_OK,
           "test device backend installed");
    on_device = DEV1;
    for (int c = 0; c < REF_CONFIGS; c++) {
        test_against_torch(c, "cuda:1");
    }
    test_device_state();
    on_device = TD_CPU;
    test_concurrent();
    test_rejects();
    return exit_status();
}
