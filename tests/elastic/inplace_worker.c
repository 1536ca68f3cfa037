/* inplace_worker: in-place recovery (todist/elastic.h) in miniature, for
 * tests/elastic/test_inplace.sh; 4 ranks under todist-run --no-kill.
 *
 *   inplace_worker heal    each step all_reduces 1 (the sum is the world
 *       size) and adds the sum to a total. Rank 3 dies before step 4;
 *       rank 0 then acts as if its all_reduce of step 4 had completed (it
 *       commits step 4 with the total 4 x 3 + 1000), the others as if
 *       theirs failed (step 3). The recovery must name step 4 and rank 0
 *       as the source, behind; td_checkpoint_broadcast heals ranks 1-2;
 *       2 more steps at world 3. Every survivor ends with "rank R epoch 1
 *       step 6 total 1018 world 3".
 *   inplace_worker during  as heal, but rank 2 dies too, during the
 *       recovery: right after its td_elastic_recover returned (epoch 1,
 *       world 3), before the heal. Ranks 0-1's heal fails (or their next
 *       step does), and they recover again: epoch 2 at step 4 from rank 0,
 *       rank 1 still behind (EL6: it claimed no step since its heal was
 *       cut short); healed, 2 more steps at world 2. Both end with "rank R
 *       epoch 2 step 6 total 3 x 4 + 1000 + 2 x 2 = 1016 world 2".
 *   inplace_worker stale   rank 2 dies before step 2; rank 3 recovers
 *       only once epoch 1's plan is in the store, so ranks 0-1 (with
 *       TODIST_ELASTIC_TIMEOUT=1) form epoch 1 without it and go on; rank 3 is then refused ("stale")
 *       and exits 3 without td_finalize. Ranks 0-1 end with "rank R
 *       epoch 1 step 3 total 4*1 + 2*2 = 8 world 2".
 *   inplace_worker tell    rank 3 dies at once; ranks 0 and 2 send to it
 *       (and fail), rank 1 waits for a message from rank 0 that never
 *       comes: it never talked to rank 3, so only the others' abort of
 *       the world's group (EL5) gets it into the recovery. Ranks 0-2 end
 *       with "rank R epoch 1 sum 3" (an all_reduce at world 3).
 *   inplace_worker reject  no death: td_checkpoint_broadcast from rank 0
 *       of a sampler and a tensor (rank 0's holds 5, the others' 0), where
 *       rank 1's sampler has another seed: rank 1 refuses it, naming the
 *       seed, and keeps its 0; ranks 2-3 get 5; then an all_reduce of the
 *       tensors gives 15 on every rank (nobody was left waiting).
 *   inplace_worker grow    (todist-run --no-kill --replace 1) each step
 *       all_reduces 1 and adds the sum (the world size) to a total; rank
 *       2 dies before step 3; the survivors recover (world 3) and step on,
 *       calling td_elastic_admit at every boundary, until the replacement
 *       (td_elastic_join) is admitted at step G; all four heal the
 *       joiner (step, total) from the source and do 3 more steps. Every
 *       rank ends with "rank R epoch 2 step G+3 total T world 4 grew at
 *       G", T = 2 x 4 + (G - 2) x 3 + 3 x 4 (the test checks it).
 *   inplace_worker grow2   (todist-run --no-kill --replace 2, with
 *       TODIST_ELASTIC_ADMIT_WAIT) as grow, but ranks 1 and 2 both die
 *       before step 3: the survivors go on at world 2, and both
 *       replacements join in one growth record (the admitter waits until
 *       every rank out of the world asked): T = 2 x 4 + (G - 2) x 2 +
 *       3 x 4. Rank 2's replacement asks a second after rank 1's, so
 *       without that wait rank 1 would be admitted alone. The grow lines
 *       list every joiner.
 *   inplace_worker chain   no death: td_checkpoint_broadcast from group
 *       rank 1 (the chain 1 -> 2 -> 3 -> 0, runtime/elastic/heal.h) of a
 *       20 MiB float32 tensor (three pieces: 8, 8 and 4 MiB), a 3-element
 *       int64 one and a 64 x 48 float64 one (one piece each);
 *       every rank checks every element against rank 1's pattern and
 *       prints "rank R chain ok" or the first wrong element.
 *   inplace_worker offer   (3 ranks, TODIST_TEST_CMA_STALL=1:PREFIX) rank
 *       0 td_sends 1 MiB of 7s to rank 1, offered in place; rank 1 takes
 *       the offer and stalls (the hook) until the world's group failed;
 *       rank 2 SIGKILLs itself once rank 1 stalls (PREFIX.reading). Rank
 *       0's send may end only once rank 1 answered (cma.h C15): it
 *       then overwrites its buffer with -1s and makes PREFIX.go, which
 *       ends rank 1's stall at once. Rank 1 must have read 7s only:
 *       "rank 1 recv STATUS wrong 0"; rank 0 prints "rank 0 send
 *       STATUS".
 *   inplace_worker lost0   (2 ranks, each under a plain todist-run of its
 *       own: rank 0's process serves the store) an all_reduce, rank 1
 *       sends rank 0 a tensor once its own completed, and rank 0 dies
 *       once it has it; rank 1's next all_reduce fails and it recovers:
 *       "rank 1 recover STATUS: MESSAGE" (EL11 refuses, naming rank 0
 *       lost, also with TODIST_TEST_ELASTIC_LATE=1:S: EL13); rank 1 exits
 *       1 without td_finalize. */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <todist/todist.h>
