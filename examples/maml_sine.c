/* examples/maml_sine: MAML on sinusoid regression (Finn et al. 2017) with
 * the inner loops on the workers. Run with todist-run -n W (any W >= 1).
 *
 * Tasks: y = A sin(x - phase), A ~ U(0.1, 5), phase ~ U(0, pi), x ~
 * U(-5, 5); K support and K query points per task. Model: MLP 1-40-40-1
 * (ReLU), float64. Each iteration rank 0 draws a batch of T tasks and, in
 * a distributed autograd context, calls "maml_task" with the dimension
 * partitioner (dim 0, exclusive, keepdim false: one task per call, spread
 * round-robin over every worker; the model goes whole to each call) and
 * the mean reducer. On the worker: INNER MetaSGD steps on the support set
 * (differentiable: create_graph), then the query loss of the adapted
 * model. Rank 0 runs the distributed backward (second order, through the
 * workers' inner loops) and an Adam step on the meta-parameters.
 *
 * Output, every --log-every iterations:  iter=100 meta_loss=0.812345
 * With the same --seed the numbers do not depend on the number of workers.
 * Options: --seed S (0) --iterations N (1000) --tasks T (16) --k K (10)
 *          --inner-steps N (5) --inner-lr X (0.01) --outer-lr X (0.001)
 *          --log-every N (100) */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>

#define N_DATA 4          /* xs, ys, xq, yq: then the parameters */

static int inner_steps = 5;
static double inner_lr = 0.01;

/* ---- the task function: runs on a worker ------------------------------------ */

/* f(x; params): linear, relu, linear, relu, linear */
static td_status_t
forward(td_tensor_t *x, td_tensor_t *const *p, int n, td_tensor_t **out)
{
    td_tensor_t *h = td_tensor_retain(x), *lin = NULL, *act;
    td_status_t status = TD_OK;

    for (int k = 0; k < n && status == TD_OK; k += 2) {
        status = td_linear(h, p[k], p[k + 1], &lin);
        td_tensor_release(h);
        h = NULL;
        if (status == TD_OK && k + 2 < n) {
            status = td_relu(lin, &act);
            td_tensor_release(lin);
            lin = NULL;
            h = act;
        } else {
            h = lin;
        }
    }
    if (status != TD_OK) {
        td_tensor_release(h);
        return status;
    }
    *out = h;
    return TD_OK;
}

static td_status_t
mse(td_tensor_t *x, td_tensor_t *y, td_tensor_t *const *p, int n,
    td_tensor_t **loss)
{
    td_tensor_t *pred = NULL;
    td_status_t status = forward(x, p, n, &pred);

    if (status == TD_OK) {
        status = td_mse_loss(pred, y, TD_REDUCTION_MEAN, loss);
    }
    td_tensor_release(pred);
    return status;
}

/* ARGS: xs [K,1], ys, xq, yq, then W0, b0, W1, b1, W2, b2. Returns the
 * query loss after INNER_STEPS MetaSGD steps on the support set. */
static td_status_t
maml_task(void *arg, const td_rpc_call_info_t *info,
          const td_rpc_list_t *args, td_rpc_list_t *result)
{
    td_tensor_t *d[N_DATA], *p[16] = {0}, *next[16] = {0}, *loss = NULL;
    size_t len = td_rpc_list_len(args);
    td_status_t status = TD_OK;
    int n = (int)len - N_DATA;

    (void)arg;
    (void)info;
    if (len <= N_DATA || n > 16 || n % 2 != 0) {
        return td_error(TD_ERR_INVALID, "maml_task: %zu arguments (4 data "
                        "tensors and weight/bias pairs expected)", len);
    }
    for (int i = 0; i < N_DATA && status == TD_OK; i++) {
        status = td_rpc_list_tensor(args, (size_t)i, &d[i]);
    }
    for (int i = 0; i < n && status == TD_OK; i++) {
        status = td_rpc_list_tensor(args, (size_t)(N_DATA + i), &p[i]);
        if (status == TD_OK) {
            td_tensor_retain(p[i]);
        }
    }
    for (int s = 0; s < inner_steps && status == TD_OK; s++) {
        status = mse(d[0], d[1], p, n, &loss);
        if (status == TD_OK) {
            status = td_meta_sgd_step(loss, p, n, inner_lr, next);
        }
        td_tensor_release(loss);
        loss = NULL;
        if (status == TD_OK) {
            for (int i = 0; i < n; i++) {
                td_tensor_release(p[i]);
                p[i] = next[i];
                next[i] = NULL;
            }
        }
    }
    if (status == TD_OK) {
        status = mse(d[2], d[3], p, n, &loss);
    }
    if (status == TD_OK) {
        status = td_rpc_list_add_tensor(result, loss);
    }
    td_tensor_release(loss);
    for (int i = 0; i < n; i++) {
        td_tensor_release(p[i]);
    }
    return status;
}

