/* zero_el_worker: ZeRO in an in-place recovery (todist/zero.h R1-R4,
 * todist/elastic.h), for tests/elastic/test_zero_elastic.sh; 4 ranks under
 * todist-run --no-kill.
 *
 *   zero_el_worker avg|rs DIE1 DIE2 STEP before|mid STEPS rep|norep
 *
 * Two float64 parameters (23 and 4 x 5 elements: 43, cut 11/11/11/10 at 4
 * ranks, 15/14/14 at 3) and Adam (lr 0.01, L2 weight decay 0.01) sharded
 * by ZeRO (replicate with "rep"). Step s's data are 12 pieces; group rank
 * r of W takes the pieces d with d % W == r, and piece d's gradient is
 * h(s, d, k, p) = ((7s + 3d + 5k) % 17 - 8) / 4 + (p[k] > 0 ? 1/2 : -1/2):
 * quarter-integers, so every sum is exact whatever its order and the
 * averaged gradient (the sum over the group, divided by W) has the same
 * bits however the collective adds; it depends on the parameters. "avg"
 * sums the local gradients with td_all_reduce, divides by W and steps with
 * td_zero_step_averaged (as after DDP); "rs" leaves them in .grad for
 * td_zero_step (reduce-scatter). World ranks DIE1 and DIE2 (-1: none) are
 * SIGKILLed at step STEP: "before" its gradient's all-reduce, "mid" after
 * it (avg only), so the survivors step their shards and fail in the
 * all-gather (R3's snapshot). Each rank runs the reference in its process:
 * the same Adam over the whole 43-element vector, stepped with every
 * committed step's averaged gradient at that step's W; a dropped step is
 * redone at the new W. After every committed step each rank prints
 * "rank R step S world W loss L ref L'" (L = sum |p - 1| of its
 * parameters, L' of the reference, both %a), after every re-shard and at
 * the end "rank R state ok" when its shard's Adam moments and step count
 * equal the reference's elements bit for bit ("state WRONG ..." if not).
 * A re-shard refused (TD_ERR_STATE: a shard lost) prints "rank R reshard
 * refused: ERROR" and exits 4. Under todist-run --replace 1 the
 * replacement joins (td_elastic_join, td_zero_join) at the step G the
 * admitter chose; it replays the reference (W 4 before STEP, 3 from STEP
 * to G), all four run 3 more steps. Without a replacement the run ends at
 * step STEPS. With CKDIR, every rank saves a checkpoint with the ZeRO
 * item (td_checkpoint_add_zero) to CKDIR after step 2, frees its ZeRO
 * optimizer and loads the checkpoint into a new one: the state, replicas
 * included, must be the saved one. The ZeRO item
 * is in the checkpoint the heals broadcast (which skips it). */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <todist/todist.h>
#include "tests/peer_die.h"     /* the death: peer_die() */

enum { NA = 23, NB = 20, NT = NA + NB, PIECES = 12 };

static int rank = -1;

static int
fail(const char *what)
{
    fprintf(stderr, "zero_el_worker: rank %d: %s: %s\n", rank, what,
            td_last_error());
    return 1;
}

static double
h(int64_t s, int d, int k, double p)
{
    return (double)((7 * s + 3 * d + 5 * k) % 17 - 8) / 4 +
           (p > 0 ? 0.5 : -0.5);
}

static double
loss_of(const double *p)
{
    double l = 0;

    for (int k = 0; k < NT; k++) {
        l += p[k] > 1 ? p[k] - 1 : 1 - p[k];
    }
    return l;
}

/* The reference: one Adam over the whole vector. */
typedef struct {
    td_tensor_t *p, *g;
    td_optim_t  *opt;
} ref_t;

static td_adam_opts_t
adam_opts(void)
{
    td_adam_opts_t o = td_adam_defaults();

    o.lr = 0.01;
    o.weight_decay = 0.01;
    return o;
}

static void
init_params(double *p)
{
    for (int k = 0; k < NT; k++) {
        p[k] = (double)(k % 7 - 3) / 8;
    }
}

