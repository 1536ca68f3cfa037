/* rpc_device_peer: one rank of tests/rpc/test_rpc_device.sh (todist-run -n 2).
 * RPC of device tensors between two processes over real UCX, with the
 * test device backend (kernels/device.h D4: 2 "cuda" devices per process
 * whose memory is host memory). Rank 0 maps cuda:0 -> cuda:1 for worker1
 * (td_init_params_t.device_maps); rank 1 has no map of its own. Prints
 * "rank R: ok ..." per check passed, "rank R: FAIL ..." otherwise; exits
 * 0 when every check passed.
 *
 *   echo ROUTE       ROUTE = direct | staged: tensors on cuda:0 (sizes 0,
 *                    16 and 1 Mi floats, one transposed) land on cuda:1
 *                    of rank 1 with their content; the reply (x * 2, on
 *                    cuda:1 there) lands on cuda:0 of rank 0 (reverse
 *                    map); a cpu tensor stays cpu
 *   unmapped         a tensor on cuda:1 (no entry) fails before sending,
 *                    naming the device and the peer; a reply from a
 *                    device with no way back fails naming the device
 *   autograd ROUTE   dist autograd: y = x * x on rank 1 (x sent from
 *                    cuda:0), loss = sum(y) on rank 0; the gradient 2x
 *                    lands in the context on cuda:0
 *   kill_receiver    rank 1 dies when the first staged chunk of a 64 MiB
 *                    tensor lands: rank 0's call fails with TD_ERR_PEER
 *   kill_sender      rank 0 dies after a few chunks of a 64 MiB tensor:
 *                    rank 1's half-received body is freed (no test-device
 *                    block left), no handler ran */
#include "config.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "todist/todist.h"
#include "kernels/device.h"
#include "runtime/runtime.h"
#include "runtime/rpc/rpc_device.h"

#define CUDA(i) ((td_device_t){TD_DEVICE_CUDA, (i)})

static int rank, failures;
static volatile int handler_ran;

#define CHECK(c_, ...) do {                                            \
    if (!(c_)) {                                                       \
        printf("rank %d: FAIL ", rank); printf(__VA_ARGS__);           \
        printf("\n"); failures++;                                      \
    } else {                                                           \
        printf("rank %d: ok ", rank); printf(__VA_ARGS__);             \
        printf("\n");                                                  \
    }                                                                  \
} while (0)

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int
on(const td_tensor_t *t, td_device_t d)
{
    td_device_t x = td_tensor_device(t);

    return x.type == d.type && (d.type == TD_DEVICE_CPU || x.index == d.index);
}

/* A float tensor of SHAPE on DEVICE holding i * 0.5 + BIAS at i. */
static td_tensor_t *
make(const int64_t *shape, int ndim, td_device_t device, double bias)
{
    td_tensor_t *c = NULL, *t = NULL;
    int64_t n = 1;
    float *v;

    for (int d = 0; d < ndim; d++) {
        n *= shape[d];
    }
    v = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        v[i] = (float)(i * 0.5 + bias);
    }
    if (td_tensor_from_data(v, shape, ndim, TD_FLOAT32, &c) == TD_OK) {
        td_tensor_to(c, device, &t);
    }
    td_tensor_release(c);
    free(v);
    return t;
}

/* Max |T - (EXPECT_i * SCALE)| for T read back on the cpu, EXPECT given as
 * a cpu tensor of the same shape. */
static double
maxdiff(td_tensor_t *t, td_tensor_t *expect, double scale)
{
    td_tensor_t *a = NULL, *b = NULL;
    double m = INFINITY;

    if (td_tensor_to(t, TD_CPU, &a) == TD_OK &&
        td_tensor_contiguous(a, &b) == TD_OK &&
        td_tensor_numel(b) == td_tensor_numel(expect)) {
        const float *x = td_tensor_data(b);
        const float *y = td_tensor_data(expect);

        m = 0;
        for (int64_t i = 0; i < td_tensor_numel(b); i++) {
            m = fmax(m, fabs(x[i] - y[i] * scale));
        }
    }
    td_tensor_release(a);
    td_tensor_release(b);
    return m;
}

/* ---- handlers (rank 1) ------------------------------------------------- */

/* Returns every tensor argument times 2 (on its own device) and the index
 * of the device each argument arrived on (-1: cpu). */
