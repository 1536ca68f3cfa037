/* rpc_bandwidth: td_rpc_sync echo of a float32 tensor (send N bytes, get
 * N bytes back), run with
 *   todist-run -n 2 bench/rpc_bandwidth [MiB...]   (default 64)
 * (bench/rpc.sh runs it next to bench/rpc_torch.py and ucx_perftest).
 * One line per size:
 *   rpc_echo size=67108864 median_ms=.. min_ms=.. max_ms=.. bw_MiBps=..
 * bw counts both directions (2N / round trip), like ucx_perftest's
 * bandwidth of an echo. The returned tensor is checked. Then the floor
 * the echo is judged against, measured in the same process:
 *   memcpy_floor size=.. median_ms=..   (two memcpys of N bytes into warm
 *       buffers: the least any echo must move through memory) */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "todist/todist.h"

#define REPS 15

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int
cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static td_status_t
fn_echo(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
        td_rpc_list_t *result)
{
    td_tensor_t *t;
    td_status_t st;

    (void)arg; (void)info;
    st = td_rpc_list_tensor(args, 0, &t);
    return st == TD_OK ? td_rpc_list_add_tensor(result, t) : st;
}

int
main(int argc, char **argv)
{
    td_status_t st;

    td_rpc_register("echo", fn_echo, NULL);
    st = td_init(NULL);
    if (st != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 1;
    }
    if (td_world()->world_size < 2) {
        fprintf(stderr, "rpc_bandwidth: run with todist-run -n 2\n");
        td_finalize();
        return 1;
    }
    for (int a = 1; td_world()->rank == 0 && a <= (argc > 1 ? argc - 1 : 1);
         a++) {
        int64_t mib = argc > 1 ? atol(argv[a]) : 64;
        int64_t n = mib * 1048576 / 4;
        td_tensor_t *t, *back;
        td_rpc_list_t *args, *res;
        double rtt[REPS];

        td_tensor_empty(&n, 1, TD_FLOAT32, TD_CPU, &t);
        for (int64_t i = 0; i < n; i++) {
            ((float *)td_tensor_data(t))[i] = (float)(i & 0xffff);
        }
        td_rpc_list_create(&args);
        td_rpc_list_add_tensor(args, t);
        for (int r = -2; r < REPS; r++) {         /* two warm-ups */
            double t0 = now_s();

            st = td_rpc_sync(1, "echo", args, TD_RPC_DEFAULT_TIMEOUT, &res);
            double dt = now_s() - t0;
            if (st != TD_OK || td_rpc_list_tensor(res, 0, &back) != TD_OK ||
                td_tensor_numel(back) != n ||
                ((float *)td_tensor_data(back))[n - 1] !=
                (float)((n - 1) & 0xffff)) {
                fprintf(stderr, "echo failed: %s\n", td_last_error());
                return 1;
            }
            td_rpc_list_free(res);
            if (r >= 0) {
                rtt[r] = dt;
            }
        }
        qsort(rtt, REPS, sizeof(double), cmp_d);
        printf("rpc_echo size=%lld median_ms=%.2f min_ms=%.2f max_ms=%.2f "
               "bw_MiBps=%.0f\n", (long long)(n * 4), rtt[REPS / 2] * 1e3,
               rtt[0] * 1e3, rtt[REPS - 1] * 1e3,
               2.0 * (double)(n * 4) / rtt[REPS / 2] / 1048576.0);
        fflush(stdout);

        /* The floor: the argument copied once into the callee's buffer,
         * the result once into the caller's (warm, reused buffers). */
        {
            size_t nb = (size_t)n * 4;
            char *ca = malloc(nb), *cb = malloc(nb);
            double cp[REPS];

            if (ca == NULL || cb == NULL) {
                fprintf(stderr, "memcpy floor: out of memory\n");
                return 1;
            }
            memcpy(ca, td_tensor_data(t), nb);
            memcpy(cb, ca, nb);
            for (int r = 0; r < REPS; r++) {
                double t0 = now_s();

                memcpy(cb, td_tensor_data(t), nb);
                memcpy(ca, cb, nb);
                cp[r] = now_s() - t0;
            }
            qsort(cp, REPS, sizeof(double), cmp_d);
            printf("memcpy_floor size=%zu median_ms=%.2f min_ms=%.2f "
                   "max_ms=%.2f\n", nb, cp[REPS / 2] * 1e3, cp[0] * 1e3,
                   cp[REPS - 1] * 1e3);
            fflush(stdout);
            free(ca);
            free(cb);
        }
        td_rpc_list_free(args);
        td_tensor_release(t);
    }
    st = td_finalize();
    if (st != TD_OK) {
        fprintf(stderr, "td_finalize: %s\n", td_last_error());
        return 1;
    }
    return 0;
}
