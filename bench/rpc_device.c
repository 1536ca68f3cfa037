/* rpc_device: RPC echo of device tensors next to the same echo of cpu
 * tensors, where one staged echo's time goes, and the copy floors, in one
 * invocation:
 *   todist-run -n 2 bench/rpc_device [MiB [auto|test]]   (default 64 auto)
 * Backend: with an NVIDIA driver on the node (auto) the real CUDA module
 * (two ranks may share one GPU: TODIST_SHARE_GPUS=1 is set unless given);
 * without one, or with "test", the test device backend (kernels/device.h
 * D4: "device memory" is host memory, copies are memcpy, and every
 * receive allocates fresh malloc'ed memory), so there the figures show
 * what the device path costs on top of the cpu path on the host, not GPU
 * speed. Every line names the backend. Rank 0 maps cuda:0 -> cuda:0
 * for worker1 (each rank's own first GPU; cuda:0 -> cuda:1 on the test
 * backend); the reply comes back by the reverse map. Lines:
 *   rpc_device backend=B route=cpu|staged|direct bytes=N median_us=..
 *     min_us=.. bw_MiBps=.. (vs cpu x..)     bw counts both directions
 *   rpc_device backend=B stages bytes=N: the median of 5 staged echoes,
 *     per stage
 *     (ms summed over chunks; stages overlap): request (rank 0 -> 1):
 *     d2h on rank 0, wire (posted -> completed, in-place reads included),
 *     dest (rank 1's allocation), h2d on rank 1, transfer (rank 0's
 *     send start -> every chunk acknowledged); reply (rank 1 -> 0) the
 *     same; chunks read in place (one copy within the host); rest = echo
 *     - both transfers (messages, handler, tensor set-up)
 *   rpc_device backend=B floor bytes=N: one device->host and one
 *     host->device copy of N bytes through pinned and pageable memory,
 *     and a host memcpy (median of 5); for bytes=8, in microseconds,
 *     pinned with a stream sync against td__device_memcpy (the CUDA
 *     row's bounce ring, cuda_device.h G4; its copy to the device is left
 *     in flight)
 *   rpc_device backend=B route=R bytes=N rank 0's device work per echo:
 *     host<->device copies, those through the bounce ring, and stream
 *     syncs on rank 0 (td__device_copy_counts), per echo
 * The direct route runs only where UCX moves the device's memory (it
 * does for the test backend's host memory; Debian's UCX has no CUDA).
 * Every echo is checked. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "todist/todist.h"
#include "kernels/device.h"
#include "runtime/runtime.h"
#include "runtime/rpc/rpc_device.h"
#include "bench/bench.h"

#define CUDA(i) ((td_device_t){TD_DEVICE_CUDA, (i)})
#define N_STATS 8

static td_status_t
fn_echo(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
        td_rpc_list_t *result)
{
    td_tensor_t *t = NULL;
    td_status_t s = td_rpc_list_tensor(args, 0, &t);

    (void)arg;
    (void)info;
    return s == TD_OK ? td_rpc_list_add_tensor(result, t) : s;
}

static td_status_t
fn_route(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
         td_rpc_list_t *result)
{
    int64_t r = -1;

    (void)arg;
    (void)info;
    (void)result;
    td_rpc_list_int(args, 0, &r);
    td__rpc_device_force_route((int)r);
    return TD_OK;
}

/* This rank's staging counters and in-place reads, as N_STATS numbers:
 * d2h, wire, dest, h2d, send, recv (ns), in-place reads, chunks received. */
static void
my_stats(int64_t v[N_STATS])
{
    td_staging_stats_t st;
    size_t landed;
    uint64_t read = 0, refused = 0;

    memset(v, 0, N_STATS * sizeof(*v));
    if (td__rpc_device_stats(&st, &landed) != TD_OK) {
        return;
    }
    td__transport_inplace_counts(td__runtime_transport(), &read, &refused);
    v[0] = (int64_t)st.d2h_ns;
    v[1] = (int64_t)st.wire_ns;
    v[2] = (int64_t)st.dest_ns;
    v[3] = (int64_t)st.h2d_ns;
    v[4] = (int64_t)st.send_ns;
    v[5] = (int64_t)st.recv_ns;
    v[6] = (int64_t)read;
    v[7] = (int64_t)st.chunks_received;
}

