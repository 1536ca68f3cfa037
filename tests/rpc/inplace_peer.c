/* tests/rpc/inplace_peer.c: RPC bodies read in place between two ranks of
 * one host (runtime/rpc/rpc.c R10, ucx_transport/transport.c O1-O5), run
 * by tests/rpc/test_rpc_inplace.sh under todist-run -n 2. Rank 0 drives
 * and prints PASS/FAIL per check. INPLACE_EXPECT=on|off says whether the
 * bodies must have been read in place (TODIST_RPC_CMA unset) or not
 * (TODIST_RPC_CMA=0); every other check must pass either way.
 *
 *   basic  echoes below and above the threshold, several bodies, the
 *          counts, the order of 200 mixed small and large calls, a remote
 *          object's fetch, a distributed backward's gradient messages
 *   kill   rank 1 stalls its progress thread, then dies, with a 16 MiB
 *          call offered to it: the call fails within 2 s naming rank 1,
 *          and the offer's send completes (the transport flushes) */
#include "config.h"

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

#define N_ORDER 200

static int on;                     /* INPLACE_EXPECT=on */
static int64_t order_seen[N_ORDER];
static int n_order;                /* the progress thread writes (inline) */

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t
reads_here(void)
{
    uint64_t rd = 0, refused = 0;

    td__transport_inplace_counts(td__runtime_transport(), &rd, &refused);
    return rd + (refused << 32);   /* refused ones show in the high half */
}

/* A float32 tensor of N elements: x[i] = SEED + i % 1000. */
static td_tensor_t *
pattern(int64_t n, float seed)
{
    td_tensor_t *t = NULL;
    float *p;

    if (td_tensor_empty(&n, 1, TD_FLOAT32, TD_CPU, &t) != TD_OK) {
        return NULL;
    }
    p = td_tensor_data(t);
    for (int64_t i = 0; i < n; i++) {
        p[i] = seed + (float)(i % 1000);
    }
    return t;
}

static int
is_pattern(const td_tensor_t *t, int64_t n, float seed, float scale)
{
    const float *p = td_tensor_data(t);

    if (td_tensor_numel(t) != n) {
        return 0;
    }
    for (int64_t i = 0; i < n; i++) {
        if (p[i] != scale * (seed + (float)(i % 1000))) {
            return 0;
        }
    }
    return 1;
}

/* ---- handlers (rank 1) ----------------------------------------------- */

static td_status_t
fn_echo(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
        td_rpc_list_t *result)
{
    (void)arg; (void)info;
    for (size_t i = 0; i < td_rpc_list_len(args); i++) {
        td_tensor_t *t;
        int64_t v;
        td_status_t st = td_rpc_list_kind(args, i) == TD_VALUE_TENSOR
            ? (td_rpc_list_tensor(args, i, &t) == TD_OK
               ? td_rpc_list_add_tensor(result, t) : TD_ERR_INVALID)
            : (td_rpc_list_int(args, i, &v) == TD_OK
               ? td_rpc_list_add_int(result, v) : TD_ERR_INVALID);

        if (st != TD_OK) {
            return st;
        }
    }
    return TD_OK;
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
fn_counts(void *arg, const td_rpc_call_info_t *info,
          const td_rpc_list_t *args, td_rpc_list_t *result)
{
    (void)arg; (void)info; (void)args;
    return td_rpc_list_add_int(result, (int64_t)reads_here());
}

/* make_big(n, seed) -> pattern(n, seed), kept by a remote reference */
static td_status_t
fn_make_big(void *arg, const td_rpc_call_info_t *info,
            const td_rpc_list_t *args, td_rpc_list_t *result)
{
    int64_t n = 0;
    double seed = 0;
    td_tensor_t *t;
    td_status_t st;

    (void)arg; (void)info;
    td_rpc_list_int(args, 0, &n);
    td_rpc_list_double(args, 1, &seed);
    t = pattern(n, (float)seed);
    if (t == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "make_big: %lld", (long long)n);
    }
    st = td_rpc_list_add_tensor(result, t);
    td_tensor_release(t);
    return st;
}

/* twice(x) -> x + x (differentiable: distributed autograd records it) */
static td_status_t
fn_twice(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
         td_rpc_list_t *result)
{
    td_tensor_t *x, *y;
    td_status_t st;

    (void)arg; (void)info;
    if ((st = td_rpc_list_tensor(args, 0, &x)) != TD_OK ||
        (st = td_add(x, x, &y)) != TD_OK) {
        return st;
    }
    st = td_rpc_list_add_tensor(result, y);
    td_tensor_release(y);
    return st;
}

/* Inline: hold the progress thread (so an offer waits unread), then die. */
static td_status_t
fn_stall_die(void *arg, const td_rpc_call_info_t *info,
             const td_rpc_list_t *args, td_rpc_list_t *result)
{
    (void)arg; (void)info; (void)args; (void)result;
    usleep(300 * 1000);
    raise(SIGKILL);
    return TD_OK;
}