#include "runtime/runtime.h"
#include "tests/peer_die.h"     /* every death here: peer_die() */

static int
fail(int rank, const char *what)
{
    fprintf(stderr, "inplace_worker: rank %d: %s: %s\n", rank, what,
            td_last_error());
    return 1;
}

static int
tell(void)
{
    td_elastic_t *el;
    td_tensor_t *t;
    td_elastic_change_t ch;
    int64_t one = 1;
    int rank;
    td_status_t s;

    if (td_init(NULL) != TD_OK) {
        return fail(-1, "td_init");
    }
    rank = td_world()->rank;
    if (rank == 3) {
        peer_die();
    }
    if (td_elastic_create(NULL, &el) != TD_OK ||
        td_tensor_empty(&one, 1, TD_FLOAT64, TD_CPU, &t) != TD_OK) {
        return fail(rank, "setup");
    }
    s = rank == 1 ? td_recv(td_group_world(), t, 0, 7, NULL)
                  : td_send(td_group_world(), t, 3, 7);
    printf("rank %d: the first operation failed: %s\n", rank,
           s != TD_OK ? td_last_error() : "no, it succeeded");
    if (td_elastic_recover(el, &ch) != TD_OK) {
        return fail(rank, "recover");
    }
    ((double *)td_tensor_data(t))[0] = 1;
    if (td_all_reduce(td_elastic_group(el), t, TD_REDUCE_SUM) != TD_OK) {
        return fail(rank, "all_reduce");
    }
    printf("rank %d epoch %lld sum %g\n", rank, (long long)ch.epoch,
           ((double *)td_tensor_data(t))[0]);
    fflush(stdout);
    td_tensor_release(t);
    td_elastic_free(el);
    if (td_finalize() != TD_OK) {
        return fail(rank, "td_finalize");
    }
    return 0;
}

