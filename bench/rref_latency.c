/* rref_latency: remote references between two workers, rank 0 calling
 * rank 1's objects (methods are plain pool handlers, as torch runs its):
 *   rref_call        td_rref_rpc_sync of a no-op method on an existing
 *                    object (round trip)
 *   rref_to_here     td_rref_to_here of an existing object (one int)
 *   rref_create_call td_remote of an object, at once a no-op method call
 *                    on it (the call may reach the owner before the
 *                    creation ran there: it is then parked, rref.c's RR1),
 *                    then the release: the whole life of a short-lived
 *                    object, per pair
 * Run with todist-run -n 2 bench/rref_latency [CALLS]; bench/rref.sh runs
 * it next to bench/rref_torch.py (rpc.remote / RRef.rpc_sync / to_here).
 * Lines: NAME median_us=.. min_us=.. max_us=.. (median of REPS repetition
 * medians; min / max: their spread). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "todist/todist.h"
#include "bench/bench.h"

#define REPS 7

static td_status_t
fn_make(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
        td_rpc_list_t *result)
{
    (void)arg; (void)info; (void)args;
    return td_rpc_list_add_int(result, 42);
}

static td_status_t
fn_noop(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
        td_rpc_list_t *result)
{
    (void)arg; (void)info; (void)args; (void)result;
    return TD_OK;
}

enum { CALL, TO_HERE, CREATE_CALL };

/* One operation of KIND on R (CREATE_CALL makes its own object). */
static td_status_t
once(int kind, td_rref_t *r)
{
    td_rpc_list_t *res = NULL;
    td_rref_t *fresh = NULL;
    td_status_t st;

    switch (kind) {
    case CALL:
        st = td_rref_rpc_sync(r, "noop_m", NULL, TD_RPC_DEFAULT_TIMEOUT,
                              &res);
        break;
    case TO_HERE:
        st = td_rref_to_here(r, TD_RPC_DEFAULT_TIMEOUT, &res);
        break;
    default:
        st = td_remote(1, "make", NULL, TD_RPC_DEFAULT_TIMEOUT, &fresh);
        if (st == TD_OK) {
            st = td_rref_rpc_sync(fresh, "noop_m", NULL,
                                  TD_RPC_DEFAULT_TIMEOUT, &res);
        }
        td_rref_release(fresh);
        break;
    }
    td_rpc_list_free(res);
    return st;
}

static int
measure(const char *name, int kind, td_rref_t *r, long calls)
{
    double *lat = malloc(sizeof(double) * (size_t)calls), meds[REPS];

    for (long i = 0; i < calls / 4; i++) {            /* warm up */
        if (once(kind, r) != TD_OK) {
            fprintf(stderr, "%s: %s\n", name, td_last_error());
            free(lat);
            return 1;
        }
    }
    for (int k = 0; k < REPS; k++) {
        for (long i = 0; i < calls; i++) {
            double t0 = bench_now_s();

            if (once(kind, r) != TD_OK) {
                fprintf(stderr, "%s: %s\n", name, td_last_error());
                free(lat);
                return 1;
            }
            lat[i] = (bench_now_s() - t0) * 1e6;
        }
        meds[k] = bench_median(lat, (int)calls);
    }
    double med = bench_median(meds, REPS);
    printf("%s median_us=%.2f min_us=%.2f max_us=%.2f\n", name, med, meds[0],
           meds[REPS - 1]);
    fflush(stdout);
    free(lat);
    return 0;
}

int
main(int argc, char **argv)
{
    long calls = argc > 1 ? atol(argv[1]) : 5000;
    td_rref_t *r = NULL;
    int rc = 0;
    td_status_t st;

    td_rpc_register("make", fn_make, NULL);
    td_rpc_register("noop_m", fn_noop, NULL);
    st = td_init(NULL);
    if (st != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 1;
    }
    if (td_world()->world_size < 2) {
        fprintf(stderr, "rref_latency: run with todist-run -n 2\n");
        td_finalize();
        return 1;
    }
    if (td_world()->rank == 0) {
        st = td_remote(1, "make", NULL, TD_RPC_DEFAULT_TIMEOUT, &r);
        rc = st != TD_OK;
        if (rc == 0) {
            rc = measure("rref_call", CALL, r, calls);
        }
        if (rc == 0) {
            rc = measure("rref_to_here", TO_HERE, r, calls);
        }
        if (rc == 0) {
            rc = measure("rref_create_call", CREATE_CALL, NULL, calls / 2);
        }
        td_rref_release(r);
    }
    st = td_finalize();
    if (st != TD_OK) {
        fprintf(stderr, "td_finalize: %s\n", td_last_error());
        return 1;
    }
    return rc;
}
