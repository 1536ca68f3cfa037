/* collectives.c: todist's collectives timed under todist-run -n N (a
 * benchmark, not a test; bench/collectives.sh runs it beside Open MPI and
 * gloo).
 *
 * Prints, on rank 0, one line per measurement (and a "# spread" line with
 * the minimum, maximum, mean and repetitions after each: where calls are
 * bimodal, as through a shaper's burst, the mean of a long run is the
 * fair figure, the median sees only the common mode):
 *   allreduce ranks=N size=BYTES median_us=T busbw_MBps=B
 * for float32 all_reduce (sum) of 8 B, 4 KiB, 1 MiB and 64 MiB; broadcast,
 * allgather and reduce_scatter at 1 MiB (size: the whole buffer, busbw as
 * nccl-tests: broadcast x1, allgather and reduce_scatter x(n-1)/n,
 * all_reduce x2(n-1)/n); and `sendrecv size=S rtt_us=T` for a
 * td_send/td_recv ping-pong between ranks 0 and 1 (8 B and 64 MiB; up to
 * 4 KiB each sample is a batch of 16 round trips, so that reading the
 * clock, about 25 ns here, is not a tenth of what is measured).
 * Each figure is the median of repeated calls after a barrier (every call
 * timed on its own; the slowest rank's time per call: rank 0 times from
 * the call until its result is there, which needs every rank).
 *
 *   todist-run -n 2 bench/collectives [SIZES...]     all_reduce of SIZES only
 *   todist-run -n 2 bench/collectives sendrecv SIZES...  the ping-pong only
 *   todist-run -n 2 bench/collectives kinds SIZES...  broadcast, allgather
 *                                     and reduce_scatter of SIZES only
 *   todist-run -n 2 bench/collectives oneway SIZES...  the pipeline's
 *                                     pattern: `oneway size=S busy_us=B
 *                                     median_us=T` (see oneway below)
 * Environment: ITERS_SCALE (multiplies the repetitions, default 1),
 * BUSY_US (oneway: the sender's compute between sends, default 500). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <todist/todist.h>

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

static int rank, n;
static double scale = 1;

#define CHECK(x)                                                            \
    do {                                                                    \
        td_status_t st_ = (x);                                              \
        if (st_ != TD_OK) {                                                 \
            fprintf(stderr, "collectives: rank %d: %s: %s\n", rank, #x,     \
                    td_last_error());                                       \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

static int
iters_for(size_t bytes)
{
    int it = bytes <= 4096 ? 3000 : bytes <= (1u << 20) ? 200 : 12;

    it = (int)(it * scale);
    return it < 3 ? 3 : it;
}

typedef enum { ALLREDUCE, BROADCAST, ALLGATHER, REDUCE_SCATTER } what_t;
static const char *names[] = { "allreduce", "broadcast", "allgather",
                               "reduce_scatter" };

static void
bench(what_t what, size_t bytes)
{
    td_group_t *g = td_group_world();
    int64_t count = (int64_t)(bytes / 4), part = count / n;
    td_tensor_t *a = NULL, *b = NULL;
    int iters = iters_for(bytes), warm = iters / 10 + 2;
    double *t = calloc((size_t)iters, sizeof(double)), med, mean = 0;
    double factor = 1;

    switch (what) {
    case ALLREDUCE:
    case BROADCAST:
        CHECK(td_tensor_zeros(&count, 1, TD_FLOAT32, &a));
        break;
    case ALLGATHER:
        CHECK(td_tensor_zeros(&part, 1, TD_FLOAT32, &a));
        CHECK(td_tensor_zeros(&count, 1, TD_FLOAT32, &b));
        count = part * n;
        break;
    case REDUCE_SCATTER:
        CHECK(td_tensor_zeros(&part, 1, TD_FLOAT32, &a));
        count = part * n;
        CHECK(td_tensor_zeros(&count, 1, TD_FLOAT32, &b));
        break;
    }
    CHECK(td_group_barrier(g));
    for (int i = -warm; i < iters; i++) {
        double t0 = now_s();

        switch (what) {
        case ALLREDUCE:
            CHECK(td_all_reduce(g, a, TD_REDUCE_SUM));
            break;
        case BROADCAST:
            CHECK(td_broadcast(g, a, 0));
            break;
        case ALLGATHER:
            CHECK(td_all_gather(g, b, a));
            break;
        case REDUCE_SCATTER:
            CHECK(td_reduce_scatter(g, a, b, TD_REDUCE_SUM));
            break;
        }
        if (i >= 0) {
            t[i] = now_s() - t0;
        }
    }
    for (int i = 0; i < iters; i++) {
        mean += t[i] / iters;
    }
    qsort(t, (size_t)iters, sizeof(double), cmp_d);
    med = t[iters / 2];
    switch (what) {
    case ALLREDUCE:      factor = 2.0 * (n - 1) / n; break;
    case BROADCAST:      factor = 1; break;
    case ALLGATHER:
    case REDUCE_SCATTER: factor = (double)(n - 1) / n; break;
    }
    if (rank == 0) {
        size_t sz = (size_t)count * 4;

        printf("%s ranks=%d size=%zu median_us=%.*f busbw_MBps=%.0f\n"
               "# spread min_us=%.1f max_us=%.1f mean_us=%.*f iters=%d\n",
               names[what], n, what == ALLREDUCE ? bytes : sz,
               med < 10e-6 ? 2 : 1, med * 1e6,
               (double)(what == ALLREDUCE ? bytes : sz) / med * factor / 1e6,
               t[0] * 1e6, t[iters - 1] * 1e6, mean < 10e-6 ? 2 : 1,
               mean * 1e6, iters);
        fflush(stdout);
    }
    td_tensor_release(a);
    td_tensor_release(b);
    free(t);
}

static void
sendrecv(size_t bytes)
{
    td_group_t *g = td_group_world();
    int64_t count = (int64_t)(bytes / 4);
    td_tensor_t *a;
    int batch = bytes <= 4096 ? 16 : 1;
    int iters = iters_for(bytes) * (bytes <= 4096 ? 3 : 1), warm = 10;
    double *t = calloc((size_t)iters, sizeof(double)), med;

    CHECK(td_tensor_zeros(&count, 1, TD_FLOAT32, &a));
    CHECK(td_group_barrier(g));
    if (rank <= 1) {
        for (int i = -warm; i < iters; i++) {
            double t0 = now_s();

            for (int b = 0; b < batch; b++) {
                if (rank == 0) {
                    CHECK(td_send(g, a, 1, 0));
                    CHECK(td_recv(g, a, 1, 0, NULL));
                } else {
                    CHECK(td_recv(g, a, 0, 0, NULL));
                    CHECK(td_send(g, a, 0, 0));
                }
            }
            if (i >= 0) {
                t[i] = (now_s() - t0) / batch;
            }
        }
    }
    qsort(t, (size_t)iters, sizeof(double), cmp_d);
    med = t[iters / 2];
    if (rank == 0) {
        printf("sendrecv size=%zu rtt_us=%.2f\n"
               "# spread ranks=%d bw_MBps=%.0f min_us=%.2f iters=%d\n", bytes,
               med * 1e6, n, 2.0 * bytes / med / 1e6, t[0] * 1e6, iters);
        fflush(stdout);
    }
    CHECK(td_group_barrier(g));
    td_tensor_release(a);
    free(t);
}

/* The pipeline's pattern (issue 33): rank 0 computes for BUSY_US (a
 * spin on the clock), then td_isend's SIZE bytes to rank 1 and computes
 * again; rank 1 has the next td_irecv posted ahead and waits. One way,
 * from just before td_isend to the end of the receiver's td_work_wait
 * (CLOCK_MONOTONIC is one clock for the processes of a host; the send
 * time travels in the message's first 8 bytes), and how long td_isend
 * itself took. */