static int
lost0(void)
{
    td_elastic_t *el;
    td_tensor_t *t;
    td_elastic_change_t ch;
    int64_t one = 1;
    int rank;
    td_status_t s;

    if (td_init(NULL) != TD_OK) {
        return fail(-1, "td_init");
    }
    rank = td_world()->rank;
    if (td_elastic_create(NULL, &el) != TD_OK ||
        td_tensor_empty(&one, 1, TD_FLOAT64, TD_CPU, &t) != TD_OK) {
        return fail(rank, "setup");
    }
    ((double *)td_tensor_data(t))[0] = 1;
    if (td_all_reduce(td_group_world(), t, TD_REDUCE_SUM) != TD_OK) {
        return fail(rank, "all_reduce");
    }
    /* rank 0 dies only once rank 1's all_reduce completed */
    if (rank == 0) {
        if (td_recv(td_group_world(), t, 1, 9, NULL) != TD_OK) {
            return fail(rank, "recv");
        }
        peer_die();
    }
    if (td_send(td_group_world(), t, 0, 9) != TD_OK) {
        return fail(rank, "send");
    }
    s = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
    printf("rank %d: all_reduce: %s\n", rank,
           s != TD_OK ? td_last_error() : "no error");
    memset(&ch, 0, sizeof(ch));
    s = td_elastic_recover(el, &ch);
    printf("rank %d recover %d: %s\n", rank, (int)s,
           s != TD_OK ? td_last_error() : "an epoch was formed");
    fflush(stdout);
    return 1;           /* the runtime up: no td_finalize (rank 0 is gone) */
}

static int
reject(void)
{
    td_distributed_sampler_t s;
    td_checkpoint_t *ck;
    td_tensor_t *t;
    int64_t one = 1, pos = 0;
    int rank;
    td_status_t st;

    if (td_init(NULL) != TD_OK) {
        return fail(-1, "td_init");
    }
    rank = td_world()->rank;
    if (td_distributed_sampler_init(&s, 100, 4, rank, 1, rank == 1 ? 9 : 1,
                                    0) != TD_OK ||
        td_tensor_empty(&one, 1, TD_FLOAT64, TD_CPU, &t) != TD_OK ||
        td_checkpoint_create(&ck) != TD_OK ||
        td_checkpoint_add_sampler(ck, "sampler", &s, &pos) != TD_OK ||
        td_checkpoint_add_tensor(ck, "w", t) != TD_OK) {
        return fail(rank, "setup");
    }
    ((double *)td_tensor_data(t))[0] = rank == 0 ? 5 : 0;
    st = td_checkpoint_broadcast(ck, td_group_world(), 0);
    printf("rank %d: broadcast %s: %s; holds %g\n", rank,
           st == TD_OK ? "ok" : "refused", st == TD_OK ? "-" : td_last_error(),
           ((double *)td_tensor_data(t))[0]);
    if (td_all_reduce(td_group_world(), t, TD_REDUCE_SUM) != TD_OK) {
        return fail(rank, "all_reduce");
    }
    printf("rank %d sum %g\n", rank, ((double *)td_tensor_data(t))[0]);
    fflush(stdout);
    td_checkpoint_free(ck);
    td_tensor_release(t);
    return td_finalize() == TD_OK ? 0 : fail(rank, "td_finalize");
}

/* grow and grow2: the ranks DIE1 and DIE2 (-1: none) die before step 3;
 * REGROW: the first replacement dies once admitted, before its heal */