/* The dimension partitioner over the task data (one task per part); the
 * model goes whole to every part. */
static td_status_t
tasks_then_model(void *arg, const td_rpc_list_t *args,
                 td_partition_t **parts_p, size_t *n_p)
{
    td_partitioner_t dim;
    td_rpc_list_t *data = NULL;
    td_partition_t *parts = NULL;
    td_tensor_t *t;
    td_status_t status;
    size_t n = 0;

    (void)arg;
    status = td_partitioner_dim(0, 1, 0, NULL, 0, &dim);
    if (status == TD_OK) {
        status = td_rpc_list_create(&data);
    }
    for (size_t i = 0; i < N_DATA && status == TD_OK; i++) {
        status = td_rpc_list_tensor(args, i, &t);
        if (status == TD_OK) {
            status = td_rpc_list_add_tensor(data, t);
        }
    }
    if (status == TD_OK) {
        status = td_partition(&dim, data, &parts, &n);
    }
    td_rpc_list_free(data);
    for (size_t p = 0; p < n && status == TD_OK; p++) {
        for (size_t i = N_DATA; i < td_rpc_list_len(args) && status == TD_OK;
             i++) {
            status = td_rpc_list_tensor(args, i, &t);
            if (status == TD_OK) {
                status = td_rpc_list_add_tensor(parts[p].args, t);
            }
        }
    }
    if (status != TD_OK) {
        td_partitions_free(parts, n);
        return status;
    }
    *parts_p = parts;
    *n_p = n;
    return TD_OK;
}

/* ---- rank 0 ---------------------------------------------------------------------- */

/* splitmix64: the task stream depends on the seed and the iteration only */
static uint64_t
splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double
uniform(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * (double)(splitmix(s) >> 11) * 0x1.0p-53;
}

/* T tasks: xs, ys, xq, yq, each [T, K, 1] */
static td_status_t
make_tasks(uint64_t seed, int iter, int t, int k, td_tensor_t **d)
{
    int64_t shape[3] = {t, k, 1};
    double *buf[N_DATA];
    uint64_t s = seed * 1000003ULL + (uint64_t)iter;
    td_status_t status = TD_OK;

    for (int i = 0; i < N_DATA; i++) {
        buf[i] = malloc((size_t)t * (size_t)k * sizeof(double));
    }
    for (int j = 0; j < t; j++) {
        double amp = uniform(&s, 0.1, 5.0), phase = uniform(&s, 0.0, M_PI);
        for (int i = 0; i < k; i++) {
            double xs = uniform(&s, -5, 5), xq = uniform(&s, -5, 5);
            buf[0][j * k + i] = xs;
            buf[1][j * k + i] = amp * sin(xs - phase);
            buf[2][j * k + i] = xq;
            buf[3][j * k + i] = amp * sin(xq - phase);
        }
    }
    for (int i = 0; i < N_DATA; i++) {
        d[i] = NULL;
        if (status == TD_OK) {
            status = td_tensor_from_data(buf[i], shape, 3, TD_FLOAT64, &d[i]);
        }
        free(buf[i]);
    }
    return status;
}

static td_status_t
meta_step(td_mlp_t *mlp, td_dist_optim_t *opt, const td_parallel_t *fn,
          td_tensor_t **d, double *meta_loss)
{
    td_rpc_list_t *args = NULL, *res = NULL;
    td_tensor_t *loss;
    td_status_t status;
    int64_t ctx;

    status = td_dist_autograd_begin(&ctx);
    if (status != TD_OK) {
        return status;
    }
    status = td_rpc_list_create(&args);
    for (int i = 0; i < N_DATA && status == TD_OK; i++) {
        status = td_rpc_list_add_tensor(args, d[i]);
    }
    for (int i = 0; i < td_mlp_num_params(mlp) && status == TD_OK; i++) {
        status = td_rpc_list_add_tensor(args, td_mlp_params(mlp)[i]);
    }
    if (status == TD_OK) {
        status = td_parallel_call(fn, args, &res);
    }
    if (status == TD_OK) {
        status = td_rpc_list_tensor(res, 0, &loss);
    }
    if (status == TD_OK) {
        status = td_tensor_item(loss, meta_loss);
    }
    if (status == TD_OK) {
        status = td_dist_backward(ctx, &loss, 1, 0);
    }
    if (status == TD_OK) {
        status = td_dist_optim_step(opt, ctx);
    }
    td_rpc_list_free(args);
    td_rpc_list_free(res);
    td_dist_autograd_end(ctx);
    return status;
}

