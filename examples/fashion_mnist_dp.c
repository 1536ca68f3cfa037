/* examples/fashion_mnist_dp: TorchOpt's data-parallel recipe on
 * Fashion-MNIST, over RPC and distributed autograd. Run with
 * `todist-run -n 4 examples/fashion_mnist_dp`.
 *
 * Rank 0 owns the model (an MLP, 784-256-10 by default) and the optimizer.
 * Every step, inside a distributed autograd context, it clones the model
 * by copy (the clone's parameters are differentiable copies of the
 * originals), calls the parallelized loss function "fmnist_loss" with the
 * batch partitioner (the batch is split along dim 0 over every worker; the
 * model goes whole to each) and the mean reducer, runs the distributed
 * backward and steps the distributed optimizer with the context's
 * gradients. Same options and per-epoch line as examples/fashion_mnist:
 *   epoch=1 train_loss=0.5123 test_accuracy=0.8531 seconds=9.8
 * Options: --epochs N --batch-size N --lr X --optimizer sgd|adam
 *          --threads N --seed N --data DIR --save FILE
 *          --hidden N --max-batches N (stop each epoch early; for tests) */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <todist/todist.h>
#include "examples/fmnist_options.h"

/* OpenBLAS's own thread control (libopenblas0-pthread) */
extern void openblas_set_num_threads(int num_threads);

#define FMNIST_MEAN 0.2860
#define FMNIST_STD 0.3530
#define MAX_PARAMS 16

static double
now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void
usage(FILE *f)
{
    fprintf(f, "usage: fashion_mnist_dp [--epochs N] [--batch-size N] "
            "[--lr X] [--optimizer sgd|adam] [--threads N] [--seed N] "
            "[--data DIR] [--save FILE] [--hidden N] [--max-batches N]\n"
            "run with todist-run -n WORKERS\n");
}

static int
die(const char *what)
{
    fprintf(stderr, "fashion_mnist_dp: %s: %s\n", what, td_last_error());
    return 1;
}

/* ---- the parallelized loss: runs on every worker ------------------------- */

/* ARGS: x [b, 784], y [b], then W0, b0, W1, b1, ... (whole). The MLP's
 * forward (ReLU between layers) and the mean cross-entropy of its part. */
static td_status_t
fmnist_loss(void *arg, const td_rpc_call_info_t *info,
            const td_rpc_list_t *args, td_rpc_list_t *result)
{
    td_tensor_t *x, *y, *h, *next = NULL, *loss = NULL;
    size_t n = td_rpc_list_len(args);
    td_status_t status;

    (void)arg;
    (void)info;
    if (n < 4 || (n - 2) % 2 != 0) {
        return td_error(TD_ERR_INVALID, "fmnist_loss: %zu arguments (x, y "
                        "and weight/bias pairs expected)", n);
    }
    status = td_rpc_list_tensor(args, 0, &x);
    if (status == TD_OK) {
        status = td_rpc_list_tensor(args, 1, &y);
    }
    if (status != TD_OK) {
        return status;
    }
    h = td_tensor_retain(x);
    for (size_t k = 2; k < n && status == TD_OK; k += 2) {
        td_tensor_t *w, *b, *lin = NULL;

        status = td_rpc_list_tensor(args, k, &w);
        if (status == TD_OK) {
            status = td_rpc_list_tensor(args, k + 1, &b);
        }
        if (status == TD_OK) {
            status = td_linear(h, w, b, &lin);
        }
        if (status == TD_OK && k + 2 < n) {
            status = td_relu(lin, &next);
            td_tensor_release(lin);
            lin = next;
        }
        td_tensor_release(h);
        h = lin;
    }
    if (status == TD_OK) {
        status = td_cross_entropy(h, y, TD_REDUCTION_MEAN, &loss);
    }
    if (status == TD_OK) {
        status = td_rpc_list_add_tensor(result, loss);
    }
    td_tensor_release(h);
    td_tensor_release(loss);
    return status;
}

/* The batch partitioner over (x, y); the model goes whole to every part,
 * as TorchOpt passes an nn.Module (not a tensor) whole. */