static td_status_t
echo2(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
      td_rpc_list_t *result)
{
    (void)arg;
    (void)info;
    handler_ran = 1;
    for (size_t i = 0; i < td_rpc_list_len(args); i++) {
        td_tensor_t *t = NULL, *y = NULL;
        td_device_t d;
        td_status_t s = td_rpc_list_tensor(args, i, &t);

        if (s != TD_OK) {
            return s;
        }
        d = td_tensor_device(t);
        if ((s = td_mul_scalar(t, 2.0, &y)) != TD_OK) {
            return s;
        }
        s = td_rpc_list_add_tensor(result, y);
        td_tensor_release(y);
        if (s == TD_OK) {
            s = td_rpc_list_add_int(result, d.type == TD_DEVICE_CPU ? -1
                                                                   : d.index);
        }
        if (s != TD_OK) {
            return s;
        }
    }
    return TD_OK;
}

/* Returns a tensor on cuda:0 of rank 1: the map rank 0 attached has no way
 * back from there (its reverse map holds cuda:1 -> cuda:0 only). */
static td_status_t
wrong_way(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
          td_rpc_list_t *result)
{
    int64_t shape[1] = {4};
    td_tensor_t *t = make(shape, 1, CUDA(0), 0);
    td_status_t s;

    (void)arg;
    (void)info;
    (void)args;
    if (t == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "no tensor");
    }
    s = td_rpc_list_add_tensor(result, t);
    td_tensor_release(t);
    return s;
}

/* y = x * x (x arrives on cuda:1 with requires_grad, in the caller's
 * distributed autograd context). */
static td_status_t
square(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
       td_rpc_list_t *result)
{
    td_tensor_t *x = NULL, *y = NULL;
    td_status_t s;

    (void)arg;
    (void)info;
    if ((s = td_rpc_list_tensor(args, 0, &x)) != TD_OK) {
        return s;
    }
    if (!on(x, CUDA(1))) {
        return td_error(TD_ERR_INVALID, "square: x is not on cuda:1");
    }
    if ((s = td_mul(x, x, &y)) != TD_OK) {
        return s;
    }
    s = td_rpc_list_add_tensor(result, y);
    td_tensor_release(y);
    return s;
}

/* ---- scenarios (rank 0 drives) ---------------------------------------- */

static void
echo(const char *route)
{
    int64_t s0[1] = {0}, s16[1] = {16}, sbig[1] = {1 << 20}, s2[2] = {3, 5};
    td_tensor_t *ts[5], *tr = NULL, *expect[5];
    td_rpc_list_t *args = NULL, *res = NULL;
    td_staging_stats_t st = {0};
    size_t landed = 0;
    long allocs0 = td__device_test_allocs(0);
    td_status_t s;
    double t0;

    ts[0] = make(s0, 1, CUDA(0), 0);
    ts[1] = make(s16, 1, CUDA(0), 1);
    ts[2] = make(sbig, 1, CUDA(0), 2);
    tr = make(s2, 2, CUDA(0), 3);
    td_tensor_transpose(tr, 0, 1, &ts[3]);       /* not contiguous */
    ts[4] = make(s16, 1, TD_CPU, 4);
    for (int i = 0; i < 5; i++) {
        td_tensor_t *c = NULL;

        td_tensor_to(ts[i], TD_CPU, &c);
        td_tensor_contiguous(c, &expect[i]);
        td_tensor_release(c);
    }
    td_rpc_list_create(&args);
    for (int i = 0; i < 5; i++) {
        td_rpc_list_add_tensor(args, ts[i]);
    }
    t0 = now_s();
    s = td_rpc_sync(1, "echo2", args, 120, &res);
    CHECK(s == TD_OK, "%s: echo2 of 5 tensors (0 B, 64 B, 4 MiB, a "
          "transposed 3x5, a cpu one) returned (%s) in %.2f s", route,
          s == TD_OK ? "TD_OK" : td_last_error(), now_s() - t0);
    if (s == TD_OK) {
        for (int i = 0; i < 5; i++) {
            td_tensor_t *y = NULL;
            int64_t where = -2;
            double d;

            td_rpc_list_tensor(res, (size_t)(2 * i), &y);
            td_rpc_list_int(res, (size_t)(2 * i + 1), &where);
            CHECK(where == (i == 4 ? -1 : 1), "%s: tensor %d landed on %s "
                  "at rank 1 (reported %lld)", route, i,
                  i == 4 ? "the cpu" : "cuda:1", (long long)where);
            d = y != NULL ? maxdiff(y, expect[i], 2.0) : INFINITY;
            CHECK(y != NULL && on(y, i == 4 ? TD_CPU : CUDA(0)) &&
                  td_tensor_numel(y) == td_tensor_numel(expect[i]) &&
                  d == 0, "%s: reply %d is x * 2 on %s (max diff %g)",
                  route, i, i == 4 ? "the cpu" : "cuda:0 (reverse map)", d);
        }
    }
    CHECK(td__device_test_allocs(0) > allocs0, "%s: replies were allocated "
          "on test device 0", route);
    s = td__rpc_device_stats(&st, &landed);
    if (strcmp(route, "staged") == 0) {
        CHECK(s == TD_OK && st.chunks_sent >= 16 && st.chunks_received >= 16
              && landed == 0, "%s: bodies went through the staging engine "
              "in chunks (%llu sent, %llu received, %zu left waiting)", route,
              (unsigned long long)st.chunks_sent,
              (unsigned long long)st.chunks_received, landed);
        /* S8: the reply's 4 MiB came back in 64 chunks of 64 KiB, each
         * read once from rank 1's staging buffer (no other body here is
         * a host body of 64 KiB or more) */
        uint64_t read = 0, refused = 0;
        td__transport_inplace_counts(td__runtime_transport(), &read,
                                     &refused);
        CHECK(read == 64 && refused == 0 && st.h2d_ns > 0 && st.recv_ns > 0,
              "%s: the reply's chunks were read in place (%llu reads, %llu "
              "refused; want 64, 0), h2d %llu ns", route,
              (unsigned long long)read, (unsigned long long)refused,
              (unsigned long long)st.h2d_ns);
    } else {
        CHECK(s == TD_OK && st.chunks_sent == 0 && st.chunks_received == 0,
              "%s: no body went through the staging engine (%llu chunks)",
              route, (unsigned long long)st.chunks_sent);
    }
    td_rpc_list_free(args);
    td_rpc_list_free(res);
    for (int i = 0; i < 5; i++) {
        td_tensor_release(ts[i]);
        td_tensor_release(expect[i]);
    }
    td_tensor_release(tr);
}

