/* subgroup_worker: subgroups through in-place recovery (todist/elastic.h,
 * coll group.c G1-G4), for tests/elastic/test_subgroups.sh; 4 ranks under
 * todist-run --no-kill.
 *
 * Every rank makes three groups with td_group_new: A = {0, 1},
 * B = {2, 3}, C = {0, 2}. Each step all_reduces 1 over the epoch's group,
 * then, in each subgroup this rank is in, all_reduces (world rank + 1):
 * the sum must be that of the group's members now, and this rank's group
 * rank and the group's size must be its place in the list of the members
 * now, both worked out here from the layout and who is dead (never from
 * the group). Rank 2 dies before step 3; the survivors recover.
 *
 *   subgroup_worker shrink DIR   6 steps. After the recovery every
 *       survivor prints what td_group_lost reports for A, B and C. Ranks 0
 *       and 2 also step a ZeRO SGD (momentum 0.9) over C, 4 parameters
 *       from 0, with gradient = the step number at steps 1 and 2, and
 *       save it (td_checkpoint_add_zero) to DIR/z.safetensors after step
 *       2. After the recovery rank 0's ZeRO optimizer, which lost half its
 *       shards, refuses to step (it prints the error); rank 0 then makes
 *       it again over C (now {0}) and loads the checkpoint (elastic.c
 *       EL9): the re-cut momentum must be 0.9 x 1 + 2 = 2.9 and the
 *       parameters -0.1 x 1 - 0.1 x 2.9 = -0.39 on all 4 elements.
 *   subgroup_worker grow     (todist-run --no-kill --replace 1) as above
 *       until the replacement for rank 2 joins (td_elastic_join, then the
 *       same td_group_new calls) at step G; 3 more steps at world 4 with
 *       B and C whole again.
 * Every rank ends with "rank R subgroups checked N bad M" (M must be 0)
 * and its last step and world. */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <todist/todist.h>
#include "tests/peer_die.h"     /* the death: peer_die() */

static const int lay[3][2] = {{0, 1}, {2, 3}, {0, 2}};
static const char *gname = "ABC";

static int
fail(int rank, const char *what)
{
    fprintf(stderr, "subgroup_worker: rank %d: %s: %s\n", rank, what,
            td_last_error());
    return 1;
}

static int
make_groups(td_group_t **g)
{
    for (int i = 0; i < 3; i++) {
        if (td_group_new(lay[i], 2, &g[i]) != TD_OK) {
            return -1;
        }
    }
    return 0;
}

/* One step's subgroup all_reduces: *CHECKED and *BAD counted; TD_OK
 * unless an operation failed (then a recovery is due). */
static td_status_t
step_groups(td_group_t **g, int rank, int two_dead, int step, int *checked,
            int *bad)
{
    int64_t one = 1;

    for (int i = 0; i < 3; i++) {
        int want_n = 0, want_rank = -1;
        double want_sum = 0, got;
        td_tensor_t *t;
        td_status_t s;

        for (int k = 0; k < 2; k++) {
            if (lay[i][k] == 2 && two_dead) {
                continue;
            }
            if (lay[i][k] == rank) {
                want_rank = want_n;
            }
            want_n++;
            want_sum += lay[i][k] + 1;
        }
        (*checked)++;
        if (td_group_size(g[i]) != want_n || td_group_rank(g[i]) != want_rank) {
            (*bad)++;
            printf("rank %d step %d: group %c has size %d rank %d, want %d "
                   "and %d\n", rank, step, gname[i], td_group_size(g[i]),
                   td_group_rank(g[i]), want_n, want_rank);
        }
        if (want_rank < 0) {
            continue;
        }
        if (td_tensor_full(&one, 1, TD_FLOAT64, rank + 1, &t) != TD_OK) {
            return TD_ERR_NO_MEMORY;
        }
        s = td_all_reduce(g[i], t, TD_REDUCE_SUM);
        got = ((double *)td_tensor_data(t))[0];
        td_tensor_release(t);
        if (s != TD_OK) {
            return s;
        }
        (*checked)++;
        if (got != want_sum) {
            (*bad)++;
            printf("rank %d step %d: group %c sums to %g, want %g\n", rank,
                   step, gname[i], got, want_sum);
        }
    }
    return TD_OK;
}