static void
oneway(size_t bytes, double busy_us)
{
    td_group_t *g = td_group_world();
    int64_t count = (int64_t)(bytes / 4 < 2 ? 2 : bytes / 4);
    int iters = (int)(2000 * scale), warm = 50;
    td_tensor_t *a[2];
    td_work_t *wk[2] = { NULL, NULL };
    double *lat = calloc((size_t)iters, sizeof(double));
    double *call = calloc((size_t)iters, sizeof(double));

    for (int k = 0; k < 2; k++) {
        CHECK(td_tensor_zeros(&count, 1, TD_FLOAT32, &a[k]));
    }
    CHECK(td_group_barrier(g));
    if (rank == 1) {
        CHECK(td_irecv(g, a[0], 0, 0, &wk[0]));
    }
    for (int i = -warm; rank <= 1 && i < iters; i++) {
        int k = (i + warm) & 1;
        double t0;

        if (rank == 0) {
            double until = now_s() + busy_us * 1e-6;

            while (now_s() < until) {
            }
            if (wk[k] != NULL) {
                CHECK(td_work_wait(wk[k], -1));
                td_work_release(wk[k]);
            }
            t0 = now_s();
            memcpy(td_tensor_data(a[k]), &t0, sizeof(t0));
            CHECK(td_isend(g, a[k], 1, 0, &wk[k]));
            if (i >= 0) {
                call[i] = now_s() - t0;
            }
        } else {
            if (i + 1 < iters) {
                CHECK(td_irecv(g, a[!k], 0, 0, &wk[!k]));
            }
            CHECK(td_work_wait(wk[k], -1));
            t0 = now_s();
            td_work_release(wk[k]);
            wk[k] = NULL;
            if (i >= 0) {
                double sent;

                memcpy(&sent, td_tensor_data(a[k]), sizeof(sent));
                lat[i] = t0 - sent;
            }
        }
    }
    for (int k = 0; k < 2; k++) {
        if (wk[k] != NULL) {
            CHECK(td_work_wait(wk[k], -1));
            td_work_release(wk[k]);
        }
    }
    if (rank == 1) {
        qsort(lat, (size_t)iters, sizeof(double), cmp_d);
        printf("oneway size=%zu busy_us=%.0f median_us=%.2f\n"
               "# spread p10_us=%.2f p90_us=%.2f max_us=%.1f iters=%d\n",
               bytes, busy_us, lat[iters / 2] * 1e6, lat[iters / 10] * 1e6,
               lat[iters * 9 / 10] * 1e6, lat[iters - 1] * 1e6, iters);
        fflush(stdout);
    }
    CHECK(td_group_barrier(g));     /* rank 0 prints after rank 1 */
    if (rank == 0) {
        qsort(call, (size_t)iters, sizeof(double), cmp_d);
        printf("# oneway size=%zu td_isend call median_us=%.2f p90_us=%.2f\n",
               bytes, call[iters / 2] * 1e6, call[iters * 9 / 10] * 1e6);
        fflush(stdout);
    }
    CHECK(td_group_barrier(g));
    for (int k = 0; k < 2; k++) {
        td_tensor_release(a[k]);
    }
    free(lat);
    free(call);
}

