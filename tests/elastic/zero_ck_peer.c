/* tests/elastic/zero_ck_peer.c: ZeRO shards in checkpoints (todist/
 * checkpoint.h, td_checkpoint_add_zero), run by test_zero_ckpt.sh under
 * todist-run at several world sizes.
 *
 *   zero_ck_peer --from A --to B [--load PATH] [--save PATH] [--log FILE]
 *                [--plain-save PATH] [--die-at STAGE]
 *
 * trains global steps A..B-1 of a model whose every step's global batch
 * (12 samples) is cut evenly over the ranks, so the averaged gradient is
 * the same at any world size of 1, 2, 3, 4 or 6; ZeRO-1 Adam. --load
 * restores the parameters (replicated) and ZeRO state (sharded) before
 * step A, --save writes them after step B - 1 (every rank: a collective),
 * --log appends every step's loss (the ranks' average, %a) on rank 0;
 * --plain-save writes the parameters alone (no ZeRO item) from rank 0.
 *
 * Checks (PASS/FAIL NAME on rank 0, after an all_reduce of the ranks'
 * failures), against a reference computed here: the plain Adam over a
 * replica stepped with the whole batch's gradient, from step 0:
 *   loaded_state   after --load: this rank's ZeRO Adam state (both moments
 *                  over its shard, and the step count) and the parameters
 *                  equal the reference's at step A (to 1e-10: the saved
 *                  run's reduce-scatter rounds as its world size does);
 *   trained        after step B - 1: the parameters equal the reference's.
 * A failed load prints "rank R: load: ERROR" and exits 2.
 *
 * --die-at kills one rank inside --save's td_checkpoint_save, at a point
 * named by the file being renamed in (this file defines rename(), which
 * the library's calls resolve to; no timers, no library hook), to test
 * ckzero.h ZC1:
 *   part   rank 1, just before its shard file PATH.zero-1-of-W.ID is
 *          renamed in (its complete .tmp file is left);
 *   shard  rank 1, just after it: before the outcomes' all_reduce (in both,
 *          todist-run kills the others wherever they are);
 *   path   rank 0, just before it renames PATH in (after the all_reduce:
 *          every new shard file is in);
 *   clean  rank 0, just after it renamed PATH in, before the older saves'
 *          shard files are removed. */
#include "config.h"

#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>

/* --die-at: the save's PATH and the stage, armed only around the save */
static const char *die_path, *die_at;

#define NP     5
#define GLOBAL 12

static const int64_t shapes[NP][2] = {{7, 5}, {7, 0}, {3, 7}, {3, 0}, {3, 0}};
static int rank, size, n_fail;

static void check(int cond, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
check(int cond, const char *name, const char *fmt, ...)
{
    int64_t one = 1;
    td_tensor_t *bad = NULL;
    double nbad = 0;
    va_list ap;

    td_tensor_full(&one, 1, TD_FLOAT64, cond ? 0 : 1, &bad);
    td_all_reduce(td_group_world(), bad, TD_REDUCE_SUM);
    td_tensor_item(bad, &nbad);
    td_tensor_release(bad);
    if (!cond) {
        fprintf(stderr, "rank %d: %s: ", rank, name);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\n");
    }
    if (rank == 0) {
        printf("%s %s\n", nbad == 0 ? "PASS" : "FAIL", name);
        fflush(stdout);
    }
    n_fail += nbad != 0;
}

/* The library's renames come here (the executable's definition comes
 * first); --die-at's rank raises SIGKILL on itself at its stage. */
int
rename(const char *from, const char *to)
{
    static int (*real)(const char *, const char *);
    char shard[4096];
    int hit = 0, rc;

    if (real == NULL) {
        *(void **)&real = dlsym(RTLD_NEXT, "rename");
        if (real == NULL) {
            raise(SIGKILL);         /* cannot happen with a dynamic libc */
        }
    }
    if (die_at != NULL && die_path != NULL) {
        snprintf(shard, sizeof(shard), "%s.zero-1-of-", die_path);
        if (strcmp(die_at, "shard") == 0 || strcmp(die_at, "part") == 0) {
            hit = rank == 1 && strncmp(to, shard, strlen(shard)) == 0;
        } else {
            hit = rank == 0 && strcmp(to, die_path) == 0;
        }
    }
    if (hit && (strcmp(die_at, "path") == 0 || strcmp(die_at, "part") == 0)) {
        raise(SIGKILL);
    }
    rc = real(from, to);
    if (hit) {
        raise(SIGKILL);
    }
    return rc;
}

static double
val(uint64_t a, uint64_t b)       /* deterministic in [-1, 1) */
{
    uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull);

    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (double)(x >> 11) / (double)(1ull << 52) - 1.0;
}