static td_status_t
fn_stats(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
         td_rpc_list_t *result)
{
    int64_t v[N_STATS];
    td_status_t s = TD_OK;

    (void)arg;
    (void)info;
    (void)args;
    my_stats(v);
    for (int i = 0; i < N_STATS && s == TD_OK; i++) {
        s = td_rpc_list_add_int(result, v[i]);
    }
    return s;
}

static void
peer_stats(int64_t v[N_STATS])
{
    td_rpc_list_t *res = NULL;

    memset(v, 0, N_STATS * sizeof(*v));
    if (td_rpc_sync(1, "stats", NULL, 60, &res) == TD_OK) {
        for (int i = 0; i < N_STATS; i++) {
            td_rpc_list_int(res, (size_t)i, &v[i]);
        }
    }
    td_rpc_list_free(res);
}

/* Median round trip (s) of echoing T REPS times; checks the last echo. */
static double
echo(td_tensor_t *t, int reps, double *min_p, int *ok_p)
{
    double *v = malloc((size_t)reps * sizeof(double)), med;
    td_rpc_list_t *args = NULL, *res = NULL;

    td_rpc_list_create(&args);
    td_rpc_list_add_tensor(args, t);
    *ok_p = 1;
    for (int i = -2; i < reps; i++) {          /* 2 warm-up rounds */
        double t0 = bench_now_s();
        td_status_t s = td_rpc_sync(1, "echo", args, 120, &res);

        if (i >= 0) {
            v[i] = bench_now_s() - t0;
        }
        if (s != TD_OK) {
            fprintf(stderr, "rpc_device: echo: %s\n", td_last_error());
            *ok_p = 0;
            break;
        }
        if (i == reps - 1) {
            td_tensor_t *y = NULL, *a = NULL, *b = NULL;

            td_rpc_list_tensor(res, 0, &y);
            td_tensor_to(y, TD_CPU, &a);
            td_tensor_to(t, TD_CPU, &b);
            *ok_p = a != NULL && b != NULL &&
                    td_tensor_device(y).type == td_tensor_device(t).type &&
                    memcmp(td_tensor_data(a), td_tensor_data(b),
                           td_tensor_nbytes(a)) == 0;
            td_tensor_release(a);
            td_tensor_release(b);
        }
        td_rpc_list_free(res);
        res = NULL;
    }
    td_rpc_list_free(args);
    med = *ok_p ? bench_median(v, reps) : 0;
    *min_p = *ok_p ? v[0] : 0;
    free(v);
    return med;
}

static void
set_route(int route)
{
    td_rpc_list_t *a = NULL;

    td__rpc_device_force_route(route);
    td_rpc_list_create(&a);
    td_rpc_list_add_int(a, route);
    td_rpc_sync(1, "route", a, 60, NULL);
    td_rpc_list_free(a);
}

/* Staged echoes of T with both ranks' counters around each; the one of
 * median time is printed (a single one may catch a stall). */
