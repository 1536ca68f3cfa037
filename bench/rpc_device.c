/* rpc_device: RPC echo of device tensors next to the same echo of cpu
 * tensors, in one invocation:
 *   todist-run -n 2 bench/rpc_device [MiB]     (default 64; 8 B always)
 * With the test device backend (kernels/device.h D4: "device memory" is
 * host memory, copies are memcpy) on a machine without a GPU, so the
 * figures show what the device path costs on top of the cpu path
 * (mapping, staging chunks and acknowledgements, the extra copies), not
 * GPU speed. Rank 0 maps cuda:0 -> cuda:1 for worker1; the reply comes
 * back by the reverse map. Per size and route, one line:
 *   rpc_device route=cpu|staged|direct bytes=N median_us=.. min_us=..
 *   bw_MiBps=.. (vs cpu x..)
 * bw counts both directions (2N / round trip). Every echo is checked. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todist/todist.h"
#include "kernels/device.h"
#include "runtime/rpc/rpc_device.h"
#include "bench/bench.h"

#define CUDA(i) ((td_device_t){TD_DEVICE_CUDA, (i)})

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
    *min_p = v[0];
    med = *ok_p ? bench_median(v, reps) : 0;
    *min_p = *ok_p ? v[0] : 0;
    free(v);
    return med;
}

int
main(int argc, char **argv)
{
    td_init_params_t p = td_init_params_default();
    td_device_maps_t maps;
    int rank, mib = argc > 1 ? atoi(argv[1]) : 64, rc = 0;
    size_t sizes[2] = {8, (size_t)mib << 20};

    rank = atoi(getenv("TODIST_RANK") ? getenv("TODIST_RANK") : "0");
    if (td__device_test_backend_install(2) != TD_OK) {
        return 1;
    }
    memset(&maps, 0, sizeof(maps));
    if (rank == 0) {
        td_device_maps_add(&maps, 1, CUDA(0), CUDA(1));
        p.device_maps = &maps;
    }
    td_rpc_register("echo", fn_echo, NULL);
    td_rpc_register("route", fn_route, NULL);
    if (td_init(&p) != TD_OK) {
        fprintf(stderr, "rpc_device: td_init: %s\n", td_last_error());
        return 1;
    }
    for (int k = 0; rank == 0 && k < 2; k++) {
        int64_t n = (int64_t)(sizes[k] / 4);
        int reps = sizes[k] < 4096 ? 2001 : 9;
        double cpu_med = 0;
        const char *names[3] = {"cpu", "staged", "direct"};

        for (int r = 0; r < 3; r++) {
            td_tensor_t *h = NULL, *t = NULL;
            td_rpc_list_t *a = NULL;
            double med, mn;
            int ok;

            td_tensor_zeros(&n, 1, TD_FLOAT32, &h);
            for (int64_t i = 0; i < n; i++) {
                ((float *)td_tensor_data(h))[i] = (float)(i % 1000);
            }
            if (r == 0) {
                t = td_tensor_retain(h);
            } else {
                int route = r == 1 ? TD_ROUTE_STAGED : TD_ROUTE_DIRECT;

                td_tensor_to(h, CUDA(0), &t);
                td__rpc_device_force_route(route);
                td_rpc_list_create(&a);
                td_rpc_list_add_int(a, route);
                td_rpc_sync(1, "route", a, 60, NULL);
                td_rpc_list_free(a);
            }
            med = echo(t, reps, &mn, &ok);
            if (r == 0) {
                cpu_med = med;
            }
            printf("rpc_device route=%s bytes=%zu median_us=%.1f "
                   "min_us=%.1f bw_MiBps=%.0f (vs cpu x%.2f)%s\n", names[r],
                   sizes[k], med * 1e6, mn * 1e6,
                   med > 0 ? 2.0 * (double)sizes[k] / med / 1048576.0 : 0,
                   med > 0 ? cpu_med / med : 0, ok ? "" : " FAILED");
            rc |= !ok;
            td_tensor_release(t);
            td_tensor_release(h);
        }
    }
    td_finalize();
    return rc;
}