static void
make_params(td_tensor_t **p)
{
    for (int i = 0; i < NP; i++) {
        int nd = shapes[i][1] ? 2 : 1;
        int64_t numel = shapes[i][0] * (nd == 2 ? shapes[i][1] : 1);

        td_tensor_zeros(shapes[i], nd, TD_FLOAT64, &p[i]);
        double *d = td_tensor_data(p[i]);
        for (int64_t k = 0; k < numel; k++) {
            d[k] = 0.5 * val(i, k);
        }
        td_tensor_set_requires_grad(p[i], 1);
    }
}

/* Clear P's .grads; backward of the loss of samples [LO, HI) of STEP's
 * batch (mse mean + 0.1 * sum(e * e)) into them; the loss in *LOSS_V. */
static td_status_t
grads_of(td_tensor_t **p, int lo, int hi, int step, double *loss_v)
{
    int b = hi - lo;
    double x[GLOBAL * 5], y[GLOBAL * 3];
    int64_t xs[2] = {b, 5}, ys[2] = {b, 3};
    td_tensor_t *xt = NULL, *yt = NULL, *h = NULL, *a = NULL, *o = NULL,
                *mse = NULL, *ee = NULL, *es = NULL, *reg = NULL, *loss = NULL;
    td_status_t st;

    for (int i = 0; i < NP; i++) {
        td_tensor_set_grad(p[i], NULL);
    }
    for (int k = 0; k < b * 5; k++) {
        x[k] = val(1000 + step, lo * 5 + k);
    }
    for (int k = 0; k < b * 3; k++) {
        y[k] = val(2000 + step, lo * 3 + k);
    }
    if ((st = td_tensor_from_data(x, xs, 2, TD_FLOAT64, &xt)) == TD_OK &&
        (st = td_tensor_from_data(y, ys, 2, TD_FLOAT64, &yt)) == TD_OK &&
        (st = td_linear(xt, p[0], p[1], &h)) == TD_OK &&
        (st = td_tanh(h, &a)) == TD_OK &&
        (st = td_linear(a, p[2], p[3], &o)) == TD_OK &&
        (st = td_mse_loss(o, yt, TD_REDUCTION_MEAN, &mse)) == TD_OK &&
        (st = td_mul(p[4], p[4], &ee)) == TD_OK &&
        (st = td_sum(ee, &es)) == TD_OK &&
        (st = td_mul_scalar(es, 0.1, &reg)) == TD_OK &&
        (st = td_add(mse, reg, &loss)) == TD_OK &&
        (st = td_tensor_item(loss, loss_v)) == TD_OK) {
        st = td_backward(&loss, NULL, 1, 0, 0);
    }
    td_tensor_release(xt);
    td_tensor_release(yt);
    td_tensor_release(h);
    td_tensor_release(a);
    td_tensor_release(o);
    td_tensor_release(mse);
    td_tensor_release(ee);
    td_tensor_release(es);
    td_tensor_release(reg);
    td_tensor_release(loss);
    return st;
}

static td_adam_opts_t
adam_opts(void)
{
    td_adam_opts_t a = td_adam_defaults();

    a.lr = 0.05;
    return a;
}

/* The reference's parameters and Adam after STEPS steps. */
static td_status_t
reference(int steps, td_tensor_t **ref, td_optim_t **opt)
{
    td_adam_opts_t a = adam_opts();
    double loss;
    td_status_t st;

    make_params(ref);
    if ((st = td_optim_adam(ref, NP, &a, opt)) != TD_OK) {
        return st;
    }
    for (int s = 0; s < steps && st == TD_OK; s++) {
        if ((st = grads_of(ref, 0, GLOBAL, s, &loss)) == TD_OK) {
            st = td_optim_step(*opt);
        }
    }
    return st;
}

