/* examples/fashion_mnist: train an MLP (784-256-10 by default) on
 * Fashion-MNIST in one process, print one line per epoch:
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

/* OpenBLAS's own thread control; weak, so a build against another CBLAS
 * still links (threads are then that library's business) */
extern void openblas_set_num_threads(int num_threads) __attribute__((weak));

#define FMNIST_MEAN 0.2860
#define FMNIST_STD 0.3530

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
    fprintf(f, "usage: fashion_mnist [--epochs N] [--batch-size N] [--lr X] "
            "[--optimizer sgd|adam] [--threads N] [--seed N] [--data DIR] "
            "[--save FILE] [--hidden N] [--max-batches N]\n");
}

static int
die(const char *what)
{
    fprintf(stderr, "fashion_mnist: %s: %s\n", what, td_last_error());
    return 1;
}

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

int
main(int argc, char **argv)
{
    int epochs, threads, use_adam;
    int64_t batch, hidden, max_batches;
    double lr;
    uint64_t seed;
    const char *data, *save;
    td_tensor_t *tr_x, *tr_y, *te_x, *te_y;
    td_batcher_t *batcher;
    td_mlp_t *mlp;
    td_optim_t *opt;
    td_status_t status;

    {
        fmnist_opts_t o;
        int exit_rc = fmnist_parse_options("fashion_mnist", argc, argv, usage, &o);
        if (exit_rc >= 0) {
            return exit_rc;
        }
        epochs = o.epochs; threads = o.threads; use_adam = o.use_adam;
        batch = o.batch; hidden = o.hidden; max_batches = o.max_batches;
        lr = o.lr; seed = o.seed; data = o.data; save = o.save;
    }
    if (openblas_set_num_threads != NULL) {
        openblas_set_num_threads(threads);
    }

    if (td_fashion_mnist_load(data, 1, &tr_x, &tr_y) != TD_OK) {
        return die("training set");
    }
    if (td_fashion_mnist_load(data, 0, &te_x, &te_y) != TD_OK) {
        return die("test set");
    }
    {
        int64_t sizes[3] = {784, hidden, 10};
        if (td_mlp_create(sizes, 3, TD_FLOAT32, seed, &mlp) != TD_OK) {
            return die("model");
        }
    }
    if (use_adam) {
        td_adam_opts_t ao = td_adam_defaults();
        ao.lr = lr;
        status = td_optim_adam(td_mlp_params(mlp), td_mlp_num_params(mlp), &ao,
                               &opt);
    } else {
        td_sgd_opts_t so = {lr, 0.9, 0, 0, 0};   /* momentum 0.9 */
        status = td_optim_sgd(td_mlp_params(mlp), td_mlp_num_params(mlp), &so,
                              &opt);
    }
    if (status != TD_OK) {
        return die("optimizer");
    }
    if (td_batcher_create(tr_x, tr_y, batch, 1, seed, FMNIST_MEAN, FMNIST_STD,
                          &batcher) != TD_OK) {
        return die("batcher");
    }
    for (int ep = 1; ep <= epochs; ep++) {
        double t0 = now(), loss_sum = 0, acc;
        int64_t nb = 0;
        td_tensor_t *x, *y, *logits, *loss;
        int r;

        td_batcher_start_epoch(batcher, ep);
        while ((r = td_batcher_next(batcher, &x, &y)) == 1) {
            double lv;
            td_optim_zero_grad(opt);
            status = td_mlp_forward(mlp, x, &logits);
            if (status == TD_OK) {
                status = td_cross_entropy(logits, y, TD_REDUCTION_MEAN, &loss);
                td_tensor_release(logits);
            }
            if (status == TD_OK) {
                status = td_backward(&loss, NULL, 1, 0, 0);
                td_tensor_item(loss, &lv);
                loss_sum += lv;
                td_tensor_release(loss);
            }
            if (status == TD_OK) {
                status = td_optim_step(opt);
            }
            td_tensor_release(x);
            td_tensor_release(y);
            if (status != TD_OK) {
                return die("training step");
            }
            if (++nb == max_batches) {
                break;
            }
        }
        if (r < 0) {
            return die("batch");
        }
        if (evaluate(mlp, te_x, te_y, &acc) != TD_OK) {
            return die("evaluation");
        }
        printf("epoch=%d train_loss=%.4f test_accuracy=%.4f seconds=%.1f\n",
               ep, nb > 0 ? loss_sum / (double)nb : 0.0, acc, now() - t0);
        fflush(stdout);
    }
    if (save != NULL) {
        const char *names[] = {"fc1.weight", "fc1.bias", "fc2.weight",
                               "fc2.bias"};
        if (td_safetensors_save(save, names, td_mlp_params(mlp), 4) != TD_OK) {
            return die("save");
        }
    }
    td_batcher_free(batcher);
    td_optim_free(opt);
    td_mlp_free(mlp);
    td_tensor_release(tr_x);
    td_tensor_release(tr_y);
    td_tensor_release(te_x);
    td_tensor_release(te_y);
    return 0;
}