static void
unmapped(void)
{
    int64_t shape[1] = {4};
    td_tensor_t *t = make(shape, 1, CUDA(1), 0);
    td_rpc_list_t *args = NULL;
    td_status_t s;

    td_rpc_list_create(&args);
    td_rpc_list_add_tensor(args, t);
    s = td_rpc_sync(1, "echo2", args, 60, NULL);
    CHECK(s == TD_ERR_NOT_FOUND &&
          strstr(td_last_error(), "a tensor on cuda:1 cannot go to worker1")
          != NULL && strstr(td_last_error(), "no entry for cuda:1") != NULL,
          "a tensor on unmapped cuda:1 is refused naming device and peer "
          "(%s)", td_last_error());
    CHECK(!handler_ran, "nothing reached rank 1");
    s = td_rpc_sync(1, "wrong_way", NULL, 60, NULL);
    CHECK(s == TD_ERR_REMOTE && strstr(td_last_error(), "a tensor on cuda:0 "
          "cannot go to worker0") != NULL,
          "a reply from cuda:0 with no way back fails naming it (%s)",
          td_last_error());
    td_rpc_list_free(args);
    td_tensor_release(t);
}

static void
autograd(const char *route)
{
    int64_t shape[1] = {1000};
    td_tensor_t *x = make(shape, 1, CUDA(0), -100), *expect = NULL;
    td_tensor_t *y = NULL, *loss = NULL, *g = NULL, *c = NULL;
    td_rpc_list_t *args = NULL, *res = NULL;
    td_status_t s = TD_ERR_STATE;

    td_tensor_set_requires_grad(x, 1);
    td_tensor_to(x, TD_CPU, &c);
    td_tensor_contiguous(c, &expect);
    TD_DIST_AUTOGRAD_CONTEXT(ctx) {
        td_rpc_list_create(&args);
        td_rpc_list_add_tensor(args, x);
        s = td_rpc_sync(1, "square", args, 60, &res);
        if (s == TD_OK) {
            td_rpc_list_tensor(res, 0, &y);
            CHECK(y != NULL && on(y, CUDA(0)),
                  "%s: y = x * x came back on cuda:0", route);
            s = td_sum(y, &loss);
        }
        if (s == TD_OK) {
            s = td_dist_backward(ctx, &loss, 1, 0);
        }
        CHECK(s == TD_OK, "%s: distributed backward through rank 1 (%s)",
              route, s == TD_OK ? "TD_OK" : td_last_error());
        if (s == TD_OK) {
            s = td_dist_get_gradient(ctx, x, &g);
        }
        CHECK(s == TD_OK && g != NULL && on(g, CUDA(0)) &&
              maxdiff(g, expect, 2.0) == 0,
              "%s: the gradient 2x landed on cuda:0, x's device "
              "(max diff %g)", route, g != NULL ? maxdiff(g, expect, 2.0)
                                                : INFINITY);
    }
    td_tensor_release(g);
    td_tensor_release(loss);
    td_rpc_list_free(args);
    td_rpc_list_free(res);
    td_tensor_release(x);
    td_tensor_release(c);
    td_tensor_release(expect);
}

static td_tensor_t *
big(td_device_t d)
{
    int64_t shape[1] = {16 << 20};      /* 64 MiB of floats */

    return make(shape, 1, d, 0);
}

