/* examples/pipeline_rpc.c: PyTorch's "Distributed Pipeline Parallelism
 * Using RPC" tutorial's form, in C: a master drives a model split in two
 * shards that live on two workers as remote modules.
 *
 *   todist-run -n 3 examples/pipeline_rpc [--microbatches M] [--steps N]
 *        [--layers L] [--hidden H] [--batch-size B] [--lr X] [--data DIR]
 *
 * Rank 0 is the master, ranks 1 and 2 the workers. The master creates the
 * first shard (784, then L/2 hidden layers of H) on worker 1 and the second
 * (the other hidden layers, then 10) on worker 2 as RemoteModules (MLPs:
 * relu between layers, none at a shard's end), and a distributed optimizer
 * (SGD, momentum 0.9) over both shards' parameters as remote references.
 * Each step runs in a distributed autograd context: every micro-batch of
 * the Fashion-MNIST mini-batch goes through shard 1 and shard 2 by RPC,
 * the outputs are concatenated, the cross-entropy of the whole mini-batch
 * is backpropagated by distributed autograd (the gradients land in the
 * context on the workers that own the parameters) and the optimizer steps.
 * The master prints
 *   rpc_pipeline steps=N first_loss=X last_loss=Y samples_per_s=Z
 * todist's remote calls here are synchronous, so the micro-batches do not
 * overlap (the tutorial overlaps them with futures); the point-to-point
 * pipeline (todist/pipe.h, examples/pipeline_mlp) does. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <todist/todist.h>

extern void openblas_set_num_threads(int num_threads) __attribute__((weak));

#define FMNIST_MEAN 0.2860
#define FMNIST_STD  0.3530

static double
now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int
die(const char *what)
{
    fprintf(stderr, "pipeline_rpc: %s: %s\n", what, td_last_error());
    return 1;
}

/* One mini-batch: forward through both shards micro-batch by micro-batch,
 * distributed backward, distributed optimizer step. */
static td_status_t
step(td_remote_module_t *s1, td_remote_module_t *s2, td_dist_optimizer_t *opt,
     td_tensor_t *x, td_tensor_t *y, int M, double *loss_p)
{
    td_tensor_t *outs[64] = {0}, *cat = NULL, *loss = NULL;
    int64_t mb = td_tensor_size(x, 0) / M, ctx;
    td_status_t st, st2;

    if ((st = td_dist_autograd_begin(&ctx)) != TD_OK) {
        return st;
    }
    for (int m = 0; m < M && st == TD_OK; m++) {
        td_tensor_t *xm = NULL, *h = NULL;
        st = td_tensor_narrow(x, 0, m * mb, mb, &xm);
        if (st == TD_OK) {
            st = td_remote_module_forward(s1, xm, NULL, &h);
        }
        if (st == TD_OK) {
            st = td_remote_module_forward(s2, h, NULL, &outs[m]);
        }
        td_tensor_release(xm);
        td_tensor_release(h);
    }
    if (st == TD_OK) {
        st = td_tensor_cat(outs, M, 0, &cat);
    }
    if (st == TD_OK) {
        st = td_cross_entropy(cat, y, TD_REDUCTION_MEAN, &loss);
    }
    if (st == TD_OK) {
        st = td_tensor_item(loss, loss_p);
    }
    if (st == TD_OK) {
        st = td_dist_backward(ctx, &loss, 1, 0);
    }
    if (st == TD_OK) {
        st = td_dist_optimizer_step(opt, ctx);
    }
    for (int m = 0; m < M; m++) {
        td_tensor_release(outs[m]);
    }
    td_tensor_release(cat);
    td_tensor_release(loss);
    st2 = td_dist_autograd_end(ctx);
    return st != TD_OK ? st : st2;
}

