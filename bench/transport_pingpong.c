/* transport_pingpong: round-trip time and bandwidth of todist's transport
 * for echoes (send N bytes, get N bytes back), run with
 *   todist-run -n 2 bench/transport_pingpong [SIZES...]
 * (bench/transport_pingpong.sh runs it next to ucx_perftest and prints the
 * ratio). The echo runs from the receive callbacks on both sides, as an RPC
 * layer would answer, bodies landing in preallocated buffers (no copies).
 * One line per size:
 *   size=8 rtt_us=0.41 min_us=... max_us=... bw_MiBps=...
 * Every round trip is timed on rank 0's progress thread; rtt is the median
 * of all of them (the statistic ucx_perftest prints as its 50%ile), min and
 * max the spread of the per-repetition medians; bw counts both directions
 * (2N/rtt). */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "todist/todist.h"
#include "runtime/runtime.h"

#define REPS 7

static td_transport_t *tp;
static int rank;
static uint8_t *buf;          /* send and receive buffer */
static size_t cur_size;
static long remaining;
static int finished;
static int errors;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static double *lat;           /* per round trip, this repetition */
static long n_lat;
static double last_t;

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
sent(void *arg, td_status_t status)
{
    if (status != TD_OK) {
        fprintf(stderr, "rank %d: send failed: %s\n", rank, td_last_error());
        errors++;
    }
}

static void
send_msg(int dst, size_t size)
{
    td_iov_t iov = { buf, size, TD_MEM_HOST };
    uint64_t h = size;

    if (td__transport_send(tp, dst, 0, &h, sizeof(h), &iov, 1, sent, NULL)
        != TD_OK) {
        fprintf(stderr, "rank %d: send: %s\n", rank, td_last_error());
        errors++;
    }
}

static void
arrived(void *arg, td_status_t status, int src, td_iov_t *bodies, size_t n)
{
    if (status != TD_OK) {
        fprintf(stderr, "rank %d: receive failed: %s\n", rank,
                td_last_error());
        errors++;
        return;
    }
    if (rank == 1) {
        send_msg(0, bodies[0].len);          /* echo */
    } else {
        double t = now_s();
        lat[n_lat++] = t - last_t;
        last_t = t;
    }
    if (rank == 1) {
        return;
    }
    if (--remaining > 0) {
        send_msg(1, cur_size);               /* next ping */
    } else {
        pthread_mutex_lock(&lock);
        finished = 1;
        pthread_cond_signal(&cond);
        pthread_mutex_unlock(&lock);
    }
}

static void
on_message(void *arg, td_transport_rx_t *rx)
{
    if (rx->n_bodies == 1) {
        rx->dest[0].buf = buf;               /* lands in place */
        rx->dest[0].mem = TD_MEM_HOST;
    }
    rx->done = arrived;
}

static td_status_t
setup(void *arg, td_transport_t *t, const td_world_t *w)
{
    tp = t;
    return td__transport_set_handler(t, 0, on_message, NULL);
}

/* ITERS echoes of SIZE; returns seconds per round trip. */
static double
run_echoes(size_t size, long iters)
{
    double t0, t1;

    pthread_mutex_lock(&lock);
    cur_size = size;
    remaining = iters;
    finished = 0;
    n_lat = 0;
    pthread_mutex_unlock(&lock);
    t0 = now_s();
    last_t = t0;
    send_msg(1, size);
    pthread_mutex_lock(&lock);
    while (!finished && errors == 0) {
        pthread_cond_wait(&cond, &lock);
    }
    pthread_mutex_unlock(&lock);
    t1 = now_s();
    (void)t1;
    return 0;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
    static const size_t default_sizes[] = { 8, 64 << 10, 4 << 20, 64 << 20 };
    td_runtime_module_t mod = { .name = "pingpong", .setup = setup };
    size_t sizes[32], nsizes = 0, max = 0;
    td_status_t s;

    for (int i = 1; i < argc && nsizes < 32; i++) {
        sizes[nsizes++] = strtoull(argv[i], NULL, 0);
    }
    if (nsizes == 0) {
        memcpy(sizes, default_sizes, sizeof(default_sizes));
        nsizes = 4;
    }
    for (size_t i = 0; i < nsizes; i++) {
        max = sizes[i] > max ? sizes[i] : max;
    }
    /* Busy polling is the low-latency mode; TODIST_PROGRESS still wins. */
    setenv("TODIST_PROGRESS", "busy", 0);
    buf = malloc(max ? max : 1);
    if (buf == NULL) {
        fprintf(stderr, "transport_pingpong: out of memory\n");
        return 1;
    }
    memset(buf, 1, max);   /* touch every page before timing */
    td__runtime_register(&mod);
    s = td_init(NULL);
    if (s != TD_OK) {
        fprintf(stderr, "transport_pingpong: td_init: %s\n", td_last_error());
        return 1;
    }
    if (td_world()->world_size != 2) {
        fprintf(stderr, "transport_pingpong: run with todist-run -n 2\n");
        td_finalize();
        return 2;
    }
    rank = td_world()->rank;
    if (rank == 0) {
        printf("# transport_pingpong: progress=%s, ranks pinned by the "
               "caller (see bench/transport_pingpong.sh)\n",
               td__transport_progress_mode(tp) == TD_PROGRESS_BUSY
               ? "busy" : "blocking");
        for (size_t k = 0; k < nsizes && errors == 0; k++) {
            size_t n = sizes[k];
            /* about 0.2 s per repetition, at least 3 echoes */
            long iters = n <= 1024 ? 20000 : n <= (1 << 20) ? 2000 :
                         n <= (16 << 20) ? 50 : 6;
            double t[REPS];
            double *all = malloc(REPS * iters * sizeof(*all));
            lat = malloc((iters + 1) * sizeof(*lat));
            run_echoes(n, iters / 4 + 1);     /* warm-up */
            for (int r = 0; r < REPS; r++) {
                run_echoes(n, iters);
                memcpy(all + r * iters, lat, iters * sizeof(*lat));
                qsort(lat, iters, sizeof(*lat), cmp_double);
                t[r] = lat[iters / 2];
            }
            qsort(t, REPS, sizeof(t[0]), cmp_double);
            qsort(all, REPS * iters, sizeof(*all), cmp_double);
            double med = all[REPS * iters / 2];
            free(all);
            free(lat);
            printf("size=%zu rtt_us=%.3f min_us=%.3f max_us=%.3f "
                   "bw_MiBps=%.1f\n", n, med * 1e6, t[0] * 1e6,
                   t[REPS - 1] * 1e6, 2.0 * n / med / (1 << 20));
            fflush(stdout);
        }
    }
    s = td_finalize();   /* rank 1 waits here, echoing, until rank 0 ends */
    free(buf);
    if (s != TD_OK) {
        fprintf(stderr, "transport_pingpong: td_finalize: %s\n",
                td_last_error());
        return 1;
    }
    return errors ? 1 : 0;
}
