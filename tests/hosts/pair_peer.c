/* pair_peer: the all_reduce of two ranks on two hosts, as one tagged
 * message each way (runtime/coll/allreduce.c T1..T4; tests/hosts/
 * test_hosts_pair.sh, layout 1+1). Usage: pair_peer MODE
 *   values     sums, averages, minima and maxima of every dtype, 4 B to
 *              COLL_PAIR_MAX (tagged) and just above it (not), 2,000 calls
 *              of 8 B with values of each call's own; prints
 *              "rank=R values ok tagged=N" (N: calls taken tagged here)
 *   dtype      rank 0 float32 x 2, rank 1 float64 x 1: the same 8 bytes
 *   count      rank 0 float32 x 2, rank 1 float32 x 3
 *   kind       rank 0 all_reduce, rank 1 broadcast of the same tensor
 *   kindfirst  rank 1 broadcasts from itself (it sends, it waits for
 *              nothing, it probes nobody) while rank 0 sleeps 1 s, then
 *              rank 0 calls all_reduce: the broadcast's message was
 *              queued before the call began (step.h C18: found by
 *              coll_op_check_queued; run with TODIST_COLL_TIMEOUT=3)
 *   timeout    rank 1 enters 4 s late (run with TODIST_COLL_TIMEOUT=1)
 *   dead       rank 1 dies (SIGKILL) once warm, while rank 0 waits
 *   cold PATH  no warm-up (allreduce.c T6, transport.c U2): after a store
 *              barrier (no endpoint made), rank 1 writes its pid to
 *              PATH.pid1 and stops itself (SIGSTOP); rank 0 waits for
 *              PATH.go (the test saw rank 1 stopped) and calls all_reduce:
 *              its endpoint to rank 1 cannot finish wiring up (L13) while
 *              rank 1 is stopped, so the post is refused; a thread of
 *              rank 0 creates PATH.refused once it was (the test then
 *              resumes rank 1). Each prints "rank=R cold rc=STATUS sum=S
 *              unwired=N err=M" (N: posts refused, this process); run
 *              with TODIST_COLL_SHM=0 (else the first call makes the
 *              endpoint through the segment's first try)
 *   forged     rank 1 waits in an all_reduce; rank 0 first sends it, from
 *              a UCX worker of its own, a message with that call's bare
 *              tag (group id, call) and 1000s in it, then calls (transport.c
 *              U6: the tag is keyed by the job's token, so the forged one
 *              is never taken); prints "rank=R forged sum=S rc=STATUS"
 * The failure modes print "rank=R rc=STATUS err=MESSAGE" for the call. */
#include "config.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "todist/todist.h"
#include "runtime/coll/allreduce.h"  /* coll_all_reduce_pair_tag_count */
#include "runtime/coll/match.h"      /* the world group's id and seq */
#include "runtime/runtime.h"         /* td__runtime_peer_address */

static int rank;

static int
fail(const char *what)
{
    printf("rank=%d FAIL %s: %s\n", rank, what, td_last_error());
    return 1;
}

/* X[i] of rank R in call C: exact in every dtype used here. */
static double
val(int r, int c, int64_t i)
{
    return (double)((r + 1) * 3 + (c % 7) + i % 5);
}

static void
fill(td_tensor_t *t, int r, int c)
{
    int64_t n = td_tensor_numel(t);
    void *d = td_tensor_data(t);

    for (int64_t i = 0; i < n; i++) {
        switch (td_tensor_dtype(t)) {
        case TD_FLOAT32: ((float *)d)[i] = (float)val(r, c, i); break;
        case TD_FLOAT64: ((double *)d)[i] = val(r, c, i); break;
        case TD_INT64: ((int64_t *)d)[i] = (int64_t)val(r, c, i); break;
        case TD_INT32: ((int32_t *)d)[i] = (int32_t)val(r, c, i); break;
        default: break;
        }
    }
}