int
main(int argc, char **argv)
{
    td_init_params_t p = td_init_params_default();
    td_device_maps_t maps;
    const char *mode = argc > 1 ? argv[1] : "echo";
    const char *route = argc > 2 ? argv[2] : "staged";
    long live0;
    td_status_t s;

    setvbuf(stdout, NULL, _IOLBF, 0);
    rank = atoi(getenv("TODIST_RANK") ? getenv("TODIST_RANK") : "0");
    if (td__device_test_backend_install(2) != TD_OK) {
        printf("rank %d: FAIL test backend: %s\n", rank, td_last_error());
        return 1;
    }
    memset(&maps, 0, sizeof(maps));
    if (rank == 0) {
        td_device_maps_add(&maps, 1, CUDA(0), CUDA(1));
        p.device_maps = &maps;
    }
    td_rpc_register("echo2", echo2, NULL);
    td_rpc_register("wrong_way", wrong_way, NULL);
    td_rpc_register("square", square, NULL);
    s = td_init(&p);
    if (s != TD_OK) {
        printf("rank %d: FAIL td_init: %s\n", rank, td_last_error());
        return 1;
    }
    td__rpc_device_force_route(strcmp(route, "direct") == 0 ? TD_ROUTE_DIRECT
                                                           : TD_ROUTE_STAGED);
    live0 = td__device_test_live(1);
    if (strncmp(mode, "kill", 4) == 0) {
        signal(SIGTERM, SIG_IGN);  /* finish the checks after a peer died */
    }
    if (strcmp(mode, "kill_receiver") == 0) {
        if (rank == 1) {
            long a0 = td__device_test_allocs(1);
            double t0 = now_s();

            /* the staged body's buffer is the next block of device 1 */
            while (td__device_test_allocs(1) == a0 && now_s() - t0 < 60) {
                usleep(200);
            }
            raise(SIGKILL);
        } else {
            td_tensor_t *t = big(CUDA(0));
            td_rpc_list_t *args = NULL;

            td_rpc_list_create(&args);
            td_rpc_list_add_tensor(args, t);
            s = td_rpc_sync(1, "echo2", args, 60, NULL);
            CHECK(s == TD_ERR_PEER, "the call whose 64 MiB body was being "
                  "staged to the killed rank failed with TD_ERR_PEER (%s: "
                  "%s)", td_status_name(s), td_last_error());
            td_rpc_list_free(args);
            td_tensor_release(t);
        }
    } else if (strcmp(mode, "kill_sender") == 0) {
        if (rank == 0) {
            td_tensor_t *t = big(CUDA(0));
            td_rpc_list_t *args = NULL;
            td_future_t *f = NULL;
            td_staging_stats_t st = {0};
            size_t landed;
            double t0 = now_s();

            td_rpc_list_create(&args);
            td_rpc_list_add_tensor(args, t);
            td_rpc_async(1, "echo2", args, 60, &f);
            while (now_s() - t0 < 60 &&
                   td__rpc_device_stats(&st, &landed) == TD_OK &&
                   st.chunks_sent < 4) {
                usleep(200);
            }
            raise(SIGKILL);
        } else {
            double t0 = now_s();
            long a0 = td__device_test_allocs(1);

            while (td__device_test_allocs(1) == a0 && now_s() - t0 < 60) {
                usleep(1000);
            }
            CHECK(td__device_test_allocs(1) > a0, "a staged body started "
                  "landing on test device 1");
            while (td__device_test_live(1) != live0 && now_s() - t0 < 60) {
                usleep(1000);
            }
            CHECK(td__device_test_live(1) == live0, "the half-received body "
                  "was freed when its sender died (%ld blocks live, %ld "
                  "before)", td__device_test_live(1), live0);
            CHECK(!handler_ran, "no handler ran for the unfinished call");
        }
    } else if (rank == 0) {
        if (strcmp(mode, "echo") == 0) {
            echo(route);
        } else if (strcmp(mode, "unmapped") == 0) {
            unmapped();
        } else if (strcmp(mode, "autograd") == 0) {
            autograd(route);
        } else {
            printf("rank 0: FAIL unknown mode %s\n", mode);
            failures++;
        }
    }
    s = td_finalize();
    if (s != TD_OK && strncmp(mode, "kill", 4) != 0) {
        printf("rank %d: FAIL td_finalize: %s\n", rank, td_last_error());
        failures++;
    }
    if (rank == 1 && strcmp(mode, "echo") == 0) {
        CHECK(td__device_test_live(1) == live0, "every test-device block of "
              "rank 1 was given back (%ld live)", td__device_test_live(1));
    }
    return failures ? 1 : 0;
}