static void
print_lost(td_group_t **g, int rank)
{
    printf("rank %d lost:", rank);
    for (int i = 0; i < 3; i++) {
        int r[2], n = td_group_lost(g[i], r, 2);

        printf(" %c=%d", gname[i], n);
        for (int k = 0; k < n && k < 2; k++) {
            printf("%s%d", k ? "," : "(", r[k]);
        }
        printf("%s", n > 0 ? ")" : "");
    }
    printf("\n");
}

/* Rank 0 after the recovery: the ZeRO optimizer over C refuses to step
 * (zero.h Z5); made again over C and loaded from ZPATH (EL9), its state
 * and parameters must be the saved run's at step 2. */
static int
zero_rebuild(int rank, td_group_t *c, const td_zero_opts_t *zo,
             td_tensor_t *zp, td_zero_t **zero, td_checkpoint_t **ckz,
             const char *zpath)
{
    td_status_t s = td_zero_step(*zero);
    td_tensor_t *mom;
    const double *m, *p = td_tensor_data(zp);
    int good = 1;

    printf("rank %d zero over C: %s\n", rank,
           s == TD_ERR_STATE ? td_last_error() : "stepped");
    td_checkpoint_free(*ckz);
    *ckz = NULL;
    td_zero_free(*zero);
    *zero = NULL;
    if (td_zero_create(&zp, 1, zo, zero) != TD_OK ||
        td_checkpoint_create(ckz) != TD_OK ||
        td_checkpoint_add_tensor(*ckz, "p", zp) != TD_OK ||
        td_checkpoint_add_zero(*ckz, "zero", *zero) != TD_OK ||
        td_checkpoint_load(*ckz, zpath) != TD_OK ||
        td_optim_buffer(td_zero_optim(*zero), 0, 0, &mom) != TD_OK) {
        return fail(rank, "zero rebuilt over C");
    }
    m = td_tensor_data(mom);
    for (int k = 0; k < 4; k++) {
        good &= m[k] == 0.9 * 1 + 2 && p[k] == -0.1 * 1 - 0.1 * (0.9 + 2);
    }
    printf("rank %d zero rebuilt over C (%d rank) from the checkpoint: "
           "momentum %g param %g %s\n", rank, td_group_size(c), m[3], p[3],
           good ? "ok" : "WRONG");
    return 0;
}

