/* hosts_peer: what a rank sees when a host is cut off or killed
 * (tests/hosts/test_hosts.sh). Usage: hosts_peer OP LOST READY
 *   OP     coll (an all_reduce of the world), rpc (a call to the first lost
 *          rank, whose handler is still running), barrier (td_barrier)
 *   LOST   the first rank of the lost host (it and all ranks after it are
 *          on that host)
 *   READY  a file rank 0 creates once every rank is warm (endpoints both
 *          ways), for the test to cut or kill the host then; the test
 *          creates READY.done once ranks below LOST all reported
 * Ranks below LOST start OP and print "op=OP rc=STATUS t=BOOTTIME
 * err=MESSAGE" when it ends (BOOTTIME: seconds, as /proc/uptime); the
 * lost ranks wait to be cut off or killed.
 *
 * OP "stall" (LOST unused): a rank stopped, not lost (transport.c L6,
 * L7). Every rank warms up, writes its pid (its host's) to READY.RANK
 * and waits for READY.go; then all_reduce, which the others enter while
 * the test holds a rank stopped (SIGSTOP) for longer than
 * TODIST_LIVENESS. Then each writes READY.RANK.2 and waits for
 * READY.go2, which the test creates while it holds every rank stopped
 * (a machine that gave no rank the CPU); then a second all_reduce. Each
 * prints "op=stall rank=R rc=STATUS sum=SUM err=MESSAGE". */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "todist/todist.h"
#include "runtime/runtime.h"        /* td__runtime_host_id */

static td_status_t
hold(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
     td_rpc_list_t *result)
{
    sleep(60);
    return TD_OK;
}

static td_status_t
ping(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
     td_rpc_list_t *result)
{
    return TD_OK;
}

