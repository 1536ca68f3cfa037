/* test_mapreduce.c: TorchOpt's partitioner rules as a table (including the
 * error cases), fixed-worker and user partitioners, and the reducers. Runs
 * in a world of one (no td_init): partitioning and reducing are local. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "tests/tap.h"
#include "todist/todist.h"

/* A [rows, cols] float64 tensor with element [i, j] = 100 i + j. */
static td_tensor_t *
grid(int64_t rows, int64_t cols)
{
    int64_t shape[2] = { rows, cols };
    td_tensor_t *t;

    td_tensor_empty(shape, 2, TD_FLOAT64, TD_CPU, &t);
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t j = 0; j < cols; j++) {
            ((double *)td_tensor_data(t))[i * cols + j] = 100.0 * i + j;
        }
    }
    return t;
}

typedef struct {
    const char *name;
    int dim, exclusive, keepdim;
    int workers[4], n_workers;       /* n_workers 0: NULL (world of one) */
    int64_t a_rows, a_cols;          /* first tensor */
    int64_t b_rows, b_cols;          /* second tensor (0: none) */
    td_status_t status;
    const char *error;               /* regex on td_last_error() */
    int n_parts;
    int ranks[8];
    int64_t starts[8], lens[8];      /* along the dim; len -1: dim removed */
} row_t;

static const row_t rows[] = {
    { "batch B=3 <= W=4: single-row parts", 0, 0, 1, { 0, 1, 2, 3 }, 4,
      3, 2, 3, 5, TD_OK, NULL, 3, { 0, 1, 2 }, { 0, 1, 2 }, { 1, 1, 1 } },
    { "batch B=4 == W=4", 0, 0, 1, { 0, 1, 2, 3 }, 4, 4, 2, 0, 0, TD_OK,
      NULL, 4, { 0, 1, 2, 3 }, { 0, 1, 2, 3 }, { 1, 1, 1, 1 } },
    { "batch B=10 > W=4: chunks of 2, remainder in the last", 0, 0, 1,
      { 0, 1, 2, 3 }, 4, 10, 3, 10, 1, TD_OK, NULL, 4, { 0, 1, 2, 3 },
      { 0, 2, 4, 6 }, { 2, 2, 2, 4 } },
    { "batch B=10 > W=3: chunks of 3, last 4", 0, 0, 1, { 0, 1, 2 }, 3,
      10, 2, 0, 0, TD_OK, NULL, 3, { 0, 1, 2 }, { 0, 3, 6 }, { 3, 3, 4 } },
    { "dim 1, B=5 > W=2: chunks 2 and 3", 1, 0, 1, { 0, 1 }, 2, 2, 5, 3, 5,
      TD_OK, NULL, 2, { 0, 1 }, { 0, 2 }, { 2, 3 } },
    { "dim -1 counts from the end", -1, 0, 1, { 0, 1 }, 2, 2, 5, 0, 0,
      TD_OK, NULL, 2, { 0, 1 }, { 0, 2 }, { 2, 3 } },
    { "exclusive keepdim: one part per index, round-robin", 0, 1, 1,
      { 0, 1 }, 2, 3, 2, 3, 4, TD_OK, NULL, 3, { 0, 1, 0 }, { 0, 1, 2 },
      { 1, 1, 1 } },
    { "exclusive without keepdim: the dim is removed", 0, 1, 0, { 0, 1 }, 2,
      3, 2, 0, 0, TD_OK, NULL, 3, { 0, 1, 0 }, { 0, 1, 2 },
      { -1, -1, -1 } },
    { "exclusive without keepdim on dim 1", 1, 1, 0, { 0, 1, 2 }, 3, 2, 4,
      0, 0, TD_OK, NULL, 4, { 0, 1, 2, 0 }, { 0, 1, 2, 3 },
      { -1, -1, -1, -1 } },
    { "workers given by rank: {3, 1}", 0, 0, 1, { 3, 1 }, 2, 4, 2, 0, 0,
      TD_OK, NULL, 2, { 3, 1 }, { 0, 2 }, { 2, 2 } },
    { "no workers given: every rank of a world of one", 0, 0, 1, { 0 }, 0,
      5, 2, 0, 0, TD_OK, NULL, 1, { 0 }, { 0 }, { 5 } },
    { "empty batch: no parts", 0, 0, 1, { 0, 1 }, 2, 0, 2, 0, 0, TD_OK, NULL,
      0, { 0 }, { 0 }, { 0 } },
    { "batch sizes disagree", 0, 0, 1, { 0, 1 }, 2, 4, 2, 5, 2, TD_ERR_SHAPE,
      "batch size mismatch on dim=0: argument 0 has 4, argument 2 has 5", 0,
      { 0 }, { 0 }, { 0 } },
    { "dim beyond the tensor", 2, 0, 1, { 0, 1 }, 2, 4, 2, 0, 0,
      TD_ERR_SHAPE, "argument 0 has 2 dims, no dim 2", 0, { 0 }, { 0 },
      { 0 } },
    { "exclusive=false keepdim=false is an error", 0, 0, 0, { 0, 1 }, 2, 4,
      2, 0, 0, TD_ERR_INVALID, "keepdim must be true when exclusive is "
      "false", 0, { 0 }, { 0 }, { 0 } },
};

