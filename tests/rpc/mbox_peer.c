/* tests/rpc/mbox_peer.c: RPC's small messages through the mailboxes
 * between ranks of one host (runtime/rpc/rpc.c R12,
 * ucx_transport/transport.c X1-X6), run by tests/rpc/test_rpc_mbox.sh
 * under todist-run -n 2. Rank 0 drives and prints PASS/FAIL per check;
 * MBOX_EXPECT=on|off says whether messages must have gone through the
 * mailboxes (TODIST_RPC_MBOX unset) or not (TODIST_RPC_MBOX=0); every
 * other check must pass either way.
 *
 *   basic     the path taken (both ranks' counts), echoes of 0 B to just
 *             over a slot, 400 mixed calls (8 B in a mailbox, 16 KiB
 *             through UCX, more in flight than the ring has slots) run in
 *             their sending order, a timeout
 *   kill      rank 1 answers a call while rank 0's progress thread is
 *             stalled (the reply sits in rank 0's inbox), then dies: both
 *             of rank 0's calls end within 2 s of the death, the pending
 *             one failing and naming rank 1
 *   intruder  rank 0 makes MBOX_CALLS calls of "count"; a process outside
 *             the job (mbox_intruder) then writes one of them again into
 *             rank 1's inbox with a wrong job tag; rank 0 goes on: rank 1
 *             ran exactly the calls rank 0 made */
#include "config.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <todist/todist.h>
#include "runtime/runtime.h"
#include "ucx_transport/transport.h"
#include "tests/peer_check.h"

#define N_ORDER 400
#define N_COUNT 5

static int on;                     /* MBOX_EXPECT=on */
static int64_t order_seen[N_ORDER];
static int n_order;                /* the progress thread writes (inline) */
static int64_t n_count;            /* "count" calls run (inline) */

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
mbox_counts(uint64_t *tx, uint64_t *rx)
{
    td__transport_mbox_counts(td__runtime_transport(), tx, rx);
}

/* ---- handlers ----------------------------------------------------------- */

/* -> the mailbox counts of this rank: sent, received */
static td_status_t
fn_counts(void *arg, const td_rpc_call_info_t *info,
          const td_rpc_list_t *args, td_rpc_list_t *result)
{
    uint64_t tx, rx;

    (void)arg; (void)info; (void)args;
    mbox_counts(&tx, &rx);
    td_rpc_list_add_int(result, (int64_t)tx);
    return td_rpc_list_add_int(result, (int64_t)rx);
}

static td_status_t
fn_echo(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
        td_rpc_list_t *result)
{
    const void *p;
    size_t n;

    (void)arg; (void)info;
    if (td_rpc_list_bytes(args, 0, &p, &n) != TD_OK) {
        return TD_ERR_INVALID;
    }
    return td_rpc_list_add_bytes(result, p, n);
}

/* Inline: note the call's number in the order the calls ran. */
static td_status_t
fn_seq(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
       td_rpc_list_t *result)
{
    int64_t i = -1;

    (void)arg; (void)info; (void)result;
    td_rpc_list_int(args, 0, &i);
    if (n_order < N_ORDER) {
        order_seen[n_order] = i;
    }
    n_order++;
    return TD_OK;
}

/* -> calls seen, calls out of their sending order */
static td_status_t
fn_seq_check(void *arg, const td_rpc_call_info_t *info,
             const td_rpc_list_t *args, td_rpc_list_t *result)
{
    int64_t bad = 0;

    (void)arg; (void)info; (void)args;
    for (int k = 0; k < n_order && k < N_ORDER; k++) {
        bad += order_seen[k] != k;
    }
    td_rpc_list_add_int(result, n_order);
    return td_rpc_list_add_int(result, bad);
}

static td_status_t
fn_sleep(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
         td_rpc_list_t *result)
{
    double s = 0;

    (void)arg; (void)info; (void)result;
    td_rpc_list_double(args, 0, &s);
    usleep((useconds_t)(s * 1e6));
    return TD_OK;
}