#define STAGE_REPS 5
static void
stages(const char *backend, td_tensor_t *t, size_t bytes)
{
    int64_t a0[N_STATS], a1[N_STATS], d0[STAGE_REPS][N_STATS],
            d1[STAGE_REPS][N_STATS];
    double echo_s[STAGE_REPS], sorted[STAGE_REPS];
    td_rpc_list_t *args = NULL, *res = NULL;
    int m = 0;

#define MS(x) ((double)(x) * 1e-6)
    set_route(TD_ROUTE_STAGED);
    td_rpc_list_create(&args);
    td_rpc_list_add_tensor(args, t);
    for (int r = 0; r < STAGE_REPS; r++) {
        double t0;
        td_status_t s;

        my_stats(a0);
        peer_stats(a1);
        t0 = bench_now_s();
        s = td_rpc_sync(1, "echo", args, 120, &res);
        echo_s[r] = bench_now_s() - t0;
        my_stats(d0[r]);
        peer_stats(d1[r]);
        td_rpc_list_free(res);
        res = NULL;
        if (s != TD_OK) {
            printf("rpc_device backend=%s stages bytes=%zu FAILED: %s\n",
                   backend, bytes, td_last_error());
            td_rpc_list_free(args);
            return;
        }
        for (int i = 0; i < N_STATS; i++) {
            d0[r][i] -= a0[i];
            d1[r][i] -= a1[i];
        }
        sorted[r] = echo_s[r];
    }
    td_rpc_list_free(args);
    bench_median(sorted, STAGE_REPS);
    while (echo_s[m] != sorted[STAGE_REPS / 2]) {
        m++;
    }
    printf("rpc_device backend=%s stages bytes=%zu echo_ms=%.2f (median of "
           "%d; %.2f-%.2f) | request d2h %.2f wire %.2f dest %.2f h2d %.2f "
           "transfer %.2f | reply d2h %.2f wire %.2f dest %.2f h2d %.2f "
           "transfer %.2f | chunks %lld+%lld, in place %lld+%lld | rest "
           "%.2f\n", backend, bytes, echo_s[m] * 1e3, STAGE_REPS,
           sorted[0] * 1e3, sorted[STAGE_REPS - 1] * 1e3, MS(d0[m][0]),
           MS(d0[m][1]), MS(d1[m][2]), MS(d1[m][3]), MS(d0[m][4]),
           MS(d1[m][0]), MS(d1[m][1]), MS(d0[m][2]), MS(d0[m][3]),
           MS(d1[m][4]), (long long)d1[m][7], (long long)d0[m][7],
           (long long)d1[m][6], (long long)d0[m][6],
           echo_s[m] * 1e3 - MS(d0[m][4]) - MS(d1[m][4]));
#undef MS
}

/* Median (s) of 5 copies of BYTES by COPY(dst, src). */
typedef td_status_t (*copy_fn)(void *dst, const void *src, size_t n,
                               int to_dev);
static const td_device_ops_t *row;

static td_status_t
pinned_copy(void *dst, const void *src, size_t n, int to_dev)
{
    td_status_t s = row->copy_async(0, dst, src, n);

    (void)to_dev;
    return s == TD_OK ? row->synchronize(0) : s;
}

static td_status_t
pageable_copy(void *dst, const void *src, size_t n, int to_dev)
{
    return to_dev ? td__device_memcpy(dst, CUDA(0), src, TD_CPU, n)
                  : td__device_memcpy(dst, TD_CPU, src, CUDA(0), n);
}

static double
time_copy(copy_fn f, void *dst, const void *src, size_t n, int to_dev)
{
    double v[5];

    for (int i = -1; i < 5; i++) {
        double t0 = bench_now_s();

        if (f(dst, src, n, to_dev) != TD_OK) {
            return -1;
        }
        if (i >= 0) {
            v[i] = bench_now_s() - t0;
        }
    }
    return bench_median(v, 5);
}