/* Checks one table row: 5 assertions. */
static void
run_row(const row_t *r)
{
    td_partitioner_t p;
    td_rpc_list_t *args;
    td_tensor_t *a = grid(r->a_rows, r->a_cols), *b = NULL;
    td_partition_t *parts = NULL;
    size_t n = 0;
    td_status_t st;

    td_rpc_list_create(&args);
    td_rpc_list_add_tensor(args, a);
    td_rpc_list_add_int(args, 77);                   /* goes whole */
    if (r->b_rows > 0) {
        b = grid(r->b_rows, r->b_cols);
        td_rpc_list_add_tensor(args, b);
    }
    st = td_partitioner_dim(r->dim, r->exclusive, r->keepdim,
                            r->n_workers ? r->workers : NULL, r->n_workers,
                            &p);
    if (st == TD_OK) {
        st = td_partition(&p, args, &parts, &n);
    } else {
        /* A hand-made struct with the same flags is refused too. */
        td_partitioner_t raw = td_partitioner_batch();
        raw.keepdim = 0;
        ok(td_partition(&raw, args, &parts, &n) == TD_ERR_INVALID,
           "%s: refused when applied as well", r->name);
    }
    is_int(st, r->status, "%s: status", r->name);
    if (r->status != TD_OK) {
        like(td_last_error(), r->error, "%s: message", r->name);
        if (r->status != TD_ERR_INVALID) {
            ok(1, "%s: (no parts)", r->name);
        }
        ok(1, "%s: (no parts)", r->name);
        ok(1, "%s: (no parts)", r->name);
        goto out;
    }
    is_int(n, r->n_parts, "%s: %d parts", r->name, r->n_parts);
    int ranks_ok = 1, slices_ok = 1, whole_ok = 1;
    for (size_t k = 0; k < n && k < 8; k++) {
        td_tensor_t *s;
        int64_t v;
        int d = r->dim < 0 ? r->dim + 2 : r->dim;

        ranks_ok &= parts[k].rank == r->ranks[k];
        whole_ok &= td_rpc_list_int(parts[k].args, 1, &v) == TD_OK && v == 77;
        if (td_rpc_list_tensor(parts[k].args, 0, &s) != TD_OK) {
            slices_ok = 0;
            continue;
        }
        if (r->lens[k] < 0) {
            /* dim removed: 1-d, element 0 is row/col START */
            int64_t idx[1] = { 0 };
            double want = d == 0 ? 100.0 * r->starts[k] : (double)r->starts[k];
            slices_ok &= td_tensor_ndim(s) == 1 && td_tensor_get(s, idx) == want;
        } else {
            int64_t idx[2] = { 0, 0 };
            double want = d == 0 ? 100.0 * r->starts[k] : (double)r->starts[k];
            slices_ok &= td_tensor_ndim(s) == 2 &&
                         td_tensor_size(s, d) == r->lens[k] &&
                         td_tensor_get(s, idx) == want;
        }
        if (b != NULL) {
            td_tensor_t *sb;
            slices_ok &= td_rpc_list_tensor(parts[k].args, 2, &sb) == TD_OK &&
                         td_tensor_size(sb, d < 0 ? 0 : d) ==
                         (r->lens[k] < 0 ? td_tensor_size(sb, d) : r->lens[k]);
        }
    }
    ok(ranks_ok, "%s: ranks round-robin", r->name);
    ok(slices_ok, "%s: slices start and length", r->name);
    ok(whole_ok, "%s: non-tensor argument whole in every part", r->name);
out:
    td_partitions_free(parts, n);
    td_rpc_list_free(args);
    td_tensor_release(a);
    td_tensor_release(b);
}

static td_status_t
user_parts(void *arg, const td_rpc_list_t *args, td_partition_t **parts_p,
           size_t *n_p)
{
    td_partition_t *parts = calloc(2, sizeof(*parts));

    (void)arg;
    for (int i = 0; i < 2; i++) {
        parts[i].rank = 0;
        td_rpc_list_copy(args, &parts[i].args);
    }
    *parts_p = parts;
    *n_p = 2;
    return TD_OK;
}

static td_status_t
user_max(void *arg, const td_rpc_list_t *const *results, size_t n,
         td_rpc_list_t *out)
{
    int64_t best = 0, v;

    (void)arg;
    for (size_t i = 0; i < n; i++) {
        td_rpc_list_int(results[i], 0, &v);
        best = v > best ? v : best;
    }
    return td_rpc_list_add_int(out, best);
}