/* Inline: count this call, answer its argument. */
static td_status_t
fn_count(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
         td_rpc_list_t *result)
{
    int64_t v = 0;

    (void)arg; (void)info;
    __atomic_add_fetch(&n_count, 1, __ATOMIC_RELAXED);
    td_rpc_list_int(args, 0, &v);
    return td_rpc_list_add_int(result, v);
}

static td_status_t
fn_count_get(void *arg, const td_rpc_call_info_t *info,
             const td_rpc_list_t *args, td_rpc_list_t *result)
{
    (void)arg; (void)info; (void)args;
    return td_rpc_list_add_int(result,
                               __atomic_load_n(&n_count, __ATOMIC_RELAXED));
}

/* Inline, on rank 0: its progress thread stalls for 1.5 s (kill). */
static td_status_t
fn_stall(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
         td_rpc_list_t *result)
{
    (void)arg; (void)info; (void)args; (void)result;
    usleep(1500000);
    return TD_OK;
}

static uint64_t tx_before_reply;

/* Rank 1 dies 0.3 s after its reply went out: says first whether that
 * reply went into rank 0's mailbox. */
static void *
killer(void *arg)
{
    uint64_t tx, rx;

    (void)arg;
    usleep(300000);
    mbox_counts(&tx, &rx);
    check(on ? tx > tx_before_reply : tx == 0, "kill_reply_path",
          "mailbox messages sent %llu before the reply, %llu now",
          (unsigned long long)tx_before_reply, (unsigned long long)tx);
    fflush(stdout);
    raise(SIGKILL);
    return NULL;
}

/* Pool, on rank 1: stall rank 0's progress thread, answer while it is
 * stalled, die soon after (kill). */
static td_status_t
fn_reply_die(void *arg, const td_rpc_call_info_t *info,
             const td_rpc_list_t *args, td_rpc_list_t *result)
{
    td_future_t *f = NULL;
    pthread_t t;
    uint64_t rx;

    (void)arg; (void)info; (void)args;
    td_rpc_async(0, "stall", NULL, 10, &f);     /* never waited for */
    usleep(200000);                              /* rank 0 stalls now */
    mbox_counts(&tx_before_reply, &rx);
    pthread_create(&t, NULL, killer, NULL);
    return td_rpc_list_add_int(result, 42);
}

/* ---- rank 0's checks ------------------------------------------------------ */

