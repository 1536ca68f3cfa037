/* staging: the staging engine's echo next to the raw transport's, in one
 * run:   todist-run -n 2 bench/staging [SIZE_MIB [CHUNK_KIB [SLOTS]]]
 * (bench/staging.sh runs it). Rank 0 sends SIZE bytes to rank 1, which
 * sends them back; raw: one active message each way straight into
 * preallocated buffers (the GPU-direct route's floor); staged: the engine
 * with the host copy backend (memcpy device<->pinned, what the test suite
 * uses), chunked and double-buffered. On a GPU the copies would be PCIe
 * copies by the CUDA backend; here they are host memcpys, so the ratio
 * says what the chunking, credits and extra copies cost over the bare
 * transfer. Median (min-max) of REPS echoes after a warm-up; last line:
 *   staging_echo: size 64 MiB chunk 4096 KiB: staged X ms, raw Y ms, staged/raw bandwidth Z */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "todist/todist.h"
#include "runtime/runtime.h"
#include "ucx_transport/staging.h"

#define REPS 9
#define RAW_ID 0
#define STAGING_ID 2
#define REPLY (1ull << 32)

static int rank;
static td_transport_t *tp;
static td_staging_t *eng;
static size_t size, chunk = 4u << 20;
static int slots = 2;
static uint8_t *sbuf, *rbuf, *dbuf;     /* "device" source, landing, echo */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int got, sent_ok;
static uint8_t hdr[8];

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
bump(int *c)
{
    pthread_mutex_lock(&lock);
    (*c)++;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

static void
wait_for(int *c, int n)
{
    pthread_mutex_lock(&lock);
    while (*c < n) {
        pthread_cond_wait(&cond, &lock);
    }
    pthread_mutex_unlock(&lock);
}

/* ---- raw: one active message each way ---- */

static void
raw_done(void *arg, td_status_t status, int src, td_iov_t *b, size_t n)
{
    td_iov_t iov = {dbuf, size, TD_MEM_HOST};

    if (rank == 1) {
        td__transport_send(tp, 0, RAW_ID, hdr, sizeof(hdr), &iov, 1, NULL, NULL);
    } else {
        bump(&got);
    }
}

static void
raw_recv(void *arg, td_transport_rx_t *rx)
{
    if (rx->n_bodies != 1) {
        return;
    }
    rx->dest[0] = (td_iov_t){rank == 1 ? dbuf : rbuf, size, TD_MEM_HOST};
    rx->done = raw_done;
}

/* ---- staged: the engine with host copies ---- */

static td_status_t
h_alloc(void *c, size_t n, void **p)
{
    *p = malloc(n);
    return *p ? TD_OK : TD_ERR_NO_MEMORY;
}

static void
h_free(void *c, void *p)
{
    free(p);
}

static td_status_t
h_copy(void *c, void *d, const void *s, size_t n, td_stage_dir_t dir)
{
    memcpy(d, s, n);
    return TD_OK;
}

static td_status_t
h_wait(void *c)
{
    return TD_OK;
}

static td_status_t
st_dest(void *arg, int src, uint64_t id, size_t total, void **dst_p)
{
    *dst_p = rank == 1 ? dbuf : rbuf;
    return TD_OK;
}

static void
st_sent(void *arg, td_status_t status)
{
    if (status == TD_OK) {
        bump(&sent_ok);
    }
}

static void
st_received(void *arg, td_status_t status, int src, uint64_t id, void *dst,
            size_t total)
{
    if (rank == 1) {
        td__staging_send(eng, 0, id | REPLY, dbuf, total, st_sent, NULL);
    } else {
        bump(&got);
    }
}

static td_status_t
mod_setup(void *arg, td_transport_t *t, const td_world_t *w)
{
    td_staging_params_t p = {
        .handler_id = STAGING_ID, .chunk = chunk, .slots = slots,
        .ops = {h_alloc, h_free, h_copy, h_wait, NULL},
        .dest = st_dest, .received = st_received };

    tp = t;
    td__transport_set_handler(t, RAW_ID, raw_recv, NULL);
    return td__staging_create(t, &p, &eng);
}

static size_t
mod_outstanding(void *arg)
{
    return td__staging_outstanding(eng);
}

static void
mod_shutdown(void *arg)
{
    td__staging_destroy(eng);
}

static int
cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
    td_runtime_module_t mod = { .name = "bench-staging", .setup = mod_setup,
                                .outstanding = mod_outstanding,
                                .shutdown = mod_shutdown };
    double raw[REPS], st[REPS];
    int n = 0;

    size = (size_t)(argc > 1 ? atof(argv[1]) : 64) * (1u << 20);
    if (argc > 2) chunk = (size_t)atol(argv[2]) << 10;
    if (argc > 3) slots = atoi(argv[3]);
    rank = atoi(getenv("TODIST_RANK") ? getenv("TODIST_RANK") : "0");
    sbuf = malloc(size);
    rbuf = malloc(size);
    dbuf = malloc(size);
    memset(sbuf, 7, size);
    memset(rbuf, 1, size);
    memset(dbuf, 2, size);           /* touch every page before timing */
    td__runtime_register(&mod);
    if (td_init(NULL) != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 1;
    }
    if (rank == 0) {
        for (int r = -1; r < REPS; r++) {          /* r = -1: warm-up */
            td_iov_t iov = {sbuf, size, TD_MEM_HOST};
            double t0 = now_s();
            td__transport_send(tp, 1, RAW_ID, hdr, sizeof(hdr), &iov, 1, NULL, NULL);
            wait_for(&got, ++n);
            double t1 = now_s();
            td__staging_send(eng, 1, (uint64_t)(r + 2), sbuf, size, st_sent, NULL);
            wait_for(&got, ++n);
            wait_for(&sent_ok, r + 2);
            double t2 = now_s();
            if (r >= 0) {
                raw[r] = t1 - t0;
                st[r] = t2 - t1;
            }
        }
        if (memcmp(rbuf, sbuf, size) != 0) {
            fprintf(stderr, "staging: the echo differs\n");
            return 1;
        }
        qsort(raw, REPS, sizeof(double), cmp_d);
        qsort(st, REPS, sizeof(double), cmp_d);
        double mib = (double)size / (1 << 20);
        printf("raw transport echo %.0f MiB: %.2f ms (%.2f-%.2f), %.2f GiB/s each way\n",
               mib, raw[REPS / 2] * 1e3, raw[0] * 1e3, raw[REPS - 1] * 1e3,
               mib / 1024 * 2 / raw[REPS / 2] / 2);
        printf("staged echo %.0f MiB (chunk %zu KiB, %d slots): %.2f ms (%.2f-%.2f), %.2f GiB/s each way\n",
               mib, chunk >> 10, slots, st[REPS / 2] * 1e3, st[0] * 1e3,
               st[REPS - 1] * 1e3, mib / 1024 * 2 / st[REPS / 2] / 2);
        printf("staging_echo: size %.0f MiB chunk %zu KiB: staged %.2f ms, raw %.2f ms, staged/raw bandwidth %.2f\n",
               mib, chunk >> 10, st[REPS / 2] * 1e3, raw[REPS / 2] * 1e3,
               raw[REPS / 2] / st[REPS / 2]);
    } else {
        wait_for(&sent_ok, REPS + 1);
    }
    td_finalize();
    return 0;
}