static int
grow(int die1, int die2, int regrow)
{
    int64_t st[2] = {0, 0};          /* step, total */
    int64_t one = 1, grew_at = -1, until = -1;
    td_checkpoint_t *ck;
    td_elastic_t *el;
    td_elastic_change_t ch;
    td_tensor_t *t;
    int rank, grew;
    td_status_t s;

    if (td_init(NULL) != TD_OK) {
        return fail(-1, "td_init");
    }
    rank = td_world()->rank;
    if (td_checkpoint_create(&ck) != TD_OK ||
        td_checkpoint_add_int64(ck, "state", st, 2) != TD_OK ||
        td_tensor_empty(&one, 1, TD_FLOAT64, TD_CPU, &t) != TD_OK) {
        return fail(rank, "setup");
    }
    if (td_elastic_replacement()) {
        if (die2 >= 0 && rank == die2) {
            /* grow2: this replacement asks a second after the other, so
             * only the admitter's wait (Q11) puts both in one record */
            sleep(1);
        }
        if (td_elastic_join(NULL, &el, &ch) != TD_OK) {
            return fail(rank, "join");
        }
        printf("rank %d joined: epoch %lld step %lld source %d behind %d "
               "self_behind %d world %d -> %d\n", rank, (long long)ch.epoch,
               (long long)ch.step, ch.source, ch.behind, ch.self_behind,
               ch.old_size, ch.new_size);
        fflush(stdout);
        if (regrow) {
            int64_t nth = 0;

            /* regrow: the first replacement dies here, admitted and a
             * member of the new epoch, before the new group's first
             * collective (the heal): its shm handshake's head sends to a
             * dead process (issue 32, liveness.h V5) */
            if (td_store_add(td__runtime_store(), "test/joiner", 1, &nth) !=
                TD_OK) {
                return fail(rank, "counting the replacements");
            }
            if (nth == 1) {
                peer_die();
            }
        }
        if (td_checkpoint_broadcast(ck, td_elastic_group(el), ch.source) !=
            TD_OK) {
            return fail(rank, "heal");
        }
        td_elastic_commit(el, ch.step);
        grew_at = ch.step;
        until = grew_at + 3;
    } else if (td_elastic_create(NULL, &el) != TD_OK) {
        return fail(rank, "td_elastic_create");
    }
    while (until < 0 || st[0] < until) {
        struct timespec ts = { 0, 1000000 };

        if ((rank == die1 || rank == die2) && !td_elastic_replacement() &&
            st[0] + 1 == 3) {
            peer_die();
        }
        ((double *)td_tensor_data(t))[0] = 1;
        s = td_all_reduce(td_elastic_group(el), t, TD_REDUCE_SUM);
        if (s != TD_OK) {
            if (td_elastic_recover(el, &ch) != TD_OK) {
                return fail(rank, "recover");
            }
            printf("rank %d recovered: epoch %lld step %lld world %d -> %d\n",
                   rank, (long long)ch.epoch, (long long)ch.step,
                   ch.old_size, ch.new_size);
            if (ch.behind &&
                td_checkpoint_broadcast(ck, td_elastic_group(el),
                                        ch.source) != TD_OK) {
                return fail(rank, "heal");
            }
            if (ch.self_behind) {
                td_elastic_commit(el, ch.step);
            }
            if (ch.new_size < 4) {
                until = grew_at = -1;   /* regrow: wait for the next one */
            }
            continue;
        }
        st[0]++;
        st[1] += (int64_t)((double *)td_tensor_data(t))[0];
        td_elastic_commit(el, st[0]);
        if (td_elastic_admit(el, &ch, &grew) != TD_OK) {
            return fail(rank, "admit");
        }
        if (grew) {
            char joined[64] = "";

            for (int i = 0, off = 0; i < ch.n_joined && i < 8; i++) {
                off += snprintf(joined + off, sizeof(joined) - (size_t)off,
                                " %d", ch.joined[i]);
            }
            printf("rank %d grew: epoch %lld step %lld source %d behind %d "
                   "world %d -> %d joined%s\n", rank, (long long)ch.epoch,
                   (long long)ch.step, ch.source, ch.behind, ch.old_size,
                   ch.new_size, joined);
            fflush(stdout);
            if (td_checkpoint_broadcast(ck, td_elastic_group(el),
                                        ch.source) != TD_OK) {
                /* regrow: the joiner died before its heal; the step
                 * boundary stands (the members hold step ch.step), the
                 * next step's all_reduce fails and recovers */
                if (!regrow) {
                    return fail(rank, "heal");
                }
                printf("rank %d: heal failed: %s\n", rank, td_last_error());
            }
            grew_at = ch.step;
            until = grew_at + 3;
        } else if (until < 0) {
            nanosleep(&ts, NULL);   /* the replacement starts meanwhile */
        }
    }
    printf("rank %d epoch %lld step %lld total %lld world %d grew at %lld\n",
           rank, (long long)td_elastic_epoch(el), (long long)st[0],
           (long long)st[1], td_group_size(td_elastic_group(el)),
           (long long)grew_at);
    fflush(stdout);
    td_tensor_release(t);
    td_checkpoint_free(ck);
    td_elastic_free(el);
    return td_finalize() == TD_OK ? 0 : fail(rank, "td_finalize");
}