static double
get(const td_tensor_t *t, int64_t i)
{
    const void *d = td_tensor_data(t);

    switch (td_tensor_dtype(t)) {
    case TD_FLOAT32: return ((const float *)d)[i];
    case TD_FLOAT64: return ((const double *)d)[i];
    case TD_INT64: return (double)((const int64_t *)d)[i];
    case TD_INT32: return ((const int32_t *)d)[i];
    default: return -1;
    }
}

static double
expect(td_reduce_op_t op, td_dtype_t dt, int c, int64_t i)
{
    double a = val(0, c, i), b = val(1, c, i);

    switch (op) {
    case TD_REDUCE_SUM: return a + b;
    case TD_REDUCE_MIN: return a < b ? a : b;
    case TD_REDUCE_MAX: return a > b ? a : b;
    case TD_REDUCE_AVG:
        return dt == TD_INT32 || dt == TD_INT64 ? (double)(int64_t)((a + b) / 2)
                                                : (a + b) / 2;
    default: return -1;
    }
}

/* One all_reduce of N elements of DT with OP, call C, checked. */
static int
one(td_dtype_t dt, int64_t n, td_reduce_op_t op, int c)
{
    td_tensor_t *t;
    td_status_t st;

    if (td_tensor_zeros(&n, 1, dt, &t) != TD_OK) {
        return fail("tensor");
    }
    fill(t, rank, c);
    st = td_all_reduce(td_group_world(), t, op);
    if (st != TD_OK) {
        td_tensor_release(t);
        return fail("all_reduce");
    }
    for (int64_t i = 0; i < n; i++) {
        if (get(t, i) != expect(op, dt, c, i)) {
            printf("rank=%d FAIL %s x %lld op %d call %d: [%lld] = %g, "
                   "expected %g\n", rank, td_dtype_name(dt), (long long)n,
                   (int)op, c, (long long)i, get(t, i),
                   expect(op, dt, c, i));
            td_tensor_release(t);
            return 1;
        }
    }
    td_tensor_release(t);
    return 0;
}

static int
values(void)
{
    static const td_dtype_t dts[] = { TD_FLOAT32, TD_FLOAT64, TD_INT64,
                                      TD_INT32 };
    static const td_reduce_op_t ops[] = { TD_REDUCE_SUM, TD_REDUCE_MIN,
                                          TD_REDUCE_MAX, TD_REDUCE_AVG };
    unsigned long tag0 = coll_all_reduce_pair_tag_count();
    int c = 0;

    for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
        int64_t es = (int64_t)td_dtype_size(dts[d]);
        /* 1 element, 8 B, the largest tagged body, and one element more */
        int64_t ns[] = { 1, 8 / es, COLL_PAIR_MAX / es,
                         COLL_PAIR_MAX / es + 1 };

        for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
            for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
                if (one(dts[d], ns[k], ops[o], c++) != 0) {
                    return 1;
                }
            }
        }
    }
    for (int i = 0; i < 2000; i++) {
        if (one(TD_FLOAT32, 2, TD_REDUCE_SUM, c++) != 0) {
            return 1;
        }
    }
    printf("rank=%d values ok tagged=%lu\n", rank,
           coll_all_reduce_pair_tag_count() - tag0);
    return 0;
}

/* Progress W until REQ (an nbx call's result) is done, and free it. */
static void
finish(ucp_worker_h w, void *req)
{
    while (UCS_PTR_IS_PTR(req) &&
           ucp_request_check_status(req) == UCS_INPROGRESS) {
        ucp_worker_progress(w);
    }
    if (UCS_PTR_IS_PTR(req)) {
        ucp_request_free(req);
    }
}

/* Rank 0's forger (mode forged): a message tagged as call SEQ of group
 * GID's exchange would be, bare (no job key), sent to rank 1 from a
 * worker of its own and flushed. 0 when sent. */