static void
floor_line(const char *backend, size_t bytes)
{
    void *dev = NULL, *pinned = NULL, *pageable = malloc(bytes);
    void *other = malloc(bytes);
    double pd, ph, gd, gh, mc;
    double v[5];

    row = td__device_ops(TD_DEVICE_CUDA);
    if (row == NULL || pageable == NULL || other == NULL ||
        td__device_alloc(CUDA(0), bytes, &dev) != TD_OK ||
        row->host_alloc(bytes, &pinned) != TD_OK) {
        printf("rpc_device backend=%s floor bytes=%zu FAILED: %s\n", backend,
               bytes, td_last_error());
        goto out;
    }
    memset(pinned, 1, bytes);
    memset(pageable, 1, bytes);
    memset(other, 2, bytes);
    pd = time_copy(pinned_copy, pinned, dev, bytes, 0);
    ph = time_copy(pinned_copy, dev, pinned, bytes, 1);
    gd = time_copy(pageable_copy, pageable, dev, bytes, 0);
    gh = time_copy(pageable_copy, dev, pageable, bytes, 1);
    for (int i = -1; i < 5; i++) {
        double t0 = bench_now_s();

        memcpy(other, pageable, bytes);
        if (i >= 0) {
            v[i] = bench_now_s() - t0;
        }
    }
    mc = bench_median(v, 5);
    printf("rpc_device backend=%s floor bytes=%zu pinned d2h_ms=%.2f "
           "h2d_ms=%.2f | pageable d2h_ms=%.2f h2d_ms=%.2f | host memcpy "
           "ms=%.2f (check %d)\n", backend, bytes, pd * 1e3, ph * 1e3,
           gd * 1e3, gh * 1e3, mc * 1e3, ((char *)other)[bytes - 1]);
out:
    if (pinned != NULL) {
        row->host_free(pinned);
    }
    if (dev != NULL) {
        td__device_free(CUDA(0), dev);
    }
    free(pageable);
    free(other);
}

/* An 8 B copy each way in microseconds (median of 5): pinned by the
 * staging calls (async copy and stream synchronisation), and by
 * td__device_memcpy from pageable memory (on CUDA the bounce ring,
 * cuda_device.h G4, whose copy to the device is left in flight). */
static void
small_floor_line(const char *backend)
{
    size_t bytes = 8;
    void *dev = NULL, *pinned = NULL;
    double pageable[1] = {1.0};
    double pd, ph, gd, gh;

    row = td__device_ops(TD_DEVICE_CUDA);
    if (row == NULL || td__device_alloc(CUDA(0), bytes, &dev) != TD_OK ||
        row->host_alloc(bytes, &pinned) != TD_OK) {
        printf("rpc_device backend=%s floor bytes=%zu FAILED: %s\n", backend,
               bytes, td_last_error());
        goto out;
    }
    memset(pinned, 1, bytes);
    pd = time_copy(pinned_copy, pinned, dev, bytes, 0);
    ph = time_copy(pinned_copy, dev, pinned, bytes, 1);
    gd = time_copy(pageable_copy, pageable, dev, bytes, 0);
    gh = time_copy(pageable_copy, dev, pageable, bytes, 1);
    printf("rpc_device backend=%s floor bytes=%zu pinned+sync d2h_us=%.1f "
           "h2d_us=%.1f | td__device_memcpy d2h_us=%.1f h2d_us=%.1f\n",
           backend, bytes, pd * 1e6, ph * 1e6, gd * 1e6, gh * 1e6);
out:
    if (pinned != NULL) {
        row->host_free(pinned);
    }
    if (dev != NULL) {
        td__device_free(CUDA(0), dev);
    }
}