static int
chain(void)
{
    int64_t big_n = 20 << 18, small_n = 3, sq[2] = {64, 48};
    td_tensor_t *big, *small, *m;
    td_checkpoint_t *ck;
    int rank, bad = -1;
    const char *what = "";

    if (td_init(NULL) != TD_OK) {
        return fail(-1, "td_init");
    }
    rank = td_world()->rank;
    if (td_tensor_empty(&big_n, 1, TD_FLOAT32, TD_CPU, &big) != TD_OK ||
        td_tensor_empty(&small_n, 1, TD_INT64, TD_CPU, &small) != TD_OK ||
        td_tensor_empty(sq, 2, TD_FLOAT64, TD_CPU, &m) != TD_OK ||
        td_checkpoint_create(&ck) != TD_OK ||
        td_checkpoint_add_tensor(ck, "big", big) != TD_OK ||
        td_checkpoint_add_tensor(ck, "small", small) != TD_OK ||
        td_checkpoint_add_tensor(ck, "m", m) != TD_OK) {
        return fail(rank, "setup");
    }
    for (int64_t k = 0; k < big_n; k++) {
        ((float *)td_tensor_data(big))[k] = rank == 1 ? (float)(k % 100003)
                                                      : -1;
    }
    for (int64_t k = 0; k < small_n; k++) {
        ((int64_t *)td_tensor_data(small))[k] = rank == 1 ? 7 * k + 1 : -1;
    }
    for (int64_t k = 0; k < sq[0] * sq[1]; k++) {
        ((double *)td_tensor_data(m))[k] = rank == 1 ? (double)k / 4 : -1;
    }
    if (td_checkpoint_broadcast(ck, td_group_world(), 1) != TD_OK) {
        return fail(rank, "td_checkpoint_broadcast");
    }
    for (int64_t k = 0; bad < 0 && k < big_n; k++) {
        if (((float *)td_tensor_data(big))[k] != (float)(k % 100003)) {
            bad = (int)k;
            what = "big";
        }
    }
    for (int64_t k = 0; bad < 0 && k < small_n; k++) {
        if (((int64_t *)td_tensor_data(small))[k] != 7 * k + 1) {
            bad = (int)k;
            what = "small";
        }
    }
    for (int64_t k = 0; bad < 0 && k < sq[0] * sq[1]; k++) {
        if (((double *)td_tensor_data(m))[k] != (double)k / 4) {
            bad = (int)k;
            what = "m";
        }
    }
    if (bad < 0) {
        printf("rank %d chain ok\n", rank);
    } else {
        printf("rank %d chain: %s[%d] is wrong\n", rank, what, bad);
    }
    fflush(stdout);
    td_checkpoint_free(ck);
    td_tensor_release(m);
    td_tensor_release(small);
    td_tensor_release(big);
    return td_finalize() == TD_OK ? 0 : fail(rank, "td_finalize");
}