static td_status_t
batch_then_model(void *arg, const td_rpc_list_t *args, td_partition_t **parts_p,
                 size_t *n_p)
{
    td_partitioner_t batch = td_partitioner_batch();
    td_rpc_list_t *xy = NULL;
    td_partition_t *parts = NULL;
    td_tensor_t *t;
    td_status_t status;
    size_t n = 0;

    (void)arg;
    status = td_rpc_list_create(&xy);
    for (size_t i = 0; i < 2 && status == TD_OK; i++) {
        status = td_rpc_list_tensor(args, i, &t);
        if (status == TD_OK) {
            status = td_rpc_list_add_tensor(xy, t);
        }
    }
    if (status == TD_OK) {
        status = td_partition(&batch, xy, &parts, &n);
    }
    td_rpc_list_free(xy);
    for (size_t p = 0; p < n && status == TD_OK; p++) {
        for (size_t i = 2; i < td_rpc_list_len(args) && status == TD_OK; i++) {
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

/* ---- rank 0 ----------------------------------------------------------------- */

/* accuracy of M on the whole test set */
static td_status_t
evaluate(td_mlp_t *m, td_tensor_t *images, td_tensor_t *labels, double *acc)
{
    td_batcher_t *b;
    td_tensor_t *x, *y, *logits, *val, *idx;
    int64_t correct = 0, total = 0;
    int was = td_grad_set_enabled(0), r;
    td_status_t status;

    status = td_batcher_create(images, labels, 1000, 0, 0, FMNIST_MEAN,
                               FMNIST_STD, &b);
    if (status != TD_OK) {
        td_grad_set_enabled(was);
        return status;
    }
    while ((r = td_batcher_next(b, &x, &y)) == 1) {
        status = td_mlp_forward(m, x, &logits);
        if (status == TD_OK) {
            status = td_max_dim(logits, 1, 0, &val, &idx);
        }
        if (status == TD_OK) {
            const int64_t *p = td_tensor_data(idx), *t = td_tensor_data(y);
            for (int64_t i = 0; i < td_tensor_numel(y); i++) {
                correct += p[i] == t[i];
            }
            total += td_tensor_numel(y);
            td_tensor_release(val);
            td_tensor_release(idx);
            td_tensor_release(logits);
        }
        td_tensor_release(x);
        td_tensor_release(y);
        if (status != TD_OK) {
            break;
        }
    }
    td_batcher_free(b);
    td_grad_set_enabled(was);
    if (status == TD_OK) {
        *acc = total > 0 ? (double)correct / (double)total : 0;
    }
    return status;
}

/* One step: clone by copy, parallel loss, distributed backward, step. */
static td_status_t
train_step(td_mlp_t *mlp, td_dist_optim_t *opt, const td_parallel_t *loss_fn,
           td_tensor_t *x, td_tensor_t *y, double *loss_p)
{
    td_rpc_list_t *args = NULL, *res = NULL;
    td_mlp_t *clone = NULL;
    td_tensor_t *loss;
    td_status_t status;
    int64_t ctx;

    status = td_dist_autograd_begin(&ctx);
    if (status != TD_OK) {
        return status;
    }
    status = td_mlp_clone(mlp, TD_CLONE_COPY, &clone);
    if (status == TD_OK) {
        status = td_rpc_list_create(&args);
    }
    if (status == TD_OK) {
        status = td_rpc_list_add_tensor(args, x);
    }
    if (status == TD_OK) {
        status = td_rpc_list_add_tensor(args, y);
    }
    for (int i = 0; status == TD_OK && i < td_mlp_num_params(clone); i++) {
        status = td_rpc_list_add_tensor(args, td_mlp_params(clone)[i]);
    }
    if (status == TD_OK) {
        status = td_parallel_call(loss_fn, args, &res);
    }
    if (status == TD_OK) {
        status = td_rpc_list_tensor(res, 0, &loss);
    }
    if (status == TD_OK) {
        status = td_tensor_item(loss, loss_p);
    }
    if (status == TD_OK) {
        status = td_dist_backward(ctx, &loss, 1, 0);
    }
    if (status == TD_OK) {
        status = td_dist_optim_step(opt, ctx);
    }
    td_rpc_list_free(args);
    td_rpc_list_free(res);
    td_mlp_free(clone);
    td_dist_autograd_end(ctx);
    return status;
}

int
main(int argc, char **argv)
{
    int epochs, threads, use_adam, rc = 0;
    int64_t batch, hidden, max_batches;
    double lr;
    uint64_t seed;
    const char *data, *save;
    td_tensor_t *tr_x = NULL, *tr_y = NULL, *te_x = NULL, *te_y = NULL;
    td_batcher_t *batcher = NULL;
    td_mlp_t *mlp = NULL;
    td_dist_optim_t *opt = NULL;
    td_status_t status;
    td_parallel_t loss_fn = TD_PARALLELIZE("fmnist_loss", TD_PARTITIONER_BATCH,
                                           TD_REDUCER_MEAN);

    {
        fmnist_opts_t o;
        int exit_rc = fmnist_parse_options("fashion_mnist_dp", argc, argv, usage, &o);
        if (exit_rc >= 0) {
            return exit_rc;
        }
        epochs = o.epochs; threads = o.threads; use_adam = o.use_adam;
        batch = o.batch; hidden = o.hidden; max_batches = o.max_batches;
        lr = o.lr; seed = o.seed; data = o.data; save = o.save;
    }
    openblas_set_num_threads(threads);
    /* the batch partitioner over (x, y), the model whole */
    loss_fn.partitioner = td_partitioner_user(batch_then_model, NULL);

    if (td_rpc_register("fmnist_loss", fmnist_loss, NULL) != TD_OK ||
        td_init(NULL) != TD_OK) {
        return die("start");
    }
    if (td_world()->rank != 0) {
        goto finalize;        /* the workers serve fmnist_loss */
    }
    rc = 1;
    if (td_fashion_mnist_load(data, 1, &tr_x, &tr_y) != TD_OK) {
        die("training set");
        goto finalize;
    }
    if (td_fashion_mnist_load(data, 0, &te_x, &te_y) != TD_OK) {
        die("test set");
        goto finalize;
    }
    {
        int64_t sizes[3] = {784, hidden, 10};
        if (td_mlp_create(sizes, 3, TD_FLOAT32, seed, &mlp) != TD_OK) {
            die("model");
            goto finalize;
        }
    }
    if (use_adam) {
        td_adam_opts_t ao = td_adam_defaults();
        ao.lr = lr;
        status = td_dist_optim_adam(td_mlp_params(mlp), td_mlp_num_params(mlp),
                                    &ao, &opt);
    } else {
        td_sgd_opts_t so = {lr, 0.9, 0, 0, 0};   /* momentum 0.9 */
        status = td_dist_optim_sgd(td_mlp_params(mlp), td_mlp_num_params(mlp),
                                   &so, &opt);
    }
    if (status != TD_OK) {
        die("optimizer");
        goto finalize;
    }
    if (td_batcher_create(tr_x, tr_y, batch, 1, seed, FMNIST_MEAN, FMNIST_STD,
                          &batcher) != TD_OK) {
        die("batcher");
        goto finalize;
    }
    for (int ep = 1; ep <= epochs; ep++) {
        double t0 = now(), loss_sum = 0, acc;
        int64_t nb = 0;
        td_tensor_t *x, *y;
        int r;

        td_batcher_start_epoch(batcher, ep);
        while ((r = td_batcher_next(batcher, &x, &y)) == 1) {
            double lv = 0;

            status = train_step(mlp, opt, &loss_fn, x, y, &lv);
            td_tensor_release(x);
            td_tensor_release(y);
            if (status != TD_OK) {
                die("training step");
                goto finalize;
            }
            loss_sum += lv;
            if (++nb == max_batches) {
                break;
            }
        }
        if (r < 0) {
            die("batch");
            goto finalize;
        }
        if (evaluate(mlp, te_x, te_y, &acc) != TD_OK) {
            die("evaluation");
            goto finalize;
        }
        printf("epoch=%d train_loss=%.4f test_accuracy=%.4f seconds=%.1f\n",
               ep, nb > 0 ? loss_sum / (double)nb : 0.0, acc, now() - t0);
        fflush(stdout);
    }
    if (save != NULL) {
        const char *names[] = {"fc1.weight", "fc1.bias", "fc2.weight",
                               "fc2.bias"};
        if (td_safetensors_save(save, names, td_mlp_params(mlp), 4) != TD_OK) {
            die("save");
            goto finalize;
        }
    }
    rc = 0;
finalize:
    td_batcher_free(batcher);
    td_dist_optim_destroy(opt);
    td_mlp_free(mlp);
    td_tensor_release(tr_x);
    td_tensor_release(tr_y);
    td_tensor_release(te_x);
    td_tensor_release(te_y);
    if (td_finalize() != TD_OK) {
        fprintf(stderr, "fashion_mnist_dp: finalize: %s\n", td_last_error());
        rc = 1;
    }
    return rc;
}
