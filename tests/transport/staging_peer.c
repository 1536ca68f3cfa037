/* staging_peer: one rank of tests/transport/test_staging.sh (through todist-run).
 * The staging engine (ucx_transport/staging.h) over real UCX transfers
 * between two processes, with the test copy backend: "device memory" is
 * host memory and the copies are memcpy, counted. Prints "rank R: ok ..."
 * per check passed, "rank R: FAIL ..." otherwise; exit 0 when all passed.
 *
 *   echo CHUNK SLOTS   rank 0 sends 0, 1, C-1, C, C+1, 2C, 3C+5 bytes and
 *                      64 MiB at once; rank 1 checks each and sends it
 *                      back; rank 0 checks the echoes; S1 and overlap
 *   kill_receiver      rank 1 dies (SIGKILL) at the first chunk of a
 *                      64 MiB transfer: rank 0's send fails (TD_ERR_PEER)
 *   kill_sender        rank 1 dies after a few chunks of a 64 MiB
 *                      transfer to rank 0: rank 0's receive fails
 *   malformed          rank 0 sends 7 bad messages to the engine of rank
 *                      1, then a good transfer: all bad ones rejected,
 *                      the good one arrives intact */
#include "config.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "todist/todist.h"
#include "runtime/runtime.h"
#include "ucx_transport/staging.h"

#define STAGING_ID 2
#define REPLY      (1ull << 32)
#define MAXX       16

static int rank, failures;
static const char *scenario;
static size_t chunk = 65536;
static int slots = 2;
static td_staging_t *eng;
static td_transport_t *tp;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int n_sent, n_received;
static td_status_t sent_status[MAXX], recv_status = TD_OK;
static int recv_failed;
static size_t d2h_bytes, h2d_bytes, copies;

#define CHECK(c_, ...) do {                                            \
    if (!(c_)) {                                                       \
        printf("rank %d: FAIL ", rank); printf(__VA_ARGS__);           \
        printf("\n"); failures++;                                      \
    }                                                                  \
} while (0)

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint8_t
pat(uint64_t id, size_t i)
{
    return (uint8_t)(i * 131 + (id & 0xffff) * 7 + (i >> 13));
}

static size_t
first_bad(const uint8_t *b, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++) {
        if (b[i] != pat(id, i)) {
            return i;
        }
    }
    return (size_t)-1;
}

/* wait (bounded) until COND holds, under LOCK */
#define WAIT_FOR(c_, secs) ({                                          \
    double end_ = now_s() + (secs);                                    \
    pthread_mutex_lock(&lock);                                         \
    while (!(c_) && now_s() < end_) {                                  \
        struct timespec ts_;                                           \
        clock_gettime(CLOCK_REALTIME, &ts_);                           \
        ts_.tv_nsec += 20000000;                                       \
        if (ts_.tv_nsec >= 1000000000) { ts_.tv_sec++; ts_.tv_nsec -= 1000000000; } \
        pthread_cond_timedwait(&cond, &lock, &ts_);                    \
    }                                                                  \
    int r_ = (c_);                                                     \
    pthread_mutex_unlock(&lock);                                       \
    r_; })

/* ---- the test copy backend: host memory, memcpy, counted ---- */

static td_status_t
t_host_alloc(void *ctx, size_t n, void **p)
{
    *p = malloc(n);
    return *p ? TD_OK : td_error(TD_ERR_NO_MEMORY, "test: malloc");
}

static void
t_host_free(void *ctx, void *p)
{
    free(p);
}

static td_status_t
t_copy(void *ctx, void *dst, const void *src, size_t n, td_stage_dir_t dir)
{
    memcpy(dst, src, n);
    pthread_mutex_lock(&lock);
    copies++;
    if (dir == TD_STAGE_D2H) {
        d2h_bytes += n;
    } else {
        h2d_bytes += n;
    }
    pthread_mutex_unlock(&lock);
    return TD_OK;
}

static td_status_t
t_wait(void *ctx)
{
    return TD_OK;
}

/* ---- engine callbacks ---- */