static int
forge(uint32_t gid, uint32_t seq)
{
    float body[2 + 4] = { 1000, 1000 };     /* then a 16 B trailer of 0s */
    ucp_params_t up = { .field_mask = UCP_PARAM_FIELD_FEATURES,
                        .features = UCP_FEATURE_TAG };
    ucp_worker_params_t wp = { 0 };
    ucp_request_param_t prm = { .op_attr_mask = 0 };
    ucp_ep_params_t ep_params;
    ucp_config_t *cfg;
    ucp_context_h ctx;
    ucp_worker_h w;
    ucp_ep_h ep;
    void *addr;
    size_t alen;
    int ok;

    if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK) {
        return 1;
    }
    ok = ucp_init(&up, cfg, &ctx) == UCS_OK;
    ucp_config_release(cfg);
    if (!ok || ucp_worker_create(ctx, &wp, &w) != UCS_OK ||
        td__runtime_peer_address(1, &addr, &alen) != TD_OK) {
        return 1;
    }
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address = addr;
    if (ucp_ep_create(w, &ep_params, &ep) != UCS_OK) {
        return 1;
    }
    free(addr);
    finish(w, ucp_tag_send_nbx(ep, body, sizeof(body),
                               (uint64_t)gid << 32 | seq, &prm));
    finish(w, ucp_ep_close_nbx(ep, &prm));          /* flushed: it is sent */
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    return 0;
}

/* PREFIX.SUFFIX exists (0 once WAIT_S passed without it) */
static int
await_file(const char *prefix, const char *suffix, double wait_s)
{
    char path[4096];

    snprintf(path, sizeof(path), "%s.%s", prefix, suffix);
    for (int i = 0; i < wait_s * 1000; i++) {
        if (access(path, F_OK) == 0) {
            return 1;
        }
        usleep(1000);
    }
    return 0;
}

static void
touch_file(const char *prefix, const char *suffix)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s.%s", prefix, suffix);
    if ((f = fopen(path, "w")) != NULL) {
        fprintf(f, "%d\n", (int)getpid());
        fclose(f);
    }
}

/* Mode cold, rank 0's thread: PREFIX.refused once a post was refused
 * (60 s at most). */
static void *
refused_watch(void *prefix)
{
    for (int i = 0; i < 60000; i++) {
        if (coll_all_reduce_pair_unwired_count() > 0) {
            touch_file(prefix, "refused");
            break;
        }
        usleep(1000);
    }
    return NULL;
}

static int
cold(const char *prefix)
{
    const int64_t two = 2;
    pthread_t th;
    td_tensor_t *t;
    td_status_t st;
    float *d;
    int th_ok = 0;

    if (td_barrier(30) != TD_OK) {                  /* the store's */
        return fail("barrier");
    }
    if (td_tensor_zeros(&two, 1, TD_FLOAT32, &t) != TD_OK) {
        return fail("tensor");
    }
    d = td_tensor_data(t);
    d[0] = d[1] = (float)(rank + 1);
    if (rank == 1) {
        touch_file(prefix, "pid1");
        raise(SIGSTOP);
    } else {
        if (!await_file(prefix, "go", 60)) {
            printf("rank=0 FAIL cold: no %s.go\n", prefix);
        }
        th_ok = pthread_create(&th, NULL, refused_watch,
                               (void *)prefix) == 0;
    }
    st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
    if (th_ok) {
        pthread_join(th, NULL);
    }
    printf("rank=%d cold rc=%d sum=%g,%g unwired=%lu err=%s\n", rank, (int)st,
           d[0], d[1], coll_all_reduce_pair_unwired_count(),
           st == TD_OK ? "" : td_last_error());
    td_tensor_release(t);
    return 0;
}

/* A call that must fail: print how. */
static int
report(td_status_t st)
{
    printf("rank=%d rc=%d err=%s\n", rank, (int)st,
           st == TD_OK ? "" : td_last_error());
    return 0;
}