static double
boottime(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Wait (bounded: 60 s) for the test to create PATH.WHAT; 0 once it is
 * there. */
static int
await(const char *path, const char *what)
{
    char f[4096];

    snprintf(f, sizeof(f), "%s.%s", path, what);
    for (int i = 0; i < 1200 && access(f, F_OK) != 0; i++) {
        usleep(50000);
    }
    return access(f, F_OK);
}

/* Create PATH, empty: this rank is ready. */
static void
touch(const char *path)
{
    FILE *out = fopen(path, "w");

    if (out != NULL) {
        fclose(out);
    }
}

/* Write our pid to PATH.RANK SUFFIX, then wait (bounded) for PATH.GO. */
static int
meet(const char *path, int rank, const char *suffix, const char *go)
{
    char f[4096];
    FILE *out;

    snprintf(f, sizeof(f), "%s.%d%s", path, rank, suffix);
    if ((out = fopen(f, "w")) == NULL) {
        return -1;
    }
    fprintf(out, "%ld\n", (long)getpid());
    fclose(out);
    return await(path, go);
}

static int
stall(const char *path, int rank, int size, td_tensor_t *t)
{
    td_status_t st = TD_ERR_TIMEOUT;

    for (int round = 1; round <= 2; round++) {
        st = TD_ERR_TIMEOUT;
        if (td_tensor_fill_(t, 1) == TD_OK &&
            meet(path, rank, round == 1 ? "" : ".2",
                 round == 1 ? "go" : "go2") == 0) {
            st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
        }
        printf("op=stall round=%d rank=%d rc=%d sum=%g err=%s\n", round,
               rank, (int)st, st == TD_OK ? ((float *)td_tensor_data(t))[0]
                                          : -1.0,
               st == TD_OK ? "" : td_last_error());
        fflush(stdout);
        if (st != TD_OK) {
            _exit(1);
        }
    }
    (void)size;
    return td_finalize() == TD_OK ? 0 : 1;
}

/* OP "dropped" (LOST: the rank that stops, 0): before any warm-up, rank
 * LOST writes its pid to READY.LOST, the others fetch LOST's address,
 * all pass a store barrier (no endpoint yet) and enter an all_reduce;
 * rank LOST stops itself as it makes its endpoint
 * (TODIST_TEST_STOP_CONNECT) and the test resumes it (SIGCONT) once the
 * others gave it up or a while passed (tests/hosts/test_hosts_dropped.sh).
 * Every rank prints "op=dropped call=N rank=R rc=STATUS err=MESSAGE" for
 * that all_reduce (N 1) and for a barrier after it (N 2). */
/* OP "answer" (1+1; transport.c L9): rank 1 sends rank 0 a message it
 * takes only later (rank 1 has an endpoint to rank 0, rank 0 none to
 * rank 1) and waits for rank 0's reply; rank 0 looks up rank 1's host
 * first, which TODIST_TEST_HOLD_ADDR holds on the address lock longer
 * than TODIST_LIVENESS, while rank 1 pings it. Each prints "op=answer
 * rank=R rc=STATUS err=MESSAGE". */
static int
answer(int rank, td_tensor_t *t)
{
    td_status_t st;

    if (rank == 1) {
        st = td_send(td_group_world(), t, 0, 9);
        st = st == TD_OK ? td_recv(td_group_world(), t, 0, 10, NULL) : st;
    } else {
        (void)td__runtime_host_id(1);       /* held here */
        st = td_recv(td_group_world(), t, 1, 9, NULL);
        st = st == TD_OK ? td_send(td_group_world(), t, 1, 10) : st;
    }
    printf("op=answer rank=%d rc=%d err=%s\n", rank, (int)st,
           st == TD_OK ? "" : td_last_error());
    fflush(stdout);
    return st == TD_OK && td_finalize() == TD_OK ? 0 : 1;
}

/* OP "heal" (1+1, warm; transport.c L12): rank 0 creates READY, the
 * test cuts host 2 off and creates READY.cut, restores it after longer
 * than TODIST_LIVENESS of one rank or both and creates READY.go. Each
 * rank prints "op=heal call=N rank=R rc=STATUS t=BOOTTIME err=MESSAGE"
 * for an all_reduce begun after READY.cut (N 1) and, after READY.go, a
 * send to the other rank (N 2) and a receive from it (N 3, skipped when
 * the send failed); then it waits for READY.done, which the test creates
 * once both reported (a rank that left at once would close its
 * connections: the other would see that, not what it is told). */
static int
heal(const char *path, int rank, td_tensor_t *t)
{
    td_status_t st;

    if (rank == 0) {
        touch(path);
    }
    (void)await(path, "cut");
    st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
    printf("op=heal call=1 rank=%d rc=%d t=%.3f err=%s\n", rank, (int)st,
           boottime(), st == TD_OK ? "" : td_last_error());
    fflush(stdout);
    (void)await(path, "go");
    st = td_send(td_group_world(), t, 1 - rank, 7);
    printf("op=heal call=2 rank=%d rc=%d t=%.3f err=%s\n", rank, (int)st,
           boottime(), st == TD_OK ? "" : td_last_error());
    fflush(stdout);
    if (st == TD_OK) {
        st = td_recv(td_group_world(), t, 1 - rank, 7, NULL);
        printf("op=heal call=3 rank=%d rc=%d t=%.3f err=%s\n", rank,
               (int)st, boottime(), st == TD_OK ? "" : td_last_error());
        fflush(stdout);
    }
    (void)await(path, "done");
    /* a job with a rank dropped cannot end cleanly */
    _exit(0);
}

/* OP "elheal" (in-place recovery across a partition that heals; elastic.c
 * EL12): every rank warms up, makes its elastic handle (epoch 0), rank 0
 * creates READY, each waits for READY.cut (the test cut a host off), then
 * up to 2 steps, each an all_reduce of (world rank + 1) over the current
 * epoch's group; a failed one is followed by td_elastic_recover and the
 * step again in the new epoch. Each prints
 *   "op=elheal step=S rank=R epoch=E world=N rc=STATUS sum=SUM err=M"
 *   "op=elheal recover rank=R rc=STATUS epoch=E world=A->B lost=L err=M"
 * (a failed recovery ends the steps) and then waits for READY.done, which
 * the test creates once every rank reported (a rank that left at once
 * would close its connections: the others would see that instead). It
 * leaves with 3 when its recovery failed (this rank is out), else 0.
 * Rank SLOW (LOST; -1 none) waits for READY.go before it recovers: a
 * dropper that reaches the agreement after the rank it dropped.
 *
 * OP "elgrow": as elheal, with 3 steps, each committed and followed by
 * td_elastic_admit (the world grows back: "op=elheal grew rank=R
 * epoch=E world=A->B"); a rank whose recovery failed leaves at once (its
 * launcher, todist-run --no-kill --replace, starts a replacement), and a
 * replacement (TODIST_ELASTIC_JOIN=1) joins (elgrow_join). */
static int
elgrow_join(const char *path, int rank, td_tensor_t *t)
{
    td_elastic_t *el = NULL;
    td_elastic_change_t ch;
    td_status_t st;

    memset(&ch, 0, sizeof(ch));
    st = td_elastic_join(NULL, &el, &ch);
    printf("op=elheal joined rank=%d rc=%d epoch=%lld world=%d->%d step=%lld "
           "err=%s\n", rank, (int)st, (long long)ch.epoch, ch.old_size,
           ch.new_size, (long long)ch.step, st == TD_OK ? "" : td_last_error());
    fflush(stdout);
    for (int64_t step = ch.step + 1; st == TD_OK && step <= 3; step++) {
        td_group_t *g = td_elastic_group(el);

        td_elastic_commit(el, step - 1);     /* nothing to heal here */
        st = td_tensor_fill_(t, rank + 1);
        if (st == TD_OK) {
            st = td_all_reduce(g, t, TD_REDUCE_SUM);
        }
        printf("op=elheal step=%lld rank=%d epoch=%lld world=%d rc=%d sum=%g "
               "err=%s\n", (long long)step, rank,
               (long long)td_elastic_epoch(el), td_group_size(g), (int)st,
               st == TD_OK ? ((float *)td_tensor_data(t))[0] : -1.0,
               st == TD_OK ? "" : td_last_error());
        fflush(stdout);
    }
    (void)await(path, "done");
    _exit(st == TD_OK ? 0 : 1);
}

static int
elheal(const char *path, int slow, int rank, td_tensor_t *t, int grow)
{
    td_elastic_t *el = NULL;
    td_status_t st;
    int out = 0;

    st = td_elastic_create(NULL, &el);
    if (st != TD_OK) {
        printf("FAIL elastic on rank %d: %s\n", rank, td_last_error());
        fflush(stdout);
        _exit(1);
    }
    if (rank == 0) {
        touch(path);
    }
    (void)await(path, "cut");
    for (int step = 1, tries = 0; step <= 2 + grow && tries < 6; tries++) {
        td_group_t *g = td_elastic_group(el);
        td_elastic_change_t ch;
        int grew = 0;

        st = td_tensor_fill_(t, rank + 1);
        if (st == TD_OK) {
            st = td_all_reduce(g, t, TD_REDUCE_SUM);
        }
        printf("op=elheal step=%d rank=%d epoch=%lld world=%d rc=%d sum=%g "
               "err=%s\n", step, rank, (long long)td_elastic_epoch(el),
               td_group_size(g), (int)st,
               st == TD_OK ? ((float *)td_tensor_data(t))[0] : -1.0,
               st == TD_OK ? "" : td_last_error());
        fflush(stdout);
        if (st == TD_OK && grow) {
            td_elastic_commit(el, step);
            memset(&ch, 0, sizeof(ch));
            st = td_elastic_admit(el, &ch, &grew);
            if (st != TD_OK || grew) {
                printf("op=elheal grew rank=%d rc=%d epoch=%lld world=%d->%d "
                       "err=%s\n", rank, (int)st, (long long)ch.epoch,
                       ch.old_size, ch.new_size,
                       st == TD_OK ? "" : td_last_error());
                fflush(stdout);
            }
        }
        if (st == TD_OK) {
            step++;
            continue;
        }
        if (rank == slow) {
            (void)await(path, "go");
        }
        memset(&ch, 0, sizeof(ch));
        st = td_elastic_recover(el, &ch);
        printf("op=elheal recover rank=%d rc=%d epoch=%lld world=%d->%d "
               "lost=%d err=%s\n", rank, (int)st, (long long)ch.epoch,
               ch.old_size, ch.new_size, ch.n_lost > 0 ? ch.lost[0] : -1,
               st == TD_OK ? "" : td_last_error());
        fflush(stdout);
        if (st != TD_OK) {
            out = 3;
            if (grow) {
                _exit(out);         /* to be replaced */
            }
            break;
        }
    }
    (void)await(path, "done");
    /* a job with a rank dropped cannot end cleanly */
    _exit(out);
}

/* OP "wireup" (1+1, cold; transport.c L13,
 * tests/hosts/test_hosts_wireup.sh): no endpoint before it. Each rank
 * holds the other's address, both pass a store barrier, then rank 1
 * posts an exchange with rank 0 (td_irecv, td_isend of 1 MiB), so its
 * endpoint and wire-up request come first; rank 0 posts its own once
 * READY.held exists (its shim holds rank 1's request) and waits for its
 * send. Rank 1's shim creates READY.seen once its UCX took rank 0's
 * request; the test then cuts host 2 off, restores it once rank 0
 * reported, and creates READY.release (rank 0's shim hands rank 1's
 * request to UCX). Each prints "op=wireup rank=R rc=STATUS err=MESSAGE"
 * for its send, then waits for READY.done. */
static int
wireup(const char *path, int rank, td_tensor_t *t)
{
    td_work_t *rx = NULL, *tx = NULL;
    td_status_t st;
    int other = 1 - rank;

    if (td__runtime_host_id(other) == 0 || td_barrier(30) != TD_OK) {
        fprintf(stderr, "hosts_peer: rank %d: rank %d's address or the "
                "barrier: %s\n", rank, other, td_last_error());
        return 1;
    }
    if (rank == 0) {
        (void)await(path, "held");
    }
    st = td_irecv(td_group_world(), t, other, 5, &rx);
    if (st == TD_OK) {
        st = td_isend(td_group_world(), t, other, 5, &tx);
    }
    if (st == TD_OK) {
        st = td_work_wait(tx, 60);
    }
    printf("op=wireup rank=%d rc=%d err=%s\n", rank, (int)st,
           st == TD_OK ? "" : td_last_error());
    fflush(stdout);
    (void)await(path, "done");
    /* a job with a rank dropped cannot end cleanly */
    _exit(0);
}

/* OP "queued" (1+1, warm; transport.c L12, L13: a drop with sends of
 * ours in UCX, on an endpoint whose wire-up is done,
 * tests/hosts/test_hosts_rails.sh): rank 0 streams messages of T's size
 * (rendezvous across hosts) to rank 1, message K filled with K, always
 * two posted (on two buffers), until a send fails; once the link is cut
 * none completes, so rank 0 drops rank 1 with sends in UCX. Rank 1
 * receives them in order and checks each. Rank 0 creates READY once its
 * first send completed, rank 1 READY.got once it received two. Each
 * prints "op=queued rank=R n=N bad=B rc=STATUS err=MESSAGE" (N: messages
 * sent or received whole, B: received with a wrong value, the lost
 * message of an order broken), then waits for READY.done. */
static int
queued(const char *path, int rank, td_tensor_t *t)
{
    char f[4096];
    td_tensor_t *b[2] = { t, NULL };
    td_work_t *w[2] = { NULL, NULL };
    td_status_t st = TD_OK;
    int64_t n = td_tensor_numel(t);
    int whole = 0, bad = 0;

    if (td_tensor_zeros(&n, 1, TD_FLOAT32, &b[1]) != TD_OK) {
        return 1;
    }
    snprintf(f, sizeof(f), "%s.got", path);
    for (int k = 0; st == TD_OK && k < 100000; k++) {
        td_tensor_t *x = b[k % 2];

        if (rank == 0) {
            /* send K-2 (this buffer's) is done before K reuses it */
            if (w[k % 2] != NULL) {
                st = td_work_wait(w[k % 2], -1);
                td_work_release(w[k % 2]);
                w[k % 2] = NULL;
                if (st != TD_OK) {
                    break;
                }
                if (++whole == 1) {
                    touch(path);
                }
            }
            if ((st = td_tensor_fill_(x, k)) == TD_OK) {
                st = td_isend(td_group_world(), x, 1, 9, &w[k % 2]);
            }
            continue;
        }
        if ((st = td_recv(td_group_world(), x, 0, 9, NULL)) != TD_OK) {
            break;
        }
        const float *v = td_tensor_data(x);

        for (int64_t i = 0; i < n; i++) {
            if (v[i] != (float)k) {
                bad++;
                break;
            }
        }
        if (++whole == 2) {
            touch(f);
        }
    }
    printf("op=queued rank=%d n=%d bad=%d rc=%d err=%s\n", rank, whole, bad,
           (int)st, st == TD_OK ? "" : td_last_error());
    fflush(stdout);
    (void)await(path, "done");
    /* a job with a rank dropped cannot end cleanly */
    _exit(0);
}

static int
dropped(const char *path, int lost, int rank, td_tensor_t *t)
{
    char f[4096];
    td_status_t st = TD_OK;
    FILE *out;

    if (rank == lost) {
        snprintf(f, sizeof(f), "%s.%d", path, rank);
        if ((out = fopen(f, "w")) == NULL) {
            return 1;
        }
        fprintf(out, "%ld\n", (long)getpid());
        fclose(out);
    }
    /* Every other rank holds LOST's address before LOST can stop: the
     * store is served by rank 0's process, and a rank that had to fetch
     * the address from it while it was stopped could make no endpoint
     * to it, so it never watched it (the stop "missed": CI, 3 times in a
     * row). A store barrier, so no endpoint is made before the
     * all_reduce. */
    if (rank != lost && td__runtime_host_id(lost) == 0) {
        fprintf(stderr, "hosts_peer: rank %d: rank %d's address: %s\n",
                rank, lost, td_last_error());
        return 1;
    }
    if ((st = td_barrier(30)) != TD_OK) {
        fprintf(stderr, "hosts_peer: rank %d: barrier: %s\n", rank,
                td_last_error());
        return 1;
    }
    for (int call = 1; call <= 2 && st == TD_OK; call++) {
        st = call == 1 ? td_all_reduce(td_group_world(), t, TD_REDUCE_SUM)
                       : td_barrier(30);
        printf("op=dropped call=%d rank=%d rc=%d err=%s\n", call, rank,
               (int)st, st == TD_OK ? "" : td_last_error());
        fflush(stdout);
    }
    if (st == TD_OK) {
        return td_finalize() == TD_OK ? 0 : 1;
    }
    /* a job with a rank taken for lost cannot end cleanly */
    _exit(0);
}

int
main(int argc, char **argv)
{
    const char *op;
    int lost, rank, size;
    td_status_t st;
    td_tensor_t *t;
    const int64_t shape[1] = { 4 };
    char done[4096];

    if (argc != 4) {
        fprintf(stderr, "usage: hosts_peer coll|rpc|barrier|stall|dropped|answer|heal|"
                "elheal|elgrow|wireup|queued LOST READY\n");
        return 2;
    }
    op = argv[1];
    lost = atoi(argv[2]);
    if (td_rpc_register("hold", hold, NULL) != TD_OK ||
        td_rpc_register("ping", ping, NULL) != TD_OK ||
        td_init(NULL) != TD_OK) {
        fprintf(stderr, "FAIL init: %s\n", td_last_error());
        return 1;
    }
    rank = td_world()->rank;
    size = td_world()->world_size;
    if (td_tensor_zeros(shape, 1, TD_FLOAT32, &t) != TD_OK) {
        return 1;
    }
    if (strcmp(op, "dropped") == 0) {
        return dropped(argv[3], lost, rank, t);
    }
    if (strcmp(op, "answer") == 0) {
        return answer(rank, t);
    }
    if (strcmp(op, "wireup") == 0) {
        td_tensor_t *big;
        const int64_t n[1] = { 1 << 18 };       /* 1 MiB: not a lean send */

        if (td_tensor_zeros(n, 1, TD_FLOAT32, &big) != TD_OK) {
            return 1;
        }
        return wireup(argv[3], rank, big);
    }
    if (strcmp(op, "elgrow") == 0 && td_elastic_replacement()) {
        return elgrow_join(argv[3], rank, t);
    }
    /* Warm: every pair has talked (endpoints both ways). */
    st = TD_OK;
    for (int r = 0; r < size && st == TD_OK; r++) {
        st = r != rank ? td_rpc_sync(r, "ping", NULL, 30, NULL) : TD_OK;
    }
    if (st == TD_OK) {
        st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
    }
    if (st == TD_OK) {
        st = td_barrier(30);
    }
    if (st != TD_OK) {
        printf("FAIL warm-up on rank %d: %s\n", rank, td_last_error());
        return 1;
    }
    if (strcmp(op, "stall") == 0) {
        return stall(argv[3], rank, size, t);
    }
    if (strcmp(op, "heal") == 0) {
        return heal(argv[3], rank, t);
    }
    if (strcmp(op, "queued") == 0) {
        td_tensor_t *big;
        const int64_t n[1] = { 1 << 21 };   /* 8 MiB: a rendezvous */

        if (td_tensor_zeros(n, 1, TD_FLOAT32, &big) != TD_OK) {
            return 1;
        }
        return queued(argv[3], rank, big);
    }
    if (strcmp(op, "elheal") == 0 || strcmp(op, "elgrow") == 0) {
        return elheal(argv[3], lost, rank, t, strcmp(op, "elgrow") == 0);
    }
    if (rank >= lost) {
        sleep(120);              /* cut off or killed before this ends */
        return 0;
    }
    if (rank == 0) {
        touch(argv[3]);
    }
    if (strcmp(op, "coll") == 0) {
        st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
    } else if (strcmp(op, "rpc") == 0) {
        st = td_rpc_sync(lost, "hold", NULL, 120, NULL);
    } else {
        st = td_barrier(120);
    }
    printf("op=%s rank=%d rc=%d t=%.3f err=%s\n", op, rank, (int)st,
           boottime(), st == TD_OK ? "" : td_last_error());
    fflush(stdout);
    /* Stay until every waiting rank has reported (READY.done): a rank
     * that left at once would be lost too, and the others might report
     * its loss instead of the host's. */
    snprintf(done, sizeof(done), "%s.done", argv[3]);
    for (int i = 0; i < 600 && access(done, F_OK) != 0; i++) {
        usleep(100000);
    }
    /* The job cannot end cleanly without the lost host: leave now. */
    _exit(st != TD_OK ? 0 : 1);
}