static void
mode_basic(void)
{
    uint64_t tx, rx;
    int64_t rtx = -1, rrx = -1;

    {
        /* the path: small calls and their replies through the mailboxes
         * (on), or none at all (off) */
        td_rpc_list_t *a, *r = NULL;
        int ok = 1;

        for (int i = 0; i < 20 && ok; i++) {
            td_rpc_list_create(&a);
            td_rpc_list_add_int(a, i);
            ok = td_rpc_sync(1, "count", a, 30, &r) == TD_OK;
            td_rpc_list_free(a);
            td_rpc_list_free(r);
            r = NULL;
        }
        if (td_rpc_sync(1, "counts", NULL, 30, &r) == TD_OK) {
            td_rpc_list_int(r, 0, &rtx);
            td_rpc_list_int(r, 1, &rrx);
        }
        td_rpc_list_free(r);
        mbox_counts(&tx, &rx);
        /* the first call and its reply go through UCX (the offers ride
         * with them, X2) */
        check(ok && (on ? tx >= 19 && rx >= 19 && rtx >= 19 && rrx >= 19
                        : tx == 0 && rx == 0 && rtx == 0 && rrx == 0),
              "mbox_path", "calls %s; mailbox messages: rank 0 sent %llu "
              "received %llu, rank 1 sent %lld received %lld (%s)",
              ok ? "ok" : "failed", (unsigned long long)tx,
              (unsigned long long)rx, (long long)rtx, (long long)rrx,
              td_last_error());
    }

    {
        /* echoes: empty, small, the largest that fits a slot, over it */
        static const size_t sizes[] = { 0, 8, 1000, 3900, 4200, 20000 };
        int ok = 1;

        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]) && ok; s++) {
            uint8_t *b = malloc(sizes[s] + 1);
            td_rpc_list_t *a, *r = NULL;
            const void *p = NULL;
            size_t n = 0;

            for (size_t i = 0; i < sizes[s]; i++) {
                b[i] = (uint8_t)(i * 7 + s);
            }
            td_rpc_list_create(&a);
            td_rpc_list_add_bytes(a, b, sizes[s]);
            ok = td_rpc_sync(1, "echo", a, 30, &r) == TD_OK &&
                 td_rpc_list_bytes(r, 0, &p, &n) == TD_OK && n == sizes[s] &&
                 (n == 0 || memcmp(p, b, n) == 0);
            if (!ok) {
                printf("# echo of %zu bytes: %zu back (%s)\n", sizes[s], n,
                       td_last_error());
            }
            td_rpc_list_free(a);
            td_rpc_list_free(r);
            free(b);
        }
        check(ok, "mbox_echo", "an echo came back wrong");
    }

    {
        /* R11 across both paths (X3): 8 B calls in mailboxes, 16 KiB ones
         * through UCX, all in flight at once (more than a ring's slots:
         * some small ones fall back to UCX too) */
        static td_future_t *f[N_ORDER];
        static uint8_t big[16384];
        td_rpc_list_t *r = NULL;
        int64_t seen = -1, bad = -1;
        int failed = 0;

        for (int i = 0; i < N_ORDER; i++) {
            td_rpc_list_t *a;

            td_rpc_list_create(&a);
            td_rpc_list_add_int(a, i);
            if (i % 3 == 2) {
                td_rpc_list_add_bytes(a, big, sizeof(big));
            }
            failed += td_rpc_async(1, "seq", a, 30, &f[i]) != TD_OK;
            td_rpc_list_free(a);
        }
        for (int i = 0; i < N_ORDER; i++) {
            failed += td_future_wait(f[i], 30) != TD_OK;
            td_future_release(f[i]);
        }
        if (td_rpc_sync(1, "seq_check", NULL, 30, &r) == TD_OK) {
            td_rpc_list_int(r, 0, &seen);
            td_rpc_list_int(r, 1, &bad);
        }
        td_rpc_list_free(r);
        check(failed == 0 && seen == N_ORDER && bad == 0, "mbox_order",
              "%d calls failed; rank 1 ran %lld, %lld out of order",
              failed, (long long)seen, (long long)bad);
    }

    {
        /* a timeout still fires (the call went into a mailbox) */
        td_rpc_list_t *a, *r = NULL;
        td_status_t st;
        double t0 = now_s(), dt;

        td_rpc_list_create(&a);
        td_rpc_list_add_double(a, 2.0);
        st = td_rpc_sync(1, "sleep", a, 0.3, &r);
        dt = now_s() - t0;
        check(st == TD_ERR_TIMEOUT && dt < 1.5, "mbox_timeout",
              "status %d after %.2f s (%s)", st, dt, td_last_error());
        td_rpc_list_free(a);
        td_rpc_list_free(r);
    }
}

static void
mode_kill(void)
{
    td_future_t *f1 = NULL, *f2 = NULL;
    td_rpc_list_t *a;
    td_status_t s1, s2;
    int64_t v = -1;
    double t0, dt;

    /* f2: pending when rank 1 dies (never answered) */
    td_rpc_list_create(&a);
    td_rpc_list_add_double(a, 30.0);
    td_rpc_async(1, "sleep", a, 60, &f2);
    td_rpc_list_free(a);
    t0 = now_s();
    td_rpc_async(1, "reply_die", NULL, 60, &f1);
    s1 = td_future_wait(f1, 20);
    if (s1 == TD_OK && td_future_value(f1) != NULL) {
        td_rpc_list_int(td_future_value(f1), 0, &v);
    }
    s2 = td_future_wait(f2, 20);
    dt = now_s() - t0;
    /* rank 1 dies about 0.5 s after t0; rank 0 stalls until about 1.7 s:
     * the reply sat in its inbox meanwhile. It is taken (right value) or
     * the call fails naming rank 1; the other call fails naming it; both
     * within 2 s of the death. */
    check((s1 == TD_OK ? v == 42 : s1 == TD_ERR_PEER) && dt < 2.5,
          "kill_reply_call_ends", "status %d value %lld after %.2f s",
          s1, (long long)v, dt);
    check(s2 == TD_ERR_PEER && strstr(td_last_error(), "rank 1") != NULL &&
          dt < 2.5, "kill_pending_call_fails", "%d '%s' after %.2f s", s2,
          td_last_error(), dt);
    td_future_release(f1);
    td_future_release(f2);
    fflush(stdout);
    _exit(n_fail ? 1 : 0);     /* the job is broken: no graceful join */
}

