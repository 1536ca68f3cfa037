/* elastic_worker: a training loop in miniature for the restart-round tests
 * (tests/elastic/test_rounds.sh).
 *
 *   elastic_worker CKPT STEPS HOLD MARKER
 *
 * Every step, every rank all_reduces 1 (the sum is the world size) and
 * adds the sum to a running total; rank 0 saves {step, total} to CKPT
 * (todist/checkpoint.h) after every step, and every rank resumes from CKPT
 * when it exists. So the final total says which world each step ran in:
 * a step lost or run twice would show. In the first round
 * (TODIST_RESTART_COUNT 0), once step HOLD is saved and every rank is past
 * it, the last rank writes its pid to MARKER and waits to be killed (alone
 * or with its host, by the test); the others go on into step HOLD + 1 and fail there when
 * it dies. Rank 0 ends with "done step S total T world W restart R".
 * Every rank first checks that torchrun's TORCHELASTIC_RESTART_COUNT is
 * set and equals TODIST_RESTART_COUNT (issue 32: every rank of every
 * node sees it), and exits 2 naming both otherwise. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <todist/todist.h>

static int
fail(int rank, const char *what)
{
    fprintf(stderr, "elastic_worker: rank %d: %s: %s\n", rank, what,
            td_last_error());
    return 1;
}

int
main(int argc, char **argv)
{
    int64_t st[2] = {0, 0};          /* step, total */
    td_checkpoint_t *ck = NULL;
    td_tensor_t *t = NULL;
    int64_t one = 1;
    const char *rc_env = getenv("TODIST_RESTART_COUNT");
    int restart = rc_env != NULL ? atoi(rc_env) : 0;
    long steps, hold;
    int rank, world;

    if (argc != 5) {
        fprintf(stderr, "usage: elastic_worker CKPT STEPS HOLD MARKER\n");
        return 2;
    }
    steps = atol(argv[2]);
    hold = atol(argv[3]);
    const char *te = getenv("TORCHELASTIC_RESTART_COUNT");

    if (rc_env == NULL || te == NULL || strcmp(rc_env, te) != 0) {
        fprintf(stderr, "elastic_worker: TODIST_RESTART_COUNT %s and "
                "TORCHELASTIC_RESTART_COUNT %s differ\n",
                rc_env ? rc_env : "unset", te ? te : "unset");
        return 2;
    }
    if (td_init(NULL) != TD_OK) {
        return fail(-1, "td_init");
    }
    rank = td_world()->rank;
    world = td_world()->world_size;
    if (td_checkpoint_create(&ck) != TD_OK ||
        td_checkpoint_add_int64(ck, "state", st, 2) != TD_OK ||
        td_tensor_empty(&one, 1, TD_FLOAT64, TD_CPU, &t) != TD_OK) {
        return fail(rank, "setup");
    }
    if (access(argv[1], R_OK) == 0) {
        if (td_checkpoint_load(ck, argv[1]) != TD_OK) {
            return fail(rank, "resume");
        }
        if (rank == 0) {
            printf("resumed at step %lld total %lld world %d restart %d\n",
                   (long long)st[0], (long long)st[1], world, restart);
        }
    }
    while (st[0] < steps) {
        ((double *)td_tensor_data(t))[0] = 1;
        if (td_all_reduce(td_group_world(), t, TD_REDUCE_SUM) != TD_OK) {
            return fail(rank, "all_reduce");
        }
        st[0]++;
        st[1] += (int64_t)((double *)td_tensor_data(t))[0];
        if (rank == 0 && td_checkpoint_save(ck, argv[1]) != TD_OK) {
            return fail(rank, "checkpoint");
        }
        if (restart == 0 && st[0] == hold) {
            /* the save is done before anyone passes this barrier */
            if (td_barrier(60) != TD_OK) {
                return fail(rank, "barrier");
            }
            if (rank == world - 1) {
                char tmp[4096];
                FILE *f;

                /* its pid, in its host's view; whole when it appears */
                snprintf(tmp, sizeof(tmp), "%s.tmp", argv[4]);
                f = fopen(tmp, "w");
                if (f == NULL || fprintf(f, "%d\n", (int)getpid()) < 0 ||
                    fclose(f) != 0 || rename(tmp, argv[4]) != 0) {
                    return fail(rank, "marker");
                }
                for (;;) {
                    pause();          /* until the test kills this host */
                }
            }
        }
    }
    if (rank == 0) {
        printf("done step %lld total %lld world %d restart %d\n",
               (long long)st[0], (long long)st[1], world, restart);
    }
    td_tensor_release(t);
    td_checkpoint_free(ck);
    return td_finalize() == TD_OK ? 0 : fail(rank, "td_finalize");
}
