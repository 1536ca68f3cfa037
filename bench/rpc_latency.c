/* rpc_latency: round trip of a no-op td_rpc_sync with an 8-byte argument,
 * and td_rpc_async throughput with 8 calls in flight, each for a no-op
 * registered TD_RPC_INLINE (run by the receiving thread) and for one run
 * by the handler pool (the default, like torch's). Run with
 *   todist-run -n 2 bench/rpc_latency [CALLS]
 * (bench/rpc.sh runs it next to bench/rpc_torch.py and prints the ratio).
 * Rank 0 calls rank 1. Lines:
 *   rpc_sync_8B median_us=.. min_us=.. max_us=..   (inline; per call, each
 *       sample a batch of BATCH calls; min / max are the spread of the
 *       per-repetition medians)
 *   rpc_async_8inflight calls_per_s=.. min=.. max=..
 *   rpc_sync_8B_pool ..., rpc_async_8inflight_pool ...  (pool handler)
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "todist/todist.h"

#define REPS 7
/* rpc_sync samples are batches of BATCH calls (per call: the batch's time
 * / BATCH), as bench/collectives times its 8 B ping-pong: reading the
 * clock (~25 ns here) would otherwise be a tenth of what is measured, and
 * only on this side of the ratio to p2p. */
#define BATCH 16

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

static double
median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static td_status_t
fn_noop(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
        td_rpc_list_t *result)
{
    (void)arg; (void)info; (void)args; (void)result;
    return TD_OK;
}

/* The two figures for function FN, lines suffixed SUFFIX. */
static int
measure(const char *fn, const char *suffix, long calls)
{
    td_rpc_list_t *args, *res;
    long samples = calls / BATCH > 0 ? calls / BATCH : 1;
    double *lat = malloc(sizeof(double) * (size_t)samples);
    double meds[REPS], rates[REPS];
    td_status_t st;

    td_rpc_list_create(&args);
    td_rpc_list_add_int(args, 42);            /* the 8-byte argument */
    for (long i = 0; i < calls / 4; i++) {    /* warm up */
        td_rpc_sync(1, fn, args, TD_RPC_DEFAULT_TIMEOUT, &res);
        td_rpc_list_free(res);
    }
    for (int r = 0; r < REPS; r++) {
        for (long i = 0; i < samples; i++) {
            double t0 = now_s();

            for (int b = 0; b < BATCH; b++) {
                st = td_rpc_sync(1, fn, args, TD_RPC_DEFAULT_TIMEOUT, &res);
                td_rpc_list_free(res);
                if (st != TD_OK) {
                    fprintf(stderr, "rpc_sync: %s\n", td_last_error());
                    return 1;
                }
            }
            lat[i] = (now_s() - t0) * 1e6 / BATCH;
        }
        meds[r] = median(lat, samples);
    }
    double med = median(meds, REPS);
    printf("rpc_sync_8B%s median_us=%.2f min_us=%.2f max_us=%.2f\n", suffix,
           med, meds[0], meds[REPS - 1]);
    fflush(stdout);

    /* 8 calls in flight: a ring of futures, oldest waited first. */
    long n_async = calls * 5;
    for (int r = 0; r < REPS; r++) {
        td_future_t *ring[8];
        double t0 = now_s();

        for (int k = 0; k < 8; k++) {
            td_rpc_async(1, fn, args, TD_RPC_DEFAULT_TIMEOUT, &ring[k]);
        }
        for (long i = 8; i < n_async + 8; i++) {
            td_future_t **f = &ring[i % 8];

            if (td_future_wait(*f, -1) != TD_OK) {
                fprintf(stderr, "rpc_async: %s\n", td_last_error());
                return 1;
            }
            td_future_release(*f);
            if (i < n_async) {
                td_rpc_async(1, fn, args, TD_RPC_DEFAULT_TIMEOUT, f);
            }
        }
        rates[r] = (double)n_async / (now_s() - t0);
    }
    double rm = median(rates, REPS);
    printf("rpc_async_8inflight%s calls_per_s=%.0f min=%.0f max=%.0f\n",
           suffix, rm, rates[0], rates[REPS - 1]);
    fflush(stdout);
    td_rpc_list_free(args);
    free(lat);
    return 0;
}

int
main(int argc, char **argv)
{
    long calls = argc > 1 ? atol(argv[1]) : 20000;
    int rc = 0;
    td_status_t st;

    td_rpc_register_flags("noop", fn_noop, NULL, TD_RPC_INLINE);
    td_rpc_register("noop_pool", fn_noop, NULL);
    st = td_init(NULL);
    if (st != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 1;
    }
    if (td_world()->world_size < 2) {
        fprintf(stderr, "rpc_latency: run with todist-run -n 2\n");
        td_finalize();
        return 1;
    }
    if (td_world()->rank == 0) {
        rc = measure("noop", "", calls);
        if (rc == 0) {
            rc = measure("noop_pool", "_pool", calls / 4);
        }
    }
    st = td_finalize();
    if (st != TD_OK) {
        fprintf(stderr, "td_finalize: %s\n", td_last_error());
        return 1;
    }
    return rc;
}