/* Wait (bounded) until the file PATH exists. */
static int
wait_file(const char *path, double max_s)
{
    double t0 = now_s();

    while (access(path, F_OK) != 0) {
        if (now_s() - t0 > max_s) {
            return 0;
        }
        usleep(10000);
    }
    return 1;
}

static int
count_calls(int from, int to)
{
    int ok = 1;

    for (int i = from; i < to && ok; i++) {
        td_rpc_list_t *a, *r = NULL;
        int64_t v = -1;

        td_rpc_list_create(&a);
        td_rpc_list_add_int(a, i);
        ok = td_rpc_sync(1, "count", a, 30, &r) == TD_OK &&
             td_rpc_list_int(r, 0, &v) == TD_OK && v == i;
        td_rpc_list_free(a);
        td_rpc_list_free(r);
    }
    return ok;
}

static void
mode_intruder(const char *dir)
{
    char path[512];
    td_rpc_list_t *r = NULL;
    int64_t n = -1;
    int ok;

    ok = count_calls(0, N_COUNT);
    snprintf(path, sizeof(path), "%s/ready", dir);
    fclose(fopen(path, "w"));
    snprintf(path, sizeof(path), "%s/done", dir);
    ok = ok && wait_file(path, 60);
    usleep(100000);            /* rank 1 looks at its inbox meanwhile */
    ok = ok && count_calls(N_COUNT, 2 * N_COUNT);
    if (td_rpc_sync(1, "count_get", NULL, 30, &r) == TD_OK) {
        td_rpc_list_int(r, 0, &n);
    }
    td_rpc_list_free(r);
    check(ok && n == 2 * N_COUNT, "intruder_not_run", "calls %s; rank 1 "
          "ran 'count' %lld times, rank 0 called it %d times",
          ok ? "ok" : "failed", (long long)n, 2 * N_COUNT);
}

int
main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "basic";
    const char *e = getenv("MBOX_EXPECT");
    td_status_t st;

    setvbuf(stdout, NULL, _IOLBF, 0);
    on = e == NULL || strcmp(e, "off") != 0;
    if (strcmp(mode, "kill") == 0) {
        /* todist-run stops the group when rank 1 dies: finish the checks */
        signal(SIGTERM, SIG_IGN);
    }
    td_rpc_register("counts", fn_counts, NULL);
    td_rpc_register("echo", fn_echo, NULL);
    td_rpc_register("seq_check", fn_seq_check, NULL);
    td_rpc_register("sleep", fn_sleep, NULL);
    td_rpc_register("reply_die", fn_reply_die, NULL);
    td_rpc_register("count_get", fn_count_get, NULL);
    td_rpc_register_flags("seq", fn_seq, NULL, TD_RPC_INLINE);
    td_rpc_register_flags("count", fn_count, NULL, TD_RPC_INLINE);
    td_rpc_register_flags("stall", fn_stall, NULL, TD_RPC_INLINE);
    st = td_init(NULL);
    if (st != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 1;
    }
    if (strcmp(mode, "intruder") == 0 && td_world()->rank == 1) {
        /* the intruder needs our pid */
        char path[512], tmp[520];
        FILE *f;

        snprintf(path, sizeof(path), "%s/pid", argc > 2 ? argv[2] : ".");
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        if ((f = fopen(tmp, "w")) != NULL) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
            rename(tmp, path);
        }
    }
    if (td_world()->rank == 0) {
        if (strcmp(mode, "kill") == 0) {
            mode_kill();
        } else if (strcmp(mode, "intruder") == 0) {
            mode_intruder(argc > 2 ? argv[2] : ".");
        } else {
            mode_basic();
        }
    }
    st = td_finalize();
    if (st != TD_OK) {
        fprintf(stderr, "td_finalize: %s\n", td_last_error());
        return 1;
    }
    return n_fail ? 1 : 0;
}