/* ---- rank 0 ----------------------------------------------------------- */

static int64_t
remote_counts(void)
{
    td_rpc_list_t *r = NULL;
    int64_t v = -1;

    if (td_rpc_sync(1, "counts", NULL, 30, &r) == TD_OK) {
        td_rpc_list_int(r, 0, &v);
    }
    td_rpc_list_free(r);
    return v;
}

/* Echo one tensor of N floats; 1 when it came back intact. */
static int
echo_one(int64_t n, float seed)
{
    td_rpc_list_t *a, *r = NULL;
    td_tensor_t *t = pattern(n, seed), *back;
    int ok = 0;

    td_rpc_list_create(&a);
    td_rpc_list_add_tensor(a, t);
    if (td_rpc_sync(1, "echo", a, 30, &r) == TD_OK &&
        td_rpc_list_tensor(r, 0, &back) == TD_OK) {
        ok = is_pattern(back, n, seed, 1);
    }
    td_rpc_list_free(a);
    td_rpc_list_free(r);
    td_tensor_release(t);
    return ok;
}

static void
check_counts(const char *name, uint64_t mine, int64_t theirs)
{
    /* low half: reads, high half: refusals */
    uint64_t t = (uint64_t)theirs;

    if (on) {
        check(theirs >= 0 && (mine & 0xffffffffu) > 0 &&
              (t & 0xffffffffu) > 0 && mine >> 32 == 0 && t >> 32 == 0,
              name, "read in place: rank 0 %llu, rank 1 %llu; refused: "
              "%llu, %llu", (unsigned long long)(mine & 0xffffffffu),
              (unsigned long long)(t & 0xffffffffu),
              (unsigned long long)(mine >> 32), (unsigned long long)(t >> 32));
    } else {
        check(mine == 0 && theirs == 0, name, "TODIST_RPC_CMA=0, yet "
              "rank 0 %llx and rank 1 %llx (reads, refused << 32)",
              (unsigned long long)mine, (unsigned long long)theirs);
    }
}