static void
on_sent(void *arg, td_status_t status)
{
    pthread_mutex_lock(&lock);
    sent_status[(intptr_t)arg] = status;
    n_sent++;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

static void
free_after_send(void *arg, td_status_t status)
{
    CHECK(status == TD_OK, "echo send failed: %s", td_strerror(status));
    free(arg);
    pthread_mutex_lock(&lock);
    n_sent++;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

static td_status_t
on_dest(void *arg, int src, uint64_t id, size_t total, void **dst_p)
{
    if (strcmp(scenario, "kill_receiver") == 0 && rank == 1) {
        raise(SIGKILL);            /* mid-transfer: chunks are in flight */
    }
    *dst_p = malloc(total ? total : 1);
    return *dst_p ? TD_OK : td_error(TD_ERR_NO_MEMORY, "test: malloc");
}

static void
on_received(void *arg, td_status_t status, int src, uint64_t id, void *dst,
            size_t total)
{
    size_t bad = status == TD_OK ? first_bad(dst, total, id) : 0;

    if (status != TD_OK) {
        pthread_mutex_lock(&lock);
        recv_status = status;
        recv_failed++;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
        free(dst);
        return;
    }
    CHECK(bad == (size_t)-1, "transfer %llx of %zu B from rank %d differs at "
          "byte %zu", (unsigned long long)id, total, src, bad);
    if (rank == 1 && strcmp(scenario, "echo") == 0) {
        /* the reply: the same bytes back, as a new transfer; its pattern
         * is the request's (the id's low 16 bits) */
        td_status_t s = td__staging_send(eng, src, id | REPLY, dst, total,
                                        free_after_send, dst);
        CHECK(s == TD_OK, "echo of %llx: %s", (unsigned long long)id,
              td_last_error());
    } else {
        free(dst);
    }
    pthread_mutex_lock(&lock);
    n_received++;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

/* ---- the runtime module that owns the engine ---- */

static td_status_t
mod_setup(void *arg, td_transport_t *t, const td_world_t *w)
{
    td_staging_params_t p = {
        .handler_id = STAGING_ID, .chunk = chunk, .slots = slots,
        .ops = {t_host_alloc, t_host_free, t_copy, t_wait, NULL},
        .dest = on_dest, .received = on_received };

    tp = t;
    return td__staging_create(t, &p, &eng);
}

static size_t
mod_outstanding(void *arg)
{
    return eng ? td__staging_outstanding(eng) : 0;
}

static void
mod_peer_failed(void *arg, int r, td_status_t why)
{
    /* also reported while the transport closes, after mod_shutdown */
    td__staging_peer_failed(eng, r);
}

static void
mod_shutdown(void *arg)
{
    td_staging_t *e = eng;

    eng = NULL;
    td__staging_destroy(e);
}

/* ---- scenarios ---- */

static void
scenario_echo(void)
{
    size_t sizes[] = {0, 1, chunk - 1, chunk, chunk + 1, 2 * chunk,
                      3 * chunk + 5, 64u << 20};
    int n = (int)(sizeof(sizes) / sizeof(sizes[0]));
    uint8_t *bufs[MAXX];
    td_staging_stats_t st;

    if (rank == 1) {
        CHECK(WAIT_FOR(n_received == n && n_sent == n, 120),
              "rank 1 got %d of %d transfers, echoed %d", n_received, n,
              n_sent);
        td_barrier(-1);
        return;
    }
    for (int i = 0; i < n; i++) {
        bufs[i] = malloc(sizes[i] + 1);
        for (size_t k = 0; k < sizes[i]; k++) {
            bufs[i][k] = pat((uint64_t)i + 1, k);
        }
    }
    double t0 = now_s();
    for (int i = 0; i < n; i++) {       /* all at once */
        td_status_t s = td__staging_send(eng, 1, (uint64_t)i + 1, bufs[i],
                                        sizes[i], on_sent, (void *)(intptr_t)i);
        CHECK(s == TD_OK, "send %d: %s", i, td_last_error());
    }
    CHECK(WAIT_FOR(n_sent == n && n_received == n, 120),
          "%d of %d sends done, %d of %d echoes back", n_sent, n, n_received,
          n);
    double dt = now_s() - t0;
    for (int i = 0; i < n; i++) {
        CHECK(sent_status[i] == TD_OK, "send of %zu B: %s", sizes[i],
              td_strerror(sent_status[i]));
        free(bufs[i]);
    }
    td__staging_stats(eng, &st);
    CHECK(st.max_unacked == (uint64_t)slots, "at most %d chunks unacked "
          "(S1), and that many used: saw %llu", slots,
          (unsigned long long)st.max_unacked);
    CHECK(st.overlapped > 0, "no device->host copy overlapped a transfer");
    CHECK(st.rejected == 0, "%llu messages rejected",
          (unsigned long long)st.rejected);
    size_t total = 0, chunks = 0;
    for (int i = 0; i < n; i++) {
        total += sizes[i];
        chunks += sizes[i] ? (sizes[i] + chunk - 1) / chunk : 1;
    }
    CHECK(d2h_bytes == total && h2d_bytes == total, "copied %zu B out and "
          "%zu B in, want %zu each", d2h_bytes, h2d_bytes, total);
    CHECK(st.chunks_sent == chunks && st.acks_received == chunks,
          "%llu chunks sent, %llu acked, want %zu",
          (unsigned long long)st.chunks_sent,
          (unsigned long long)st.acks_received, chunks);
    /* S8: the echoes' chunks of 64 KiB or more were read in place here
     * (one copy from rank 1's buffer), unless TODIST_STAGING_CMA=0 */
    const char *cma = getenv("TODIST_STAGING_CMA");
    size_t want_inplace = 0;
    uint64_t inplace = 0, refused = 0;
    for (int i = 0; cma == NULL || strcmp(cma, "0") != 0; i++) {
        if (i == n) {
            break;
        }
        for (size_t off = 0; off < sizes[i]; off += chunk) {
            want_inplace += sizes[i] - off >= TD_STAGING_INPLACE_MIN &&
                            chunk >= TD_STAGING_INPLACE_MIN;
        }
    }
    td__transport_inplace_counts(tp, &inplace, &refused);
    CHECK(inplace == want_inplace && refused == 0, "%llu chunks read in "
          "place (%llu refused), want %zu", (unsigned long long)inplace,
          (unsigned long long)refused, want_inplace);
    CHECK(st.d2h_ns > 0 && st.h2d_ns > 0 && st.wire_ns > 0 &&
          st.send_ns > 0 && st.recv_ns > 0, "stage times d2h %llu h2d %llu "
          "wire %llu send %llu recv %llu ns: each should be counted",
          (unsigned long long)st.d2h_ns, (unsigned long long)st.h2d_ns,
          (unsigned long long)st.wire_ns, (unsigned long long)st.send_ns,
          (unsigned long long)st.recv_ns);
    if (failures == 0) {
        printf("rank 0: ok %d transfers (0 B .. 64 MiB, chunk %zu, %d slots) "
               "echoed intact in %.3f s; %zu chunks, max %llu unacked, %llu "
               "copies overlapped, %llu chunks read in place\n", n, chunk,
               slots, dt, chunks, (unsigned long long)st.max_unacked,
               (unsigned long long)st.overlapped,
               (unsigned long long)inplace);
    }
    td_barrier(-1);
}

static void
scenario_kill_receiver(void)
{
    size_t big = 64u << 20;
    uint8_t *buf;

    if (rank == 1) {
        sleep(60);                 /* on_dest kills this process */
        return;
    }
    buf = calloc(1, big);
    double t0 = now_s();
    CHECK(td__staging_send(eng, 1, 77, buf, big, on_sent, (void *)0) == TD_OK,
          "send: %s", td_last_error());
    CHECK(WAIT_FOR(n_sent == 1, 30), "the send did not end within 30 s");
    CHECK(sent_status[0] == TD_ERR_PEER, "status %s, want TD_ERR_PEER",
          td_status_name(sent_status[0]));
    if (failures == 0) {
        printf("rank 0: ok the send to the killed receiver failed with %s "
               "after %.1f s\n", td_status_name(sent_status[0]),
               now_s() - t0);
    }
}

static void
scenario_kill_sender(void)
{
    size_t big = 64u << 20;
    td_staging_stats_t st;

    if (rank == 0) {
        double t0 = now_s();
        CHECK(WAIT_FOR(recv_failed == 1, 30), "the receive did not fail "
              "within 30 s");
        CHECK(recv_status == TD_ERR_PEER, "status %s, want TD_ERR_PEER",
              td_status_name(recv_status));
        td__staging_stats(eng, &st);
        CHECK(st.chunks_received > 0 && st.bytes_received < big,
              "%llu chunks arrived before the death",
              (unsigned long long)st.chunks_received);
        if (failures == 0) {
            printf("rank 0: ok the receive from the killed sender failed with"
                   " %s after %llu chunks (%.1f s)\n",
                   td_status_name(recv_status),
                   (unsigned long long)st.chunks_received, now_s() - t0);
        }
        return;
    }
    uint8_t *buf = calloc(1, big);
    td__staging_send(eng, 0, 78, buf, big, on_sent, (void *)0);
    for (int i = 0; i < 30000; i++) {
        td__staging_stats(eng, &st);
        if (st.acks_received >= 4) {
            raise(SIGKILL);
        }
        usleep(1000);
    }
}

static void
scenario_malformed(void)
{
    td_staging_stats_t st;
    size_t n = 4 * chunk + 3;

    if (rank == 1) {
        CHECK(WAIT_FOR(n_received == 1, 60), "the good transfer never came");
        double end = now_s() + 30;
        do {
            td__staging_stats(eng, &st);
        } while (st.rejected < 7 && now_s() < end && usleep(10000) == 0);
        CHECK(st.rejected == 7, "%llu of 7 bad messages rejected",
              (unsigned long long)st.rejected);
        if (failures == 0) {
            printf("rank 1: ok 7 bad messages rejected, the good transfer "
                   "arrived intact\n");
        }
        td_barrier(-1);
        return;
    }
    uint8_t hdr[8][TD_STAGING_MSG_BYTES + 8];
    static uint8_t body[64];
    td_staging_msg_t m = {1, 0, 5, 0, 16, 16};
    td_iov_t iov = {body, 16, TD_MEM_HOST};
    int k = 0;

    td__staging_encode(&m, hdr[k]);          /* 1: short header */
    td__transport_send(tp, 1, STAGING_ID, hdr[k], 20, &iov, 1, NULL, NULL);
    k++;
    td__staging_encode(&m, hdr[k]);          /* 2: version 9 */
    hdr[k][0] = 9;
    td__transport_send(tp, 1, STAGING_ID, hdr[k], TD_STAGING_MSG_BYTES, &iov, 1, NULL, NULL);
    k++;
    td__staging_encode(&m, hdr[k]);          /* 3: type 7 */
    hdr[k][1] = 7;
    td__transport_send(tp, 1, STAGING_ID, hdr[k], TD_STAGING_MSG_BYTES, &iov, 1, NULL, NULL);
    k++;
    m.offset = 10;                           /* 4: chunk beyond total */
    td__staging_encode(&m, hdr[k]);
    td__transport_send(tp, 1, STAGING_ID, hdr[k], TD_STAGING_MSG_BYTES, &iov, 1, NULL, NULL);
    k++;
    m.offset = 0;                            /* 5: no body for len 16 */
    td__staging_encode(&m, hdr[k]);
    td__transport_send(tp, 1, STAGING_ID, hdr[k], TD_STAGING_MSG_BYTES, NULL, 0, NULL, NULL);
    k++;
    m.type = 3;                              /* 6: NACK without an error */
    m.len = 0;
    td__staging_encode(&m, hdr[k]);
    td__transport_send(tp, 1, STAGING_ID, hdr[k], TD_STAGING_MSG_BYTES, NULL, 0, NULL, NULL);
    k++;
    m.type = 2;                              /* 7: ACK of nothing */
    td__staging_encode(&m, hdr[k]);
    td__transport_send(tp, 1, STAGING_ID, hdr[k], TD_STAGING_MSG_BYTES, NULL, 0, NULL, NULL);
    k++;
    uint8_t *buf = malloc(n);
    for (size_t i = 0; i < n; i++) {
        buf[i] = pat(9, i);
    }
    CHECK(td__staging_send(eng, 1, 9, buf, n, on_sent, (void *)0) == TD_OK,
          "good send: %s", td_last_error());
    CHECK(WAIT_FOR(n_sent == 1, 60), "good send did not complete");
    CHECK(sent_status[0] == TD_OK, "good send: %s",
          td_status_name(sent_status[0]));
    free(buf);
    td_barrier(-1);
}

int
main(int argc, char **argv)
{
    td_runtime_module_t mod = { .name = "staging-test", .setup = mod_setup,
                                .outstanding = mod_outstanding,
                                .peer_failed = mod_peer_failed,
                                .shutdown = mod_shutdown };
    td_status_t s;

    setvbuf(stdout, NULL, _IOLBF, 0);
    scenario = argc > 1 ? argv[1] : "echo";
    if (argc > 2) {
        chunk = (size_t)atol(argv[2]);
    }
    if (argc > 3) {
        slots = atoi(argv[3]);
    }
    rank = atoi(getenv("TODIST_RANK") ? getenv("TODIST_RANK") : "0");
    if (strncmp(scenario, "kill", 4) == 0 && rank == 0) {
        signal(SIGTERM, SIG_IGN);  /* finish the checks after rank 1 died */
    }
    td__runtime_register(&mod);
    s = td_init(NULL);
    if (s != TD_OK) {
        printf("rank %d: td_init: %s\n", rank, td_last_error());
        return 1;
    }
    if (strcmp(scenario, "echo") == 0) {
        scenario_echo();
    } else if (strcmp(scenario, "kill_receiver") == 0) {
        scenario_kill_receiver();
    } else if (strcmp(scenario, "kill_sender") == 0) {
        scenario_kill_sender();
    } else if (strcmp(scenario, "malformed") == 0) {
        scenario_malformed();
    } else {
        printf("rank %d: FAIL unknown scenario %s\n", rank, scenario);
        return 1;
    }
    if (strncmp(scenario, "kill", 4) == 0) {
        printf("rank %d: %s\n", rank, failures ? "failed" : "passed");
        fflush(stdout);
        _exit(failures ? 1 : 0);   /* the job is broken: no finalize */
    }
    s = td_finalize();
    CHECK(s == TD_OK, "td_finalize: %s", td_last_error());
    printf("rank %d: %s\n", rank, failures ? "failed" : "passed");
    return failures ? 1 : 0;
}