int
main(int argc, char **argv)
{
    size_t sizes[8] = { 8, 4096, 1u << 20, 64u << 20 };
    int n_sizes = 4;
    const char *s = getenv("ITERS_SCALE");

    if (s != NULL && atof(s) > 0) {
        scale = atof(s);
    }
    int only_sr = argc > 1 && strcmp(argv[1], "sendrecv") == 0;
    int kinds = argc > 1 && strcmp(argv[1], "kinds") == 0;
    int one = argc > 1 && strcmp(argv[1], "oneway") == 0;
    const char *busy = getenv("BUSY_US");

    if (argc > 1) {
        n_sizes = 0;
        for (int i = 1 + only_sr + kinds + one; i < argc && n_sizes < 8; i++) {
            sizes[n_sizes++] = (size_t)atoll(argv[i]);
        }
    }
    CHECK(td_init(NULL));
    rank = td_world()->rank;
    n = td_world()->world_size;
    for (int i = 0; i < n_sizes; i++) {
        if (one) {
            oneway(sizes[i], busy != NULL ? atof(busy) : 500);
        } else if (only_sr) {
            sendrecv(sizes[i]);
        } else if (kinds) {
            bench(BROADCAST, sizes[i]);
            bench(ALLGATHER, sizes[i]);
            bench(REDUCE_SCATTER, sizes[i]);
        } else {
            bench(ALLREDUCE, sizes[i]);
        }
    }
    if (argc <= 1) {
        bench(BROADCAST, 1u << 20);
        bench(ALLGATHER, 1u << 20);
        bench(REDUCE_SCATTER, 1u << 20);
        if (n >= 2) {
            sendrecv(8);
            sendrecv(64u << 20);
        }
    }
    CHECK(td_finalize());
    return 0;
}