int
main(int argc, char **argv)
{
    td_init_params_t p = td_init_params_default();
    td_device_maps_t maps;
    int rank, mib = argc > 1 ? atoi(argv[1]) : 64, rc = 0;
    int test = (argc > 2 && strcmp(argv[2], "test") == 0) ||
               access("/proc/driver/nvidia/version", F_OK) != 0;
    const char *backend = test ? "test" : "cuda";
    size_t sizes[2] = {8, (size_t)mib << 20};
    unsigned mem_types;

    rank = atoi(getenv("TODIST_RANK") ? getenv("TODIST_RANK") : "0");
    if (test) {
        if (td__device_test_backend_install(2) != TD_OK) {
            return 1;
        }
    } else {
        char exe[4096], *slash;
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 16);

        setenv("TODIST_SHARE_GPUS", "1", 0);   /* 2 ranks, maybe 1 GPU */
        setenv("TODIST_DEVICE", "cuda", 0);    /* td_init loads it */
        /* the module beside this build's library (BUILD/bench/rpc_device
         * -> BUILD/.libs), unless TODIST_MODULE_PATH says otherwise */
        if (n > 0) {
            exe[n] = '\0';
            if ((slash = strrchr(exe, '/')) != NULL) {
                *slash = '\0';
                if ((slash = strrchr(exe, '/')) != NULL) {
                    strcpy(slash, "/.libs");
                    setenv("TODIST_MODULE_PATH", exe, 0);
                }
            }
        }
    }
    td_rpc_register("echo", fn_echo, NULL);
    td_rpc_register("route", fn_route, NULL);
    td_rpc_register("stats", fn_stats, NULL);
    memset(&maps, 0, sizeof(maps));
    if (rank == 0) {
        /* CUDA: each rank's own cuda:0 (placement gives it its GPU, or
         * the one they share) */
        td_device_maps_add(&maps, 1, CUDA(0), CUDA(test ? 1 : 0));
        p.device_maps = &maps;
    }
    if (td_init(&p) != TD_OK) {
        fprintf(stderr, "rpc_device: td_init: %s\n", td_last_error());
        return 1;
    }
    mem_types = td__transport_mem_types(td__runtime_transport());
    for (int k = 0; rank == 0 && rc == 0 && k < 2; k++) {
        int64_t n = (int64_t)(sizes[k] / 4);
        int reps = sizes[k] < 4096 ? 2001 : 9;
        double cpu_med = 0;
        const char *names[3] = {"cpu", "staged", "direct"};
        td_tensor_t *h = NULL, *t = NULL;

        td_tensor_zeros(&n, 1, TD_FLOAT32, &h);
        for (int64_t i = 0; i < n; i++) {
            ((float *)td_tensor_data(h))[i] = (float)(i % 1000);
        }
        td_tensor_to(h, CUDA(0), &t);
        for (int r = 0; r < 3; r++) {
            double med, mn;
            int ok;

            if (r == 2 && td__staging_route(mem_types, test ? TD_MEM_HOST
                                                            : TD_MEM_CUDA) !=
                          TD_ROUTE_DIRECT) {
                printf("rpc_device backend=%s route=direct bytes=%zu "
                       "skipped: UCX moves no CUDA memory here\n", backend,
                       sizes[k]);
                continue;
            }
            if (r > 0) {
                set_route(r == 1 ? TD_ROUTE_STAGED : TD_ROUTE_DIRECT);
            }
            td_device_copy_counts_t c0 = {0}, c1 = {0};
            int counted = r > 0 && td__device_copy_counts(CUDA(0), &c0) ==
                                   TD_OK;
            med = echo(r == 0 ? h : t, reps, &mn, &ok);
            counted = counted && td__device_copy_counts(CUDA(0), &c1) ==
                                 TD_OK;
            if (r == 0) {
                cpu_med = med;
            }
            printf("rpc_device backend=%s route=%s bytes=%zu median_us=%.1f "
                   "min_us=%.1f bw_MiBps=%.0f (vs cpu x%.2f)%s\n", backend,
                   names[r], sizes[k], med * 1e6, mn * 1e6,
                   med > 0 ? 2.0 * (double)sizes[k] / med / 1048576.0 : 0,
                   med > 0 ? cpu_med / med : 0, ok ? "" : " FAILED");
            rc |= !ok;
            if (counted) {
                /* the echoes and the check after the last one */
                double e = reps + 2;
                printf("rpc_device backend=%s route=%s bytes=%zu rank 0's "
                       "device work per echo: copies %.2f bounced %.2f "
                       "syncs %.2f\n", backend, names[r], sizes[k],
                       (double)(c1.copies - c0.copies) / e,
                       (double)(c1.bounced - c0.bounced) / e,
                       (double)(c1.syncs - c0.syncs) / e);
            }
        }
        if (k == 0) {
            small_floor_line(backend);
        }
        if (k == 1) {
            stages(backend, t, sizes[k]);
            floor_line(backend, sizes[k]);
        }
        td_tensor_release(t);
        td_tensor_release(h);
    }
    td_finalize();
    return rc;
}
