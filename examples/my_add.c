/* examples/my_add: the distributed-autograd example from PyTorch's
 * "Distributed Autograd Design" note, in C. Run with todist-run -n 2.
 *
 * Worker 0, inside a distributed autograd context: t1, t2 random 3x3
 * (requires grad), t3 = my_add(t1, t2) on worker 1 via RPC, t4 random
 * 3x3, loss = sum(t3 * t4), distributed backward, then the gradients of
 * t1 and t2 from the context. Prints t1, t2, t4, grad_t1, grad_t2 as
 * name=[v,v,...] (row-major, %.6f) and check=ok when both gradients equal
 * the analytic d loss / d t1 = d loss / d t2 = t4.
 * Options: --seed N (default 0). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>

static td_status_t
my_add(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
       td_rpc_list_t *result)
{
    td_tensor_t *a, *b, *sum = NULL;
    td_status_t status;

    (void)arg;
    (void)info;
    status = td_rpc_list_tensor(args, 0, &a);
    if (status == TD_OK) {
        status = td_rpc_list_tensor(args, 1, &b);
    }
    if (status == TD_OK) {
        status = td_add(a, b, &sum);
    }
    if (status == TD_OK) {
        status = td_rpc_list_add_tensor(result, sum);
    }
    td_tensor_release(sum);
    return status;
}

static td_tensor_t *
rand33(uint64_t seed, int requires_grad)
{
    int64_t shape[2] = {3, 3};
    td_tensor_t *t = NULL;

    if (td_tensor_empty(shape, 2, TD_FLOAT32, TD_CPU, &t) != TD_OK ||
        td_tensor_uniform_(t, 0.0, 1.0, seed) != TD_OK) {
        td_tensor_release(t);
        return NULL;
    }
    if (requires_grad) {
        td_tensor_set_requires_grad(t, 1);
    }
    return t;
}

static void
print(const char *name, td_tensor_t *t)
{
    const float *v = td_tensor_data(t);

    printf("%s=[", name);
    for (int i = 0; i < 9; i++) {
        printf("%s%.6f", i ? "," : "", v[i]);
    }
    printf("]\n");
}

static int
equal(td_tensor_t *a, td_tensor_t *b)
{
    const float *x = td_tensor_data(a), *y = td_tensor_data(b);

    for (int i = 0; i < 9; i++) {
        if (fabsf(x[i] - y[i]) > 1e-6f) {
            return 0;
        }
    }
    return 1;
}

static int
run(uint64_t seed)
{
    td_tensor_t *t1 = rand33(seed * 3 + 1, 1), *t2 = rand33(seed * 3 + 2, 1);
    td_tensor_t *t4 = rand33(seed * 3 + 3, 1), *t3 = NULL, *t5 = NULL;
    td_tensor_t *loss = NULL, *g1 = NULL, *g2 = NULL;
    td_rpc_list_t *args = NULL, *res = NULL;
    td_status_t status;
    int64_t ctx;
    int rc = 1;

    status = td_dist_autograd_begin(&ctx);
    if (status != TD_OK) {
        goto out;
    }
    status = td_rpc_list_create(&args);
    if (status == TD_OK) {
        status = td_rpc_list_add_tensor(args, t1);
    }
    if (status == TD_OK) {
        status = td_rpc_list_add_tensor(args, t2);
    }
    if (status == TD_OK) {
        status = td_rpc_sync(1, "my_add", args, TD_RPC_DEFAULT_TIMEOUT, &res);
    }
    if (status == TD_OK) {
        status = td_rpc_list_tensor(res, 0, &t3);
    }
    if (status == TD_OK) {
        status = td_mul(t3, t4, &t5);
    }
    if (status == TD_OK) {
        status = td_sum(t5, &loss);
    }
    if (status == TD_OK) {
        status = td_dist_backward(ctx, &loss, 1, 0);
    }
    if (status == TD_OK) {
        status = td_dist_get_gradient(ctx, t1, &g1);
    }
    if (status == TD_OK) {
        status = td_dist_get_gradient(ctx, t2, &g2);
    }
    if (status == TD_OK) {
        print("t1", t1);
        print("t2", t2);
        print("t4", t4);
        print("grad_t1", g1);
        print("grad_t2", g2);
        rc = equal(g1, t4) && equal(g2, t4) ? 0 : 1;
        printf("check=%s\n", rc == 0 ? "ok" : "FAILED");
    }
    td_dist_autograd_end(ctx);
out:
    if (status != TD_OK) {
        fprintf(stderr, "my_add: %s\n", td_last_error());
    }
    td_rpc_list_free(args);
    td_rpc_list_free(res);
    td_tensor_release(g1);
    td_tensor_release(g2);
    td_tensor_release(t5);
    td_tensor_release(loss);
    td_tensor_release(t1);
    td_tensor_release(t2);
    td_tensor_release(t4);
    return rc;
}

int
main(int argc, char **argv)
{
    uint64_t seed = 0;
    int rc = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: my_add [--seed N] (run with "
                    "todist-run -n 2)\n");
            return 2;
        }
    }
    if (td_rpc_register("my_add", my_add, NULL) != TD_OK ||
        td_init(NULL) != TD_OK) {
        fprintf(stderr, "my_add: %s\n", td_last_error());
        return 1;
    }
    if (td_world()->world_size < 2) {
        fprintf(stderr, "my_add: needs 2 workers (todist-run -n 2)\n");
        rc = 1;
    } else if (td_world()->rank == 0) {
        rc = run(seed);
    }
    if (td_finalize() != TD_OK) {
        fprintf(stderr, "my_add: finalize: %s\n", td_last_error());
        rc = 1;
    }
    return rc;
}