static int
master(int M, int steps, int layers, int64_t hidden, int64_t batch,
       double lr, const char *data)
{
    int64_t c1[18], c2[18];
    int n1 = 0, n2 = 0, n_r1 = 0, n_r2 = 0, warm = 3, done = 0;
    td_remote_module_t *s1 = NULL, *s2 = NULL;
    td_rref_t **r1 = NULL, **r2 = NULL, *all[64];
    td_dist_optimizer_t *opt = NULL;
    td_tensor_t *tr_x, *tr_y, *x, *y;
    td_batcher_t *b;
    td_sgd_opts_t so = {lr, 0.9, 0, 0, 0};
    double first = 0, last = 0, t0 = 0;
    int rc = 0;

    c1[n1++] = 784;
    for (int l = 0; l < layers / 2; l++) {
        c1[n1++] = hidden;
    }
    c2[n2++] = hidden;
    for (int l = layers / 2 + 1; l < layers; l++) {
        c2[n2++] = hidden;
    }
    c2[n2++] = 10;
    if (td_fashion_mnist_load(data, 1, &tr_x, &tr_y) != TD_OK) {
        return die("data");
    }
    if (td_remote_module_create(1, TD_RM_MLP, c1, n1, TD_FLOAT32, 1, &s1) !=
            TD_OK ||
        td_remote_module_create(2, TD_RM_MLP, c2, n2, TD_FLOAT32, 2, &s2) !=
            TD_OK) {
        return die("remote modules");
    }
    if (td_remote_module_parameters(s1, &r1, &n_r1) != TD_OK ||
        td_remote_module_parameters(s2, &r2, &n_r2) != TD_OK ||
        n_r1 + n_r2 > 64) {
        return die("remote parameters");
    }
    for (int i = 0; i < n_r1; i++) {
        all[i] = r1[i];
    }
    for (int i = 0; i < n_r2; i++) {
        all[n_r1 + i] = r2[i];
    }
    if (td_dist_optimizer_sgd(all, n_r1 + n_r2, &so, &opt) != TD_OK) {
        return die("distributed optimizer");
    }
    if (td_batcher_create(tr_x, tr_y, batch, 1, 1, FMNIST_MEAN, FMNIST_STD,
                          &b) != TD_OK) {
        return die("batcher");
    }
    td_batcher_start_epoch(b, 1);
    while (done < steps && td_batcher_next(b, &x, &y) == 1) {
        double loss;
        if (td_tensor_size(x, 0) == batch) {
            if (done == warm) {
                t0 = now();
            }
            if (step(s1, s2, opt, x, y, M, &loss) != TD_OK) {
                rc = die("step");
            }
            first = done == 0 ? loss : first;
            last = loss;
            done++;
        }
        td_tensor_release(x);
        td_tensor_release(y);
        if (rc != 0) {
            break;
        }
    }
    if (rc == 0) {
        printf("rpc_pipeline steps=%d first_loss=%.4f last_loss=%.4f "
               "samples_per_s=%.0f\n", done, first, last,
               done > warm ? (double)(done - warm) * batch / (now() - t0)
                           : 0.0);
    }
    td_batcher_free(b);
    td_dist_optimizer_destroy(opt);
    for (int i = 0; i < n_r1; i++) {
        td_rref_release(r1[i]);
    }
    for (int i = 0; i < n_r2; i++) {
        td_rref_release(r2[i]);
    }
    free(r1);
    free(r2);
    td_remote_module_free(s1);
    td_remote_module_free(s2);
    td_tensor_release(tr_x);
    td_tensor_release(tr_y);
    return rc;
}

int
main(int argc, char **argv)
{
    int M = 4, steps = 100, layers = 8, rc = 0, c;
    int64_t hidden = 256, batch = 64;
    double lr = 0.05;
    const char *data = TD_FASHION_MNIST_DIR;
    static const struct option lopts[] = {
        {"microbatches", 1, 0, 'm'}, {"steps", 1, 0, 'n'},
        {"layers", 1, 0, 'L'}, {"hidden", 1, 0, 'H'},
        {"batch-size", 1, 0, 'b'}, {"lr", 1, 0, 'l'}, {"data", 1, 0, 'D'},
        {0, 0, 0, 0}};

    while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
        switch (c) {
        case 'm': M = atoi(optarg); break;
        case 'n': steps = atoi(optarg); break;
        case 'L': layers = atoi(optarg); break;
        case 'H': hidden = atoll(optarg); break;
        case 'b': batch = atoll(optarg); break;
        case 'l': lr = atof(optarg); break;
        case 'D': data = optarg; break;
        default:
            fprintf(stderr, "usage: pipeline_rpc [--microbatches M] "
                    "[--steps N] [--layers L] [--hidden H] [--batch-size B] "
                    "[--lr X] [--data DIR]\n");
            return 2;
        }
    }
    if (M < 1 || M > 64 || batch % M != 0 || layers < 2 || layers > 30 ||
        hidden < 1) {
        fprintf(stderr, "pipeline_rpc: --microbatches %d must be in 1..64 and "
                "divide --batch-size %lld; --layers %d in 2..30\n", M,
                (long long)batch, layers);
        return 2;
    }
    if (openblas_set_num_threads != NULL) {
        openblas_set_num_threads(1);
    }
    if (td_init(NULL) != TD_OK) {
        return die("td_init");
    }
    if (td_world()->world_size != 3) {
        fprintf(stderr, "pipeline_rpc: needs 3 ranks (master, two workers), "
                "got %d\n", td_world()->world_size);
        rc = 2;
    } else if (td_world()->rank == 0) {
        rc = master(M, steps, layers, hidden, batch, lr, data);
    }
    /* the workers serve the master's calls until every rank is done */
    if (td_finalize() != TD_OK) {
        rc = die("td_finalize");
    }
    return rc;
}