static void
mode_basic(void)
{
    static const int64_t sizes[] = { 16383, 16384, 262144, 4194304 };
    static const char *names[] = { "echo_64KiB_less_4", "echo_64KiB",
                                   "echo_1MiB", "echo_16MiB" };
    char name[64];

    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof(name), "inplace_%s", names[i]);
        check(echo_one(sizes[i], (float)i), name, "%lld floats came back "
              "wrong or failed: %s", (long long)sizes[i], td_last_error());
    }
    {
        /* three tensors and an int in one message: several bodies */
        td_rpc_list_t *a, *r = NULL;
        td_tensor_t *t[3], *b;
        int ok = 1;

        td_rpc_list_create(&a);
        for (int k = 0; k < 3; k++) {
            t[k] = pattern(25600 + k, (float)(10 * k));
            td_rpc_list_add_tensor(a, t[k]);
        }
        td_rpc_list_add_int(a, 77);
        ok = td_rpc_sync(1, "echo", a, 30, &r) == TD_OK;
        for (int k = 0; ok && k < 3; k++) {
            ok = td_rpc_list_tensor(r, (size_t)k, &b) == TD_OK &&
                 is_pattern(b, 25600 + k, (float)(10 * k), 1);
        }
        int64_t v = 0;
        ok = ok && td_rpc_list_int(r, 3, &v) == TD_OK && v == 77;
        check(ok, "inplace_several_bodies", "%s", td_last_error());
        for (int k = 0; k < 3; k++) {
            td_tensor_release(t[k]);
        }
        td_rpc_list_free(a);
        td_rpc_list_free(r);
    }
    check_counts("inplace_counts", reads_here(), remote_counts());

    {
        /* R10/O2: mixed small and large calls run in their sending order */
        td_future_t *f[N_ORDER];
        td_tensor_t *big = pattern(262144, 3);
        td_rpc_list_t *r = NULL;
        int64_t seen = -1, bad = -1;
        int failed = 0;

        for (int i = 0; i < N_ORDER; i++) {
            td_rpc_list_t *a;

            td_rpc_list_create(&a);
            td_rpc_list_add_int(a, i);
            if (i % 2 == 1) {
                td_rpc_list_add_tensor(a, big);
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
        td_tensor_release(big);
        check(failed == 0 && seen == N_ORDER && bad == 0, "inplace_order",
              "%d calls failed; rank 1 ran %lld, %lld out of order",
              failed, (long long)seen, (long long)bad);
    }

    {
        /* a remote object's value fetched: the owner's reply is a body */
        td_rpc_list_t *a, *v = NULL;
        td_rref_t *h = NULL;
        td_tensor_t *t;
        uint64_t before = reads_here();
        int ok;

        td_rpc_list_create(&a);
        td_rpc_list_add_int(a, 1048576);
        td_rpc_list_add_double(a, 5);
        ok = td_remote(1, "make_big", a, 30, &h) == TD_OK &&
             td_rref_to_here(h, 30, &v) == TD_OK &&
             td_rpc_list_tensor(v, 0, &t) == TD_OK &&
             is_pattern(t, 1048576, 5, 1);
        check(ok && (reads_here() > before) == on, "inplace_rref_fetch",
              "fetched %s, reads %llu -> %llu (%s)", ok ? "intact" : "wrong",
              (unsigned long long)before, (unsigned long long)reads_here(),
              td_last_error());
        td_rpc_list_free(a);
        td_rpc_list_free(v);
        td_rref_release(h);
    }

    {
        /* distributed backward: the call's argument, its result and both
         * gradient messages are 4 MiB bodies */
        int64_t ctx = 0;
        td_tensor_t *x = pattern(1048576, 1), *y, *loss = NULL, *g = NULL;
        td_rpc_list_t *a, *r = NULL;
        uint64_t mine = reads_here();
        int64_t theirs = remote_counts();
        int ok;

        td_tensor_set_requires_grad(x, 1);
        td_rpc_list_create(&a);
        td_rpc_list_add_tensor(a, x);
        ok = td_dist_autograd_begin(&ctx) == TD_OK &&
             td_rpc_sync(1, "twice", a, 30, &r) == TD_OK &&
             td_rpc_list_tensor(r, 0, &y) == TD_OK &&
             is_pattern(y, 1048576, 1, 2) &&
             td_sum(y, &loss) == TD_OK &&
             td_dist_backward(ctx, &loss, 1, 0) == TD_OK &&
             td_dist_get_gradient(ctx, x, &g) == TD_OK &&
             td_tensor_numel(g) == 1048576;
        for (int64_t i = 0; ok && i < 1048576; i++) {
            ok = ((const float *)td_tensor_data(g))[i] == 2.0f;
        }
        /* reads: rank 1 the argument and the result's gradient, rank 0
         * the result and the argument's gradient */
        uint64_t d0 = reads_here() - mine;
        int64_t d1 = remote_counts() - theirs;
        check(ok && (on ? d0 >= 2 && d1 >= 2 : d0 == 0 && d1 == 0),
              "inplace_dist_backward", "gradient %s; read in place: rank 0 "
              "%llu, rank 1 %lld (%s)", ok ? "right" : "wrong",
              (unsigned long long)d0, (long long)d1, td_last_error());
        td_tensor_release(g);
        td_tensor_release(loss);
        td_rpc_list_free(r);
        td_rpc_list_free(a);
        td_dist_autograd_end(ctx);
        td_tensor_release(x);
    }
}

static void
mode_kill(void)
{
    td_future_t *f1 = NULL, *f2 = NULL;
    td_rpc_list_t *a;
    td_tensor_t *t = pattern(4194304, 7);
    td_status_t st;
    double t0, dt;

    td_rpc_async(1, "stall_die", NULL, 0, &f1);
    td_rpc_list_create(&a);
    td_rpc_list_add_tensor(a, t);
    t0 = now_s();
    st = td_rpc_async(1, "echo", a, 60, &f2);
    if (st == TD_OK) {
        st = td_future_wait(f2, 20);
    }
    dt = now_s() - t0;
    /* it dies 0.3 s after the stall began: 2 s after that at most */
    check(st == TD_ERR_PEER && strstr(td_last_error(), "rank 1") != NULL &&
          dt < 2.3, "inplace_peer_killed", "%d '%s' after %.2f s", st,
          td_last_error(), dt);
    /* O3: the offer's send completed too (nothing left to flush) */
    st = td__transport_flush(td__runtime_transport(), 5);
    check(st == TD_OK, "inplace_offer_completed", "flush: %d '%s'", st,
          td_last_error());
    td_future_wait(f1, 5);
    td_future_release(f1);
    td_future_release(f2);
    td_rpc_list_free(a);
    td_tensor_release(t);
    fflush(stdout);
    _exit(n_fail ? 1 : 0);     /* the job is broken: no graceful join */
}

int
main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "basic";
    const char *e = getenv("INPLACE_EXPECT");
    td_status_t st;

    setvbuf(stdout, NULL, _IOLBF, 0);
    on = e == NULL || strcmp(e, "off") != 0;
    if (strcmp(mode, "kill") == 0) {
        /* todist-run stops the group when rank 1 dies: finish the checks */
        signal(SIGTERM, SIG_IGN);
    }
    td_rpc_register("echo", fn_echo, NULL);
    td_rpc_register("counts", fn_counts, NULL);
    td_rpc_register("seq_check", fn_seq_check, NULL);
    td_rpc_register("make_big", fn_make_big, NULL);
    td_rpc_register("twice", fn_twice, NULL);
    td_rpc_register_flags("seq", fn_seq, NULL, TD_RPC_INLINE);
    td_rpc_register_flags("stall_die", fn_stall_die, NULL, TD_RPC_INLINE);
    st = td_init(NULL);
    if (st != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 1;
    }
    if (td_world()->rank == 0) {
        if (strcmp(mode, "kill") == 0) {
            mode_kill();
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