static td_rpc_list_t *
one_tensor(int64_t n, double start)
{
    td_rpc_list_t *l;
    td_tensor_t *t;

    td_tensor_empty(&n, 1, TD_FLOAT64, TD_CPU, &t);
    for (int64_t i = 0; i < n; i++) {
        ((double *)td_tensor_data(t))[i] = start + (double)i;
    }
    td_rpc_list_create(&l);
    td_rpc_list_add_tensor(l, t);
    td_tensor_release(t);
    return l;
}

int
main(void)
{
    size_t n_rows = sizeof(rows) / sizeof(rows[0]);
    td_partition_t *parts;
    size_t n;
    td_rpc_list_t *args, *out;
    td_status_t st;

    unsetenv("TODIST_RANK");
    unsetenv("RANK");
    unsetenv("SLURM_PROCID");
    plan((int)n_rows * 5 + 25);

    for (size_t i = 0; i < n_rows; i++) {
        run_row(&rows[i]);
    }

    /* no tensor arguments: one call on the caller */
    td_partitioner_t batch = td_partitioner_batch();
    td_rpc_list_create(&args);
    td_rpc_list_add_int(args, 1);
    td_rpc_list_add_string(args, "x");
    st = td_partition(&batch, args, &parts, &n);
    ok(st == TD_OK && n == 1 && parts[0].rank == 0 &&
       td_rpc_list_len(parts[0].args) == 2, "no tensors: one part on the "
       "caller with every argument");
    td_partitions_free(parts, n);

    /* fixed worker, by rank and by name; NULL partitioner = self */
    td_partitioner_t fixed = td_partitioner_rank(0);
    st = td_partition(&fixed, args, &parts, &n);
    ok(st == TD_OK && n == 1 && parts[0].rank == 0, "fixed rank");
    td_partitions_free(parts, n);
    fixed = td_partitioner_rank(5);
    is_int(td_partition(&fixed, args, &parts, &n), TD_ERR_RANGE,
           "fixed rank outside the world refused");
    like(td_last_error(), "rank 5 is not below the world size 1",
         "rank and world size named");
    is_int(td_partitioner_worker("worker0", &fixed), TD_OK,
           "worker name resolves");
    is_int(fixed.rank, 0, "worker0 is rank 0");
    is_int(td_partitioner_worker("worker9", &fixed), TD_ERR_NOT_FOUND,
           "unknown worker name refused");
    st = td_partition(NULL, args, &parts, &n);
    ok(st == TD_OK && n == 1 && parts[0].rank == 0, "NULL partitioner: self");
    td_partitions_free(parts, n);

    /* user partitioner */
    td_partitioner_t up = td_partitioner_user(user_parts, NULL);
    st = td_partition(&up, args, &parts, &n);
    ok(st == TD_OK && n == 2, "user partitioner's parts");
    td_partitions_free(parts, n);
    td_rpc_list_free(args);

    /* reducers */
    td_rpc_list_t *r3[3] = { one_tensor(2, 0), one_tensor(2, 10),
                             one_tensor(2, 20) };
    td_reducer_t mean = td_reducer_mean(), sum = td_reducer_sum();
    st = td_reducer_apply(&mean, (const td_rpc_list_t *const *)r3, 3, &out);
    td_tensor_t *t = NULL;
    ok(st == TD_OK && td_rpc_list_tensor(out, 0, &t) == TD_OK &&
       td_tensor_get(t, (int64_t[]){ 0 }) == 10.0 &&
       td_tensor_get(t, (int64_t[]){ 1 }) == 11.0, "mean of three tensors");
    td_rpc_list_free(out);
    st = td_reducer_apply(&sum, (const td_rpc_list_t *const *)r3, 3, &out);
    ok(st == TD_OK && td_rpc_list_tensor(out, 0, &t) == TD_OK &&
       td_tensor_get(t, (int64_t[]){ 1 }) == 33.0, "sum of three tensors");
    td_rpc_list_free(out);
    st = td_reducer_apply(NULL, (const td_rpc_list_t *const *)r3, 3, &out);
    is_int(td_rpc_list_len(out), 3, "no reducer: the list of results");
    td_rpc_list_free(out);

    td_rpc_list_t *bad[2] = { one_tensor(2, 0), one_tensor(3, 0) };
    is_int(td_reducer_apply(&mean, (const td_rpc_list_t *const *)bad, 2, &out),
           TD_ERR_SHAPE, "mean of different shapes refused");
    like(td_last_error(), "shapes \\[2\\] \\(result 0\\) and \\[3\\] "
         "\\(result 1\\)", "both shapes named");
    td_rpc_list_add_int(bad[0], 1);
    is_int(td_reducer_apply(&sum, (const td_rpc_list_t *const *)bad, 2, &out),
           TD_ERR_INVALID, "results of different lengths refused");
    like(td_last_error(), "result 0 has 2 items, result 1 has 1",
         "lengths named");
    td_rpc_list_free(bad[0]);
    td_rpc_list_free(bad[1]);

    td_rpc_list_t *nums[2];
    td_rpc_list_create(&nums[0]);
    td_rpc_list_create(&nums[1]);
    td_rpc_list_add_int(nums[0], 3);
    td_rpc_list_add_double(nums[1], 4.0);
    double d = 0;
    st = td_reducer_apply(&mean, (const td_rpc_list_t *const *)nums, 2, &out);
    ok(st == TD_OK && td_rpc_list_double(out, 0, &d) == TD_OK && d == 3.5,
       "mean of numbers as a double");
    td_rpc_list_free(out);
    td_reducer_t um = td_reducer_user(user_max, NULL);
    int64_t iv = 0;
    td_rpc_list_add_int(nums[0], 0);    /* user reducers see everything */
    st = td_reducer_apply(&um, (const td_rpc_list_t *const *)nums, 1, &out);
    ok(st == TD_OK && td_rpc_list_int(out, 0, &iv) == TD_OK && iv == 3,
       "user reducer");
    td_rpc_list_free(out);
    td_rpc_list_add_string(nums[1], "s");
    td_rpc_list_add_int(nums[1], 0);
    td_rpc_list_t *strs[2];
    td_rpc_list_create(&strs[0]);
    td_rpc_list_create(&strs[1]);
    td_rpc_list_add_string(strs[0], "a");
    td_rpc_list_add_string(strs[1], "b");
    is_int(td_reducer_apply(&sum, (const td_rpc_list_t *const *)strs, 2, &out),
           TD_ERR_INVALID, "sum of strings refused");
    like(td_last_error(), "item 0 is neither a tensor nor a number",
         "the item named");
    is_int(td_reducer_apply(&mean, NULL, 0, &out), TD_ERR_INVALID,
           "mean of nothing refused");
    for (int i = 0; i < 2; i++) {
        td_rpc_list_free(nums[i]);
        td_rpc_list_free(strs[i]);
    }

    /* Differentiable: partition a tensor that requires grad, mean-reduce
     * the slices, backward: each of the 4 rows gets 1/2 (two parts). */
    td_tensor_t *x = grid(4, 2), *loss;
    td_tensor_set_requires_grad(x, 1);
    int w2[2] = { 0, 0 };
    td_partitioner_t p2;
    td_partitioner_dim(0, 0, 1, w2, 2, &p2);
    td_rpc_list_create(&args);
    td_rpc_list_add_tensor(args, x);
    st = td_partition(&p2, args, &parts, &n);
    td_tensor_t *s0 = NULL;
    td_rpc_list_tensor(parts[0].args, 0, &s0);
    ok(st == TD_OK && n == 2 && td_tensor_requires_grad(s0),
       "slices of a tensor requiring grad require grad");
    const td_rpc_list_t *res2[2] = { parts[0].args, parts[1].args };
    st = td_reducer_apply(&mean, res2, 2, &out);
    td_rpc_list_tensor(out, 0, &t);
    st = st == TD_OK ? td_sum(t, &loss) : st;
    st = st == TD_OK ? td_backward(&loss, NULL, 1, 0, 0) : st;
    td_tensor_t *g = td_tensor_grad(x);
    ok(st == TD_OK && g != NULL &&
       td_tensor_get(g, (int64_t[]){ 0, 0 }) == 0.5 &&
       td_tensor_get(g, (int64_t[]){ 3, 1 }) == 0.5,
       "gradient flows through partition and mean reducer");
    td_tensor_release(loss);
    td_rpc_list_free(out);
    td_partitions_free(parts, n);
    td_rpc_list_free(args);
    td_tensor_release(x);

    /* the parallelize idiom is a constant initializer */
    static const td_parallel_t pl =
        TD_PARALLELIZE("f", TD_PARTITIONER_BATCH, TD_REDUCER_MEAN);
    ok(pl.partitioner.kind == TD_PARTITION_DIM && pl.partitioner.keepdim &&
       !pl.partitioner.exclusive && pl.reducer.kind == TD_REDUCER_KIND_MEAN &&
       pl.timeout < 0, "TD_PARALLELIZE builds batch + mean");
    /* calls before td_init fail cleanly */
    is_int(td_parallel_call(&pl, NULL, &out), TD_ERR_STATE,
           "a parallel call before td_init fails cleanly");

    for (int i = 0; i < 3; i++) {
        td_rpc_list_free(r3[i]);
    }
    return exit_status();
}