static double
params_diff(td_tensor_t **a, td_tensor_t **b)
{
    double m = 0;

    for (int i = 0; i < NP; i++) {
        const double *x = td_tensor_data(a[i]), *y = td_tensor_data(b[i]);

        for (int64_t k = 0; k < td_tensor_numel(a[i]); k++) {
            m = fmax(m, fabs(x[k] - y[k]));
        }
    }
    return m;
}

/* Max difference of Z's state (both Adam moments over its shard) from the
 * reference's REF_OPT, flattened over the parameters; step counts in
 * *ZSTEP, *RSTEP. */
static double
state_diff(td_zero_t *z, td_optim_t *ref_opt, int64_t *zstep, int64_t *rstep)
{
    td_optim_t *zo = td_zero_optim(z);
    int64_t off, len, total;
    double m = 0;

    td_zero_shard(z, &off, &len, &total);
    *zstep = zo != NULL ? td_optim_param_step(zo, 0) : -1;
    *rstep = td_optim_param_step(ref_opt, 0);
    for (int b = 0; zo != NULL && b < 2; b++) {
        td_tensor_t *zb;
        int64_t flat = 0;

        if (td_optim_buffer(zo, 0, b, &zb) != TD_OK) {
            return INFINITY;
        }
        for (int i = 0; i < NP; i++) {
            td_tensor_t *rb;
            const double *r;

            if (td_optim_buffer(ref_opt, i, b, &rb) != TD_OK) {
                return INFINITY;
            }
            r = td_tensor_data(rb);
            for (int64_t k = 0; k < td_tensor_numel(rb); k++, flat++) {
                if (flat >= off && flat < off + len) {
                    m = fmax(m, fabs(r[k] -
                                     ((double *)td_tensor_data(zb))[flat - off]));
                }
            }
        }
    }
    return m;
}