/* "offer": see the top. */
static int
offer(void)
{
    const char *spec = getenv("TODIST_TEST_CMA_STALL");
    const char *prefix = spec != NULL ? strchr(spec, ':') : NULL;
    int64_t n = 256 * 1024;
    td_tensor_t *t = NULL;
    char path[512];
    struct timespec ts;
    td_status_t s;
    int rank;

    if (prefix == NULL) {
        fprintf(stderr, "inplace_worker offer: TODIST_TEST_CMA_STALL=1:PREFIX "
                "is not set\n");
        return 2;
    }
    prefix++;
    if (td_init(NULL) != TD_OK) {
        return fail(-1, "td_init");
    }
    rank = td_world()->rank;
    if (td_world()->world_size != 3 ||
        td_tensor_zeros(&n, 1, TD_FLOAT32, &t) != TD_OK) {
        fprintf(stderr, "inplace_worker offer: needs 3 ranks\n");
        return 2;
    }
    /* every pair talks once: each rank holds an endpoint to rank 2, so
     * its death is seen (docs/reliability.md) */
    if (td_barrier(60) != TD_OK || td_all_reduce(td_group_world(), t,
                                               TD_REDUCE_SUM) != TD_OK) {
        return fail(rank, "barrier");
    }
    if (rank == 2) {
        snprintf(path, sizeof(path), "%s.reading", prefix);
        for (int i = 0; i < 6000 && access(path, F_OK) != 0; i++) {
            nanosleep(&(struct timespec){ .tv_nsec = 10000000 }, NULL);
        }
        peer_die();
    }
    if (rank == 0) {
        float *f = td_tensor_data(t);

        for (int64_t i = 0; i < n; i++) {
            f[i] = 7;
        }
        s = td_send(td_group_world(), t, 1, 5);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        printf("rank 0 send %s (at %ld.%03ld)\n", td_status_name(s),
               (long)ts.tv_sec, ts.tv_nsec / 1000000);
        fflush(stdout);
        /* the buffer is ours again: reuse it at once */
        for (int64_t i = 0; i < n; i++) {
            f[i] = -1;
        }
        snprintf(path, sizeof(path), "%s.go", prefix);
        fclose(fopen(path, "w"));
    } else {
        const float *f = td_tensor_data(t);
        int64_t wrong = 0;

        s = td_recv(td_group_world(), t, 0, 5, NULL);
        for (int64_t i = 0; i < n; i++) {
            wrong += f[i] != 7;
        }
        clock_gettime(CLOCK_MONOTONIC, &ts);
        printf("rank 1 recv %s wrong %lld (at %ld.%03ld)\n",
               td_status_name(s), (long long)wrong, (long)ts.tv_sec,
               ts.tv_nsec / 1000000);
        fflush(stdout);
    }
    td_tensor_release(t);
    td_finalize();            /* fails: rank 2 is gone (not checked) */
    return 0;
}