static td_status_t
ref_make(ref_t *r)
{
    int64_t n = NT;
    td_adam_opts_t o = adam_opts();
    td_status_t st;

    if ((st = td_tensor_zeros(&n, 1, TD_FLOAT64, &r->p)) != TD_OK ||
        (st = td_tensor_zeros(&n, 1, TD_FLOAT64, &r->g)) != TD_OK ||
        (st = td_tensor_set_requires_grad(r->p, 1)) != TD_OK ||
        (st = td_tensor_set_grad(r->p, r->g)) != TD_OK) {
        return st;
    }
    init_params(td_tensor_data(r->p));
    return td_optim_adam(&r->p, 1, &o, &r->opt);
}

/* Step S of the reference at world size W. */
static td_status_t
ref_step(ref_t *r, int64_t s, int w)
{
    double *p = td_tensor_data(r->p), *g = td_tensor_data(r->g);

    for (int k = 0; k < NT; k++) {
        double sum = 0;

        for (int d = 0; d < PIECES; d++) {
            sum += h(s, d, k, p[k]);
        }
        g[k] = sum / w;
    }
    return td_optim_step(r->opt);
}

/* This rank's shard state against the reference's elements. */
static void
check_state(td_zero_t *z, ref_t *r, const char *when)
{
    td_optim_t *opt = td_zero_optim(z);
    int64_t off, len;
    int good = 1;

    td_zero_shard(z, &off, &len, NULL);
    if (opt != NULL) {
        good = td_optim_param_step(opt, 0) == td_optim_param_step(r->opt, 0);
        for (int b = 0; good && b < 2; b++) {
            td_tensor_t *mine, *ref;

            good = td_optim_buffer(opt, 0, b, &mine) == TD_OK &&
                   td_optim_buffer(r->opt, 0, b, &ref) == TD_OK &&
                   memcmp(td_tensor_data(mine),
                          (const double *)td_tensor_data(ref) + off,
                          (size_t)len * sizeof(double)) == 0;
        }
    }
    if (good) {
        printf("rank %d state ok %s\n", rank, when);
    } else {
        printf("rank %d state WRONG %s: step %lld, reference %lld\n", rank,
               when, (long long)(opt != NULL ? td_optim_param_step(opt, 0) : -1),
               (long long)td_optim_param_step(r->opt, 0));
    }
}

/* The local gradient of step S (group rank GR of W) into the .grads. */
static void
local_grads(td_tensor_t **pr, int64_t s, int gr, int w)
{
    for (int i = 0, k0 = 0; i < 2; k0 += (int)td_tensor_numel(pr[i]), i++) {
        const double *p = td_tensor_data(pr[i]);
        double *g = td_tensor_data(td_tensor_grad(pr[i]));

        for (int k = 0; k < (int)td_tensor_numel(pr[i]); k++) {
            g[k] = 0;
            for (int d = gr; d < PIECES; d += w) {
                g[k] += h(s, d, k0 + k, p[k]);
            }
        }
    }
}

/* avg: all_reduce the .grads (SUM), divide by W */
static td_status_t
average(td_group_t *g, td_tensor_t **pr, td_tensor_t *flat)
{
    double *f = td_tensor_data(flat);
    int w = td_group_size(g);
    td_status_t st;

    memcpy(f, td_tensor_data(td_tensor_grad(pr[0])), NA * sizeof(double));
    memcpy(f + NA, td_tensor_data(td_tensor_grad(pr[1])), NB * sizeof(double));
    if ((st = td_all_reduce(g, flat, TD_REDUCE_SUM)) != TD_OK) {
        return st;
    }
    for (int k = 0; k < NT; k++) {
        f[k] /= w;
    }
    memcpy(td_tensor_data(td_tensor_grad(pr[0])), f, NA * sizeof(double));
    memcpy(td_tensor_data(td_tensor_grad(pr[1])), f + NA, NB * sizeof(double));
    return TD_OK;
}

static double
params_loss(td_tensor_t **pr)
{
    double p[NT];

    memcpy(p, td_tensor_data(pr[0]), NA * sizeof(double));
    memcpy(p + NA, td_tensor_data(pr[1]), NB * sizeof(double));
    return loss_of(p);
}

/* A re-shard that lost a shard ends this rank (exit 4). */
static td_status_t
reshard(td_zero_t *z, td_group_t *g)
{
    td_status_t st = td_zero_set_group(z, g);

    if (st == TD_ERR_STATE) {
        printf("rank %d reshard refused: %s\n", rank, td_last_error());
        fflush(stdout);
        _exit(4);
    }
    return st;
}