int
main(int argc, char **argv)
{
    const char *load = NULL, *save = NULL, *log = NULL, *plain = NULL;
    int from = 0, to = 0;
    td_tensor_t *p[NP] = {0}, *ref[NP] = {0};
    td_optim_t *ref_opt = NULL;
    td_zero_opts_t zo;
    td_zero_t *z = NULL;
    td_checkpoint_t *ck = NULL;
    td_status_t st;
    FILE *lf = NULL;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--from") == 0) {
            from = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--to") == 0) {
            to = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--load") == 0) {
            load = argv[i + 1];
        } else if (strcmp(argv[i], "--save") == 0) {
            save = argv[i + 1];
        } else if (strcmp(argv[i], "--plain-save") == 0) {
            plain = argv[i + 1];
        } else if (strcmp(argv[i], "--log") == 0) {
            log = argv[i + 1];
        } else if (strcmp(argv[i], "--die-at") == 0) {
            die_at = argv[i + 1];
        }
    }
    if ((st = td_init(NULL)) != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 1;
    }
    rank = td_group_rank(td_group_world());
    size = td_group_size(td_group_world());
    if (GLOBAL % size != 0) {
        fprintf(stderr, "world size %d does not divide %d\n", size, GLOBAL);
        td_finalize();
        return 1;
    }
    memset(&zo, 0, sizeof(zo));
    zo.optim = TD_ZERO_ADAM;
    zo.adam = adam_opts();
    make_params(p);
    if ((st = td_zero_create(p, NP, &zo, &z)) != TD_OK ||
        (st = td_checkpoint_create(&ck)) != TD_OK ||
        (st = td_checkpoint_add_tensors(ck, "model", p, NP)) != TD_OK ||
        (st = td_checkpoint_add_zero(ck, "zero", z)) != TD_OK) {
        fprintf(stderr, "rank %d: setup: %s\n", rank, td_last_error());
        return 1;
    }
    if (load != NULL) {
        int64_t zstep = 0, rstep = 0;
        double sd, pd;

        int64_t one = 1;
        double any = 1;
        td_tensor_t *bad = NULL;

        /* every rank learns whether one failed, so all exit together */
        if ((st = td_checkpoint_load(ck, load)) != TD_OK) {
            fprintf(stderr, "rank %d: load: %s\n", rank, td_last_error());
        }
        if (td_tensor_full(&one, 1, TD_FLOAT64, st != TD_OK, &bad) == TD_OK &&
            td_all_reduce(td_group_world(), bad, TD_REDUCE_MAX) == TD_OK) {
            td_tensor_item(bad, &any);
        }
        td_tensor_release(bad);
        if (any != 0) {
            /* freed as on success: the ASan build's leak check runs here */
            for (int i = 0; i < NP; i++) {
                td_tensor_release(p[i]);
            }
            td_checkpoint_free(ck);
            td_zero_free(z);
            td_finalize();
            return 2;
        }
        st = reference(from, ref, &ref_opt);
        sd = st == TD_OK ? state_diff(z, ref_opt, &zstep, &rstep) : INFINITY;
        pd = st == TD_OK ? params_diff(p, ref) : INFINITY;
        check(st == TD_OK && sd <= 1e-10 && pd <= 1e-10 &&
              (zstep == rstep || td_zero_optim(z) == NULL), "loaded_state",
              "state diff %.3g, params diff %.3g, step %lld vs %lld", sd, pd,
              (long long)zstep, (long long)rstep);
        td_optim_free(ref_opt);
        ref_opt = NULL;
        for (int i = 0; i < NP; i++) {
            td_tensor_release(ref[i]);
            ref[i] = NULL;
        }
    }
    if (log != NULL && rank == 0 && (lf = fopen(log, "a")) == NULL) {
        perror(log);
        return 1;
    }
    for (int s = from; s < to && st == TD_OK; s++) {
        int per = GLOBAL / size;
        int64_t one = 1;
        double loss = 0;
        td_tensor_t *lt = NULL;

        if ((st = grads_of(p, rank * per, (rank + 1) * per, s, &loss)) ==
                TD_OK &&
            (st = td_zero_step(z)) == TD_OK &&
            (st = td_tensor_full(&one, 1, TD_FLOAT64, loss, &lt)) == TD_OK &&
            (st = td_all_reduce(td_group_world(), lt, TD_REDUCE_AVG)) ==
                TD_OK &&
            (st = td_tensor_item(lt, &loss)) == TD_OK && lf != NULL) {
            fprintf(lf, "%d %a\n", s, loss);
        }
        td_tensor_release(lt);
    }
    if (lf != NULL) {
        fclose(lf);
    }
    die_path = save;
    if (st == TD_OK && save != NULL &&
        (st = td_checkpoint_save(ck, save)) != TD_OK) {
        fprintf(stderr, "rank %d: save: %s\n", rank, td_last_error());
    }
    die_path = NULL;
    if (st == TD_OK && plain != NULL && rank == 0) {
        td_checkpoint_t *pc = NULL;

        if ((st = td_checkpoint_create(&pc)) != TD_OK ||
            (st = td_checkpoint_add_tensors(pc, "model", p, NP)) != TD_OK ||
            (st = td_checkpoint_save(pc, plain)) != TD_OK) {
            fprintf(stderr, "rank %d: plain save: %s\n", rank,
                    td_last_error());
        }
        td_checkpoint_free(pc);
    }
    if (st == TD_OK) {
        double pd;

        st = reference(to, ref, &ref_opt);
        pd = st == TD_OK ? params_diff(p, ref) : INFINITY;
        check(st == TD_OK && pd <= 1e-10, "trained", "params diff %.3g", pd);
    } else {
        fprintf(stderr, "rank %d: %s\n", rank, td_last_error());
        n_fail++;
    }
    td_optim_free(ref_opt);
    for (int i = 0; i < NP; i++) {
        td_tensor_release(ref[i]);
        td_tensor_release(p[i]);
    }
    td_checkpoint_free(ck);
    td_zero_free(z);
    td_finalize();
    return n_fail ? 1 : 0;
}