int
main(int argc, char **argv)
{
    int64_t st[2] = {0, 0};          /* step, total */
    int64_t one = 1;
    td_checkpoint_t *ck = NULL;
    td_elastic_t *el = NULL;
    td_tensor_t *t = NULL;
    int heal, during, rank, die_rank, die_step, steps;
    td_status_t s;

    if (argc != 2 || (strcmp(argv[1], "heal") != 0 &&
                      strcmp(argv[1], "stale") != 0 &&
                      strcmp(argv[1], "during") != 0 &&
                      strcmp(argv[1], "tell") != 0 &&
                      strcmp(argv[1], "reject") != 0 &&
                      strcmp(argv[1], "grow") != 0 &&
                      strcmp(argv[1], "grow2") != 0 &&
                      strcmp(argv[1], "regrow") != 0 &&
                      strcmp(argv[1], "chain") != 0 &&
                      strcmp(argv[1], "offer") != 0 &&
                      strcmp(argv[1], "lost0") != 0)) {
        fprintf(stderr, "usage: inplace_worker heal|during|stale|tell|reject|"
                "grow|grow2|regrow|chain|offer|lost0\n");
        return 2;
    }
    if (strcmp(argv[1], "lost0") == 0) {
        return lost0();
    }
    if (strcmp(argv[1], "chain") == 0) {
        return chain();
    }
    if (strcmp(argv[1], "offer") == 0) {
        return offer();
    }
    if (strcmp(argv[1], "grow") == 0) {
        return grow(2, -1, 0);
    }
    if (strcmp(argv[1], "grow2") == 0) {
        return grow(1, 2, 0);
    }
    if (strcmp(argv[1], "regrow") == 0) {
        return grow(2, -1, 1);
    }
    if (strcmp(argv[1], "tell") == 0) {
        return tell();
    }
    if (strcmp(argv[1], "reject") == 0) {
        return reject();
    }
    during = strcmp(argv[1], "during") == 0;
    heal = during || strcmp(argv[1], "heal") == 0;
    die_rank = heal ? 3 : 2;
    die_step = heal ? 4 : 2;
    steps = heal ? 6 : 3;
    if (td_init(NULL) != TD_OK) {
        return fail(-1, "td_init");
    }
    rank = td_world()->rank;
    if (td_world()->world_size != 4) {
        fprintf(stderr, "inplace_worker: needs 4 ranks\n");
        return 2;
    }
    if (td_elastic_create(NULL, &el) != TD_OK ||
        td_checkpoint_create(&ck) != TD_OK ||
        td_checkpoint_add_int64(ck, "state", st, 2) != TD_OK ||
        td_tensor_empty(&one, 1, TD_FLOAT64, TD_CPU, &t) != TD_OK) {
        return fail(rank, "setup");
    }
    while (st[0] < steps) {
        if (rank == die_rank && st[0] + 1 == die_step) {
            peer_die();
        }
        ((double *)td_tensor_data(t))[0] = 1;
        s = td_all_reduce(td_elastic_group(el), t, TD_REDUCE_SUM);
        if (s == TD_OK) {
            st[0]++;
            st[1] += (int64_t)((double *)td_tensor_data(t))[0];
            td_elastic_commit(el, st[0]);
            continue;
        }
        /* the step failed: rank 0 pretends its all_reduce completed */
        if (heal && rank == 0 && st[0] + 1 == die_step) {
            st[0]++;
            st[1] += 1000;
            td_elastic_commit(el, st[0]);
        }
        if (!heal && rank == 3) {
            /* late: the others form epoch 1 alone (after their timeout) */
            const char *keys[1] = { "td/el/1/plan" };
            if (td_store_wait(td__runtime_store(), keys, 1, 60) != TD_OK) {
                return fail(rank, "waiting for epoch 1");
            }
        }
        td_elastic_change_t ch;
    again:
        s = td_elastic_recover(el, &ch);
        if (s == TD_ERR_STATE) {
            printf("rank %d refused: %s\n", rank, td_last_error());
            fflush(stdout);
            td_store_set(td__runtime_store(), "test/refused", "1", 1);
            _exit(3);
        }
        if (s != TD_OK) {
            return fail(rank, "recover");
        }
        printf("rank %d recovered: epoch %lld step %lld source %d behind %d "
               "world %d -> %d lost %d\n", rank, (long long)ch.epoch,
               (long long)ch.step, ch.source, ch.behind, ch.old_size,
               ch.new_size, ch.n_lost > 0 ? ch.lost[0] : -1);
        printf("rank %d: self_behind %d committed %lld before the heal\n",
               rank, ch.self_behind, (long long)td_elastic_committed(el));
        fflush(stdout);
        if (during && rank == 2) {
            peer_die();                      /* during the recovery */
        }
        if (ch.behind &&
            td_checkpoint_broadcast(ck, td_elastic_group(el), ch.source) !=
                TD_OK) {
            if (!during) {
                return fail(rank, "heal");
            }
            printf("rank %d: heal failed: %s\n", rank, td_last_error());
            goto again;                 /* a death during the recovery */
        }
        if (ch.self_behind) {
            td_elastic_commit(el, ch.step);
        }
        if (!heal) {
            /* the late rank's verdict needs the store, which rank 0 holds */
            const char *keys[1] = { "test/refused" };
            if (td_store_wait(td__runtime_store(), keys, 1, 30) != TD_OK) {
                return fail(rank, "the late rank's refusal");
            }
        }
    }
    printf("rank %d epoch %lld step %lld total %lld world %d\n", rank,
           (long long)td_elastic_epoch(el), (long long)st[0],
           (long long)st[1], td_group_size(td_elastic_group(el)));
    fflush(stdout);
    td_tensor_release(t);
    td_checkpoint_free(ck);
    td_elastic_free(el);
    if (td_finalize() != TD_OK) {
        return fail(rank, "td_finalize");
    }
    return 0;
}