int
main(int argc, char **argv)
{
    int64_t sa[1] = {NA}, sb[2] = {4, 5}, sf[1] = {NT};
    int64_t step = 0, until, grew_at = -1, die_step;
    td_tensor_t *pr[2], *flat;
    td_checkpoint_t *ck;
    td_elastic_t *el;
    td_elastic_change_t ch;
    td_zero_opts_t zo;
    td_zero_t *z;
    ref_t ref;
    int avg, die1, die2, mid, w, grew;
    td_status_t s;

    if ((argc != 8 && argc != 9) || (strcmp(argv[1], "avg") != 0 &&
                      strcmp(argv[1], "rs") != 0) ||
        (strcmp(argv[5], "before") != 0 && strcmp(argv[5], "mid") != 0)) {
        fprintf(stderr, "usage: zero_el_worker avg|rs DIE1 DIE2 STEP "
                "before|mid STEPS rep|norep [CKDIR]\n");
        return 2;
    }
    avg = strcmp(argv[1], "avg") == 0;
    die1 = atoi(argv[2]);
    die2 = atoi(argv[3]);
    die_step = atoll(argv[4]);
    mid = strcmp(argv[5], "mid") == 0;
    until = atoll(argv[6]);
    if (td_init(NULL) != TD_OK) {
        return fail("td_init");
    }
    rank = td_group_rank(td_group_world());
    memset(&zo, 0, sizeof(zo));
    zo.optim = TD_ZERO_ADAM;
    zo.adam = adam_opts();
    zo.replicate = strcmp(argv[7], "rep") == 0;
    if (td_tensor_zeros(sa, 1, TD_FLOAT64, &pr[0]) != TD_OK ||
        td_tensor_zeros(sb, 2, TD_FLOAT64, &pr[1]) != TD_OK ||
        td_tensor_zeros(sf, 1, TD_FLOAT64, &flat) != TD_OK ||
        ref_make(&ref) != TD_OK || td_checkpoint_create(&ck) != TD_OK ||
        td_checkpoint_add_tensor(ck, "a", pr[0]) != TD_OK ||
        td_checkpoint_add_tensor(ck, "b", pr[1]) != TD_OK) {
        return fail("setup");
    }
    for (int i = 0; i < 2; i++) {
        td_tensor_t *g;

        if (td_tensor_zeros(i == 0 ? sa : sb, i + 1, TD_FLOAT64, &g) !=
                TD_OK ||
            td_tensor_set_requires_grad(pr[i], 1) != TD_OK ||
            td_tensor_set_grad(pr[i], g) != TD_OK) {
            return fail("setup");
        }
        td_tensor_release(g);
    }
    if (td_elastic_replacement()) {
        if (td_elastic_join(NULL, &el, &ch) != TD_OK) {
            return fail("join");
        }
        step = grew_at = ch.step;
        until = step + 3;
        zo.group = td_elastic_group(el);
        if (td_zero_create(pr, 2, &zo, &z) != TD_OK ||
            td_checkpoint_add_zero(ck, "zero", z) != TD_OK) {
            return fail("td_zero_create");
        }
        if (td_checkpoint_broadcast(ck, td_elastic_group(el), ch.source) !=
            TD_OK) {
            return fail("heal");
        }
        td_elastic_commit(el, ch.step);
        if (td_zero_join(z) != TD_OK) {
            return fail("td_zero_join");
        }
        for (int64_t t = 1; t <= step; t++) {       /* replay */
            if (ref_step(&ref, t, t < die_step ? 4 : 3) != TD_OK) {
                return fail("reference");
            }
        }
        printf("rank %d joined at step %lld\n", rank, (long long)step);
        check_state(z, &ref, "after the join");
    } else {
        double p0[NT];

        init_params(p0);
        memcpy(td_tensor_data(pr[0]), p0, NA * sizeof(double));
        memcpy(td_tensor_data(pr[1]), p0 + NA, NB * sizeof(double));
        if (td_elastic_create(NULL, &el) != TD_OK) {
            return fail("td_elastic_create");
        }
        zo.group = td_elastic_group(el);
        if (td_zero_create(pr, 2, &zo, &z) != TD_OK ||
            td_checkpoint_add_zero(ck, "zero", z) != TD_OK) {
            return fail("td_zero_create");
        }
    }
    while (until < 0 || step < until) {
        td_group_t *g = td_elastic_group(el);
        int dies = (rank == die1 || rank == die2) &&
                   !td_elastic_replacement() && step + 1 == die_step;
        const char *where = "the gradient's reduction";

        w = td_group_size(g);
        if (dies && !mid) {
            peer_die();
        }
        local_grads(pr, step + 1, td_group_rank(g), w);
        s = avg ? average(g, pr, flat) : TD_OK;
        if (dies) {
            peer_die();                 /* mid: after the all-reduce */
        }
        if (s == TD_OK) {
            where = "the ZeRO step";
            s = avg ? td_zero_step_averaged(z) : td_zero_step(z);
        }
        if (s != TD_OK) {
            printf("rank %d step %lld failed in %s\n", rank,
                   (long long)step + 1, where);
            for (;;) {
                if (td_elastic_recover(el, &ch) != TD_OK) {
                    return fail("recover");
                }
                printf("rank %d recovered: epoch %lld step %lld behind %d "
                       "world %d -> %d\n", rank, (long long)ch.epoch,
                       (long long)ch.step, ch.behind, ch.old_size,
                       ch.new_size);
                if (ch.behind &&
                    td_checkpoint_broadcast(ck, td_elastic_group(el),
                                            ch.source) != TD_OK) {
                    continue;
                }
                if (ch.self_behind) {
                    td_elastic_commit(el, ch.step);
                }
                if (reshard(z, td_elastic_group(el)) == TD_OK) {
                    break;
                }
            }
            check_state(z, &ref, "after the re-shard");
            fflush(stdout);
            continue;
        }
        step++;
        if (ref_step(&ref, step, w) != TD_OK) {
            return fail("reference");
        }
        printf("rank %d step %lld world %d loss %a ref %a\n", rank,
               (long long)step, w, params_loss(pr),
               loss_of(td_tensor_data(ref.p)));
        td_elastic_commit(el, step);
        if (argc == 9 && step == 2) {
            /* the state saved and loaded back: the replicas too (ckzero.c) */
            char path[4096];

            snprintf(path, sizeof(path), "%s/ck.safetensors", argv[8]);
            if (td_checkpoint_save(ck, path) != TD_OK) {
                return fail("checkpoint at step 2");
            }
            td_checkpoint_free(ck);
            td_zero_free(z);
            if (td_zero_create(pr, 2, &zo, &z) != TD_OK ||
                td_checkpoint_create(&ck) != TD_OK ||
                td_checkpoint_add_tensor(ck, "a", pr[0]) != TD_OK ||
                td_checkpoint_add_tensor(ck, "b", pr[1]) != TD_OK ||
                td_checkpoint_add_zero(ck, "zero", z) != TD_OK ||
                td_checkpoint_load(ck, path) != TD_OK) {
                return fail("load at step 2");
            }
            printf("rank %d saved and loaded at step 2\n", rank);
        }
        if (td_elastic_admit(el, &ch, &grew) != TD_OK) {
            return fail("admit");
        }
        if (grew) {
            if (td_checkpoint_broadcast(ck, td_elastic_group(el),
                                        ch.source) != TD_OK ||
                reshard(z, td_elastic_group(el)) != TD_OK) {
                return fail("heal the joiner");
            }
            printf("rank %d grew at step %lld: world %d -> %d\n", rank,
                   (long long)ch.step, ch.old_size, ch.new_size);
            check_state(z, &ref, "after the growth");
            grew_at = ch.step;
            until = grew_at + 3;
        }
        fflush(stdout);
    }
    check_state(z, &ref, "at the end");
    printf("rank %d done: step %lld world %d grew at %lld\n", rank,
           (long long)step, td_group_size(td_elastic_group(el)),
           (long long)grew_at);
    fflush(stdout);
    td_zero_free(z);
    td_checkpoint_free(ck);
    td_optim_free(ref.opt);
    td_tensor_release(ref.p);
    td_tensor_release(ref.g);
    td_tensor_release(flat);
    td_tensor_release(pr[0]);
    td_tensor_release(pr[1]);
    td_elastic_free(el);
    return td_finalize() == TD_OK ? 0 : fail("td_finalize");
}