int
main(int argc, char **argv)
{
    const char *mode = argc >= 2 ? argv[1] : "";
    int64_t two = 2, three = 3, one_el = 1;
    td_tensor_t *t = NULL;
    td_status_t st;
    int rc;

    if (td_init(NULL) != TD_OK) {
        fprintf(stderr, "pair_peer: init: %s\n", td_last_error());
        return 1;
    }
    rank = td_world()->rank;
    if (td_world()->world_size != 2) {
        fprintf(stderr, "pair_peer: needs 2 ranks\n");
        return 2;
    }
    if (strcmp(mode, "cold") == 0 && argc == 3) {
        rc = cold(argv[2]);
        st = td_finalize();
        return rc != 0 ? rc : st != TD_OK ? fail("finalize") : 0;
    }
    /* warm: endpoints both ways, the group's hosts known */
    if (one(TD_FLOAT32, 2, TD_REDUCE_SUM, 0) != 0) {
        return 1;
    }
    if (strcmp(mode, "values") == 0) {
        rc = values();
    } else if (strcmp(mode, "dtype") == 0 || strcmp(mode, "count") == 0) {
        int f64 = strcmp(mode, "dtype") == 0 && rank == 1;

        st = td_tensor_zeros(f64 ? &one_el : rank == 1 ? &three : &two, 1,
                             f64 ? TD_FLOAT64 : TD_FLOAT32, &t);
        rc = st != TD_OK ? fail("tensor")
                         : report(td_all_reduce(td_group_world(), t,
                                                TD_REDUCE_SUM));
    } else if (strcmp(mode, "kind") == 0) {
        st = td_tensor_zeros(&two, 1, TD_FLOAT32, &t);
        rc = st != TD_OK ? fail("tensor")
             : report(rank == 0 ? td_all_reduce(td_group_world(), t,
                                                TD_REDUCE_SUM)
                                : td_broadcast(td_group_world(), t, 0));
    } else if (strcmp(mode, "kindfirst") == 0) {
        st = td_tensor_zeros(&two, 1, TD_FLOAT32, &t);
        if (st != TD_OK) {
            return fail("tensor");
        }
        if (rank == 0) {
            sleep(1);
            rc = report(td_all_reduce(td_group_world(), t, TD_REDUCE_SUM));
        } else {
            rc = report(td_broadcast(td_group_world(), t, 1));
            sleep(2);
        }
    } else if (strcmp(mode, "timeout") == 0) {
        if (rank == 1) {
            sleep(4);
        }
        st = td_tensor_zeros(&two, 1, TD_FLOAT32, &t);
        rc = st != TD_OK ? fail("tensor")
             : report(td_all_reduce(td_group_world(), t, TD_REDUCE_SUM));
    } else if (strcmp(mode, "forged") == 0) {
        td_group_t *g = td_group_world();
        float *d;

        st = td_tensor_zeros(&two, 1, TD_FLOAT32, &t);
        if (st != TD_OK || td_group_barrier(g) != TD_OK) {
            return fail("barrier");
        }
        d = td_tensor_data(t);
        d[0] = d[1] = (float)(rank + 1);
        if (rank == 0 && forge(g->id, g->seq) != 0) {
            return fail("forge");
        }
        st = td_all_reduce(g, t, TD_REDUCE_SUM);
        printf("rank=%d forged sum=%g,%g rc=%d %s\n", rank, d[0], d[1],
               (int)st, st == TD_OK ? "" : td_last_error());
        rc = 0;
    } else if (strcmp(mode, "dead") == 0) {
        if (rank == 1) {
            raise(SIGKILL);        /* across hosts: no shared FIFO to wedge */
        }
        st = td_tensor_zeros(&two, 1, TD_FLOAT32, &t);
        rc = st != TD_OK ? fail("tensor")
             : report(td_all_reduce(td_group_world(), t, TD_REDUCE_SUM));
    } else {
        fprintf(stderr, "usage: pair_peer values|dtype|count|kind|kindfirst|"
                "timeout|dead|forged|cold PATH\n");
        return 2;
    }
    td_tensor_release(t);
    if (strcmp(mode, "values") != 0 && strcmp(mode, "forged") != 0) {
        /* the group is broken; the runtime still stops cleanly */
        (void)td_finalize();
        return rc;
    }
    st = td_finalize();
    return rc != 0 ? rc : st != TD_OK ? fail("finalize") : 0;
}
