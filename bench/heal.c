/* bench/heal: the in-place recovery's heal (td_checkpoint_broadcast,
 * todist/elastic.h) against the transport's bandwidth, in one run:
 *   todist-run -n N build/bench/heal [MIB] [REPS] [PARTS]     (N >= 2)
 * A state of MIB MiB (default 64) in PARTS float32 tensors (default 16:
 * 4 MiB each), listed in a checkpoint object, is broadcast from rank 0 to
 * ranks 1..N-1 (what joiners, or survivors behind, receive from the
 * source: runtime/elastic/heal.h's chain 0 -> 1 -> ... -> N-1, pieces
 * pipelined beyond two members); then the same tensors with one
 * td_broadcast each (what the heal did before the chain); the baseline is
 * one td_send / td_recv of a single MIB MiB tensor from rank 0 to rank 1
 * (the transport's point-to-point, the fastest way to move those bytes to
 * one rank; the others wait), written on the sender like the state (an untouched one is read
 * from the kernel's zero page). Rank 0 prints the three as GB/s (median
 * of REPS) and the ratios. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include <todist/todist.h>
#include "bench/bench.h"

#define PARTS_MAX 256

static int
fail(const char *what)
{
    fprintf(stderr, "heal: %s: %s\n", what, td_last_error());
    return 1;
}

int
main(int argc, char **argv)
{
    long mib = argc > 1 ? atol(argv[1]) : 64;
    int reps = argc > 2 ? atoi(argv[2]) : 9;
    int parts = argc > 3 ? atoi(argv[3]) : 16;
    int64_t part, whole;
    td_tensor_t *state[PARTS_MAX], *flat;
    td_checkpoint_t *ck;
    double *t_heal, *t_p2p, *t_bcast;
    int rank;

    if (parts < 1 || parts > PARTS_MAX) {
        fprintf(stderr, "heal: PARTS is 1..%d\n", PARTS_MAX);
        return 2;
    }
    part = mib * 1024 * 1024 / 4 / parts;
    whole = part * parts;
    if (mib < 1 || reps < 1 || td_init(NULL) != TD_OK ||
        td_world()->world_size < 2) {
        fprintf(stderr, "usage: todist-run -n N heal [MIB] [REPS] [PARTS] "
                "(N >= 2)\n");
        return 2;
    }
    rank = td_world()->rank;
    t_heal = calloc((size_t)reps, sizeof(double));
    t_p2p = calloc((size_t)reps, sizeof(double));
    t_bcast = calloc((size_t)reps, sizeof(double));
    if (td_checkpoint_create(&ck) != TD_OK ||
        td_tensor_empty(&whole, 1, TD_FLOAT32, TD_CPU, &flat) != TD_OK) {
        return fail("setup");
    }
    for (int i = 0; i < parts; i++) {
        char name[32];
        snprintf(name, sizeof(name), "state.%d", i);
        if (td_tensor_empty(&part, 1, TD_FLOAT32, TD_CPU, &state[i]) != TD_OK ||
            td_checkpoint_add_tensor(ck, name, state[i]) != TD_OK) {
            return fail("state");
        }
        for (int64_t k = 0; k < part; k++) {
            ((float *)td_tensor_data(state[i]))[k] = rank == 0 ? (float)k : 0;
        }
    }
    /* the baseline moves real bytes too: an untouched tensor would be
     * read from the kernel's zero page, always in cache (it measured
     * 25-30% faster than the same bytes written) */
    for (int64_t k = 0; k < whole; k++) {
        ((float *)td_tensor_data(flat))[k] = rank == 0 ? (float)k : 0;
    }
    for (int r = -1; r < reps; r++) {      /* r = -1: warm-up */
        double t0;

        td_group_barrier(td_group_world());
        t0 = bench_now_s();
        if (td_checkpoint_broadcast(ck, td_group_world(), 0) != TD_OK) {
            return fail("td_checkpoint_broadcast");
        }
        td_group_barrier(td_group_world());
        if (r >= 0) {
            t_heal[r] = bench_now_s() - t0;
        }
        td_group_barrier(td_group_world());
        t0 = bench_now_s();
        for (int i = 0; i < parts; i++) {      /* the heal before the chain */
            if (td_broadcast(td_group_world(), state[i], 0) != TD_OK) {
                return fail("td_broadcast");
            }
        }
        td_group_barrier(td_group_world());
        if (r >= 0) {
            t_bcast[r] = bench_now_s() - t0;
        }
        td_group_barrier(td_group_world());
        t0 = bench_now_s();
        if (rank <= 1 &&
            (rank == 0 ? td_send(td_group_world(), flat, 1, 3)
                       : td_recv(td_group_world(), flat, 0, 3, NULL)) != TD_OK) {
            return fail("send/recv");
        }
        td_group_barrier(td_group_world());
        if (r >= 0) {
            t_p2p[r] = bench_now_s() - t0;
        }
    }
    if (rank >= 1 && ((float *)td_tensor_data(state[parts - 1]))[part - 1] !=
                         (float)(part - 1)) {
        fprintf(stderr, "heal: rank %d holds a wrong state\n", rank);
        return 1;
    }
    if (rank == 0) {
        double bytes = (double)whole * 4;
        double h = bench_median(t_heal, reps), p = bench_median(t_p2p, reps);

        qsort(t_heal, (size_t)reps, sizeof(double), bench_cmp_double);
        printf("heal %ld MiB (%d tensors, td_checkpoint_broadcast to %d "
               "ranks): %.2f GB/s (%.1f ms median, %.1f-%.1f)\n", mib, parts,
               td_world()->world_size - 1, bytes / h / 1e9,
               h * 1e3, t_heal[0] * 1e3, t_heal[reps - 1] * 1e3);
        double b = bench_median(t_bcast, reps);

        qsort(t_bcast, (size_t)reps, sizeof(double), bench_cmp_double);
        printf("per tensor %ld MiB (%d td_broadcast, the heal before): %.2f "
               "GB/s (%.1f ms median, %.1f-%.1f)\n", mib, parts,
               bytes / b / 1e9, b * 1e3, t_bcast[0] * 1e3,
               t_bcast[reps - 1] * 1e3);
        qsort(t_p2p, (size_t)reps, sizeof(double), bench_cmp_double);
        printf("transport %ld MiB (one td_send/td_recv): %.2f GB/s (%.1f ms "
               "median, %.1f-%.1f)\n", mib, bytes / p / 1e9, p * 1e3,
               t_p2p[0] * 1e3, t_p2p[reps - 1] * 1e3);
        printf("heal: %.0f%% of the transport's bandwidth (per tensor "
               "td_broadcast: %.0f%%)\n", 100 * p / h, 100 * p / b);
    }
    for (int i = 0; i < parts; i++) {
        td_tensor_release(state[i]);
    }
    td_tensor_release(flat);
    td_checkpoint_free(ck);
    free(t_heal);
    free(t_p2p);
    free(t_bcast);
    return td_finalize() == TD_OK ? 0 : fail("td_finalize");
}