static void
usage(FILE *f)
{
    fprintf(f, "usage: maml_sine [--seed S] [--iterations N] [--tasks T] "
            "[--k K] [--inner-steps N] [--inner-lr X] [--outer-lr X] "
            "[--log-every N]\nrun with todist-run -n WORKERS\n");
}

int
main(int argc, char **argv)
{
    int iterations = 1000, tasks = 16, k = 10, log_every = 100, rc = 0;
    double outer_lr = 0.001;
    uint64_t seed = 0;
    td_parallel_t fn = TD_PARALLELIZE("maml_task", TD_PARTITIONER_BATCH,
                                      TD_REDUCER_MEAN);
    td_mlp_t *mlp = NULL;
    td_dist_optim_t *opt = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (v == NULL) {
            usage(stderr);
            return 2;
        }
        i++;
        if (strcmp(a, "--seed") == 0) {
            seed = strtoull(v, NULL, 10);
        } else if (strcmp(a, "--iterations") == 0) {
            iterations = atoi(v);
        } else if (strcmp(a, "--tasks") == 0) {
            tasks = atoi(v);
        } else if (strcmp(a, "--k") == 0) {
            k = atoi(v);
        } else if (strcmp(a, "--inner-steps") == 0) {
            inner_steps = atoi(v);
        } else if (strcmp(a, "--inner-lr") == 0) {
            inner_lr = atof(v);
        } else if (strcmp(a, "--outer-lr") == 0) {
            outer_lr = atof(v);
        } else if (strcmp(a, "--log-every") == 0) {
            log_every = atoi(v);
        } else {
            fprintf(stderr, "maml_sine: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (iterations < 1 || tasks < 1 || k < 1 || inner_steps < 0 ||
        log_every < 1 || !(outer_lr > 0) || !(inner_lr >= 0)) {
        fprintf(stderr, "maml_sine: --iterations, --tasks, --k, --log-every "
                "and --outer-lr must be positive, --inner-steps and "
                "--inner-lr not negative\n");
        return 2;
    }
    /* the dimension partitioner over the tasks, the model whole */
    fn.partitioner = td_partitioner_user(tasks_then_model, NULL);
    if (td_rpc_register("maml_task", maml_task, NULL) != TD_OK ||
        td_init(NULL) != TD_OK) {
        fprintf(stderr, "maml_sine: %s\n", td_last_error());
        return 1;
    }
    if (td_world()->rank != 0) {
        goto finalize;        /* the workers run the inner loops */
    }
    {
        int64_t sizes[4] = {1, 40, 40, 1};
        td_adam_opts_t ao = td_adam_defaults();

        ao.lr = outer_lr;
        if (td_mlp_create(sizes, 4, TD_FLOAT64, seed + 1, &mlp) != TD_OK ||
            td_dist_optim_adam(td_mlp_params(mlp), td_mlp_num_params(mlp),
                               &ao, &opt) != TD_OK) {
            fprintf(stderr, "maml_sine: model: %s\n", td_last_error());
            rc = 1;
            goto finalize;
        }
    }
    for (int it = 1; it <= iterations; it++) {
        td_tensor_t *d[N_DATA];
        double meta_loss = 0;
        td_status_t status = make_tasks(seed, it, tasks, k, d);

        if (status == TD_OK) {
            status = meta_step(mlp, opt, &fn, d, &meta_loss);
        }
        for (int i = 0; i < N_DATA; i++) {
            td_tensor_release(d[i]);
        }
        if (status != TD_OK) {
            fprintf(stderr, "maml_sine: iteration %d: %s\n", it,
                    td_last_error());
            rc = 1;
            goto finalize;
        }
        if (it % log_every == 0) {
            printf("iter=%d meta_loss=%.6f\n", it, meta_loss);
            fflush(stdout);
        }
    }
finalize:
    td_dist_optim_destroy(opt);
    td_mlp_free(mlp);
    if (td_finalize() != TD_OK) {
        fprintf(stderr, "maml_sine: finalize: %s\n", td_last_error());
        rc = 1;
    }
    return rc;
}