int
main(int argc, char **argv)
{
    int64_t st[2] = {0, 0};          /* step, total */
    int64_t one = 1, until = 6, grow_mode;
    td_group_t *g[3] = {0};
    td_tensor_t *t, *zp = NULL;
    td_zero_t *zero = NULL;
    td_checkpoint_t *ck, *ckz = NULL;
    td_zero_opts_t zo;
    char zpath[4096] = "";
    td_elastic_t *el;
    td_elastic_change_t ch;
    int rank, grew, checked = 0, bad = 0, two_dead = 0;
    td_status_t s;

    if (argc < 2 || (strcmp(argv[1], "shrink") != 0 &&
                     strcmp(argv[1], "grow") != 0) ||
        (strcmp(argv[1], "shrink") == 0 && argc != 3)) {
        fprintf(stderr, "usage: subgroup_worker shrink DIR | grow\n");
        return 2;
    }
    if (argc == 3) {
        snprintf(zpath, sizeof(zpath), "%s/z.safetensors", argv[2]);
    }
    grow_mode = strcmp(argv[1], "grow") == 0;
    if (grow_mode) {
        until = -1;
    }
    if (td_init(NULL) != TD_OK) {
        return fail(-1, "td_init");
    }
    rank = td_group_rank(td_group_world());
    if (td_checkpoint_create(&ck) != TD_OK ||
        td_checkpoint_add_int64(ck, "state", st, 2) != TD_OK ||
        td_tensor_empty(&one, 1, TD_FLOAT64, TD_CPU, &t) != TD_OK) {
        return fail(rank, "setup");
    }
    if (td_elastic_replacement()) {
        if (td_elastic_join(NULL, &el, &ch) != TD_OK) {
            return fail(rank, "join");
        }
        if (make_groups(g) != 0) {                      /* group.c G3 */
            return fail(rank, "td_group_new after the join");
        }
        if (td_checkpoint_broadcast(ck, td_elastic_group(el), ch.source) !=
            TD_OK) {
            return fail(rank, "heal");
        }
        td_elastic_commit(el, ch.step);
        until = ch.step + 3;
        printf("rank %d joined at step %lld\n", rank, (long long)ch.step);
    } else {
        if (td_elastic_create(NULL, &el) != TD_OK || make_groups(g) != 0) {
            return fail(rank, "setup");
        }
        if (!grow_mode && (rank == 0 || rank == 2)) {
            int64_t four = 4;

            memset(&zo, 0, sizeof(zo));
            zo.optim = TD_ZERO_SGD;
            zo.sgd.lr = 0.1;
            zo.sgd.momentum = 0.9;
            zo.group = g[2];
            if (td_tensor_zeros(&four, 1, TD_FLOAT64, &zp) != TD_OK ||
                td_tensor_set_requires_grad(zp, 1) != TD_OK ||
                td_zero_create(&zp, 1, &zo, &zero) != TD_OK ||
                td_checkpoint_create(&ckz) != TD_OK ||
                td_checkpoint_add_tensor(ckz, "p", zp) != TD_OK ||
                td_checkpoint_add_zero(ckz, "zero", zero) != TD_OK) {
                return fail(rank, "zero over C");
            }
        }
    }
    while (until < 0 || st[0] < until) {
        struct timespec ts = { 0, 1000000 };

        if (rank == 2 && !td_elastic_replacement() && st[0] + 1 == 3) {
            peer_die();
        }
        ((double *)td_tensor_data(t))[0] = 1;
        s = td_all_reduce(td_elastic_group(el), t, TD_REDUCE_SUM);
        if (s == TD_OK) {
            s = step_groups(g, rank, two_dead, (int)st[0] + 1, &checked,
                            &bad);
        }
        if (s != TD_OK) {
            if (td_elastic_recover(el, &ch) != TD_OK) {
                return fail(rank, "recover");
            }
            two_dead = 1;           /* the only rank this test kills */
            printf("rank %d recovered: epoch %lld world %d -> %d\n", rank,
                   (long long)ch.epoch, ch.old_size, ch.new_size);
            print_lost(g, rank);
            if (zero != NULL && zero_rebuild(rank, g[2], &zo, zp, &zero,
                                             &ckz, zpath) != 0) {
                return 1;
            }
            if (ch.behind &&
                td_checkpoint_broadcast(ck, td_elastic_group(el),
                                        ch.source) != TD_OK) {
                return fail(rank, "heal");
            }
            if (ch.self_behind) {
                td_elastic_commit(el, ch.step);
            }
            continue;
        }
        if (zero != NULL && !two_dead) {
            td_tensor_t *gr = NULL;
            int64_t four = 4;

            if (td_tensor_full(&four, 1, TD_FLOAT64, (double)(st[0] + 1),
                               &gr) != TD_OK ||
                td_tensor_set_grad(zp, gr) != TD_OK ||
                td_zero_step(zero) != TD_OK) {
                return fail(rank, "zero step over C");
            }
            td_tensor_release(gr);
            if (st[0] + 1 == 2 && td_checkpoint_save(ckz, zpath) != TD_OK) {
                return fail(rank, "zero save over C");
            }
        }
        st[0]++;
        st[1] += (int64_t)((double *)td_tensor_data(t))[0];
        td_elastic_commit(el, st[0]);
        if (!grow_mode) {
            continue;
        }
        if (td_elastic_admit(el, &ch, &grew) != TD_OK) {
            return fail(rank, "admit");
        }
        if (grew) {
            if (td_checkpoint_broadcast(ck, td_elastic_group(el),
                                        ch.source) != TD_OK) {
                return fail(rank, "heal");
            }
            two_dead = 0;
            until = ch.step + 3;
            printf("rank %d grew at step %lld\n", rank, (long long)ch.step);
            print_lost(g, rank);
        } else if (until < 0) {
            nanosleep(&ts, NULL);   /* the replacement starts meanwhile */
        }
    }
    printf("rank %d subgroups checked %d bad %d step %lld world %d\n", rank,
           checked, bad, (long long)st[0],
           td_group_size(td_elastic_group(el)));
    fflush(stdout);
    td_checkpoint_free(ckz);
    td_zero_free(zero);
    td_tensor_release(zp);
    for (int i = 0; i < 3; i++) {
        td_group_destroy(g[i]);
    }
    td_tensor_release(t);
    td_checkpoint_free(ck);
    td_elastic_free(el);
    return td_finalize() == TD_OK ? 0 : fail(rank, "td_finalize");
}
