/* coll_peer.c: one rank of the multi-process tests of collectives and
 * point-to-point (tests/coll/test_coll.sh). Run as `todist-run -n N coll_peer
 * MODE`. Checks print "PASS name" or "FAIL name: detail" (rank 0 prints
 * the job-wide verdict of the matrix; other modes print from every rank
 * that checks something); the script matches them.
 *
 * Every expected value is computed here naively from the formula that made
 * the inputs (integer-valued, so float sums are exact), never by the
 * library. */
#include "config.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "todist/todist.h"
#include "runtime/coll/work.h"    /* coll_work_waiters */
#include "runtime/coll/allreduce.h"  /* coll_all_reduce_pair_count */
#include "runtime/coll/conf.h"    /* coll_transport */
#include "runtime/coll/cma.h"     /* coll_cma_holder_reads */
#include "runtime/runtime.h"
#include "ucx_transport/transport.h"  /* td__transport_ucx_events, _taken_count */

static int rank, size;
static int n_fail;

static void check(int cond, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
check(int cond, const char *name, const char *fmt, ...)
{
    va_list ap;

    if (cond) {
        printf("PASS %s\n", name);
    } else {
        n_fail++;
        printf("FAIL %s: rank %d: ", name, rank);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
    }
    fflush(stdout);
}

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static td_tensor_t *
make(int64_t n, td_dtype_t dt)
{
    td_tensor_t *t = NULL;
    int64_t shape[1] = { n };

    if (td_tensor_zeros(shape, 1, dt, &t) != TD_OK) {
        fprintf(stderr, "rank %d: cannot make a tensor of %" PRId64 ": %s\n",
                rank, n, td_last_error());
        exit(2);
    }
    return t;
}

/* ---- typed element access ---------------------------------------------- */

static double
get(const td_tensor_t *t, int64_t i)
{
    const void *p = td_tensor_data(t);

    switch (td_tensor_dtype(t)) {
    case TD_FLOAT32: return ((const float *)p)[i];
    case TD_FLOAT64: return ((const double *)p)[i];
    case TD_INT32:   return ((const int32_t *)p)[i];
    case TD_INT64:   return (double)((const int64_t *)p)[i];
    case TD_UINT8:   return ((const uint8_t *)p)[i];
    default:         return -1;
    }
}

static void
set(td_tensor_t *t, int64_t i, double v)
{
    void *p = td_tensor_data(t);

    switch (td_tensor_dtype(t)) {
    case TD_FLOAT32: ((float *)p)[i] = (float)v; break;
    case TD_FLOAT64: ((double *)p)[i] = v; break;
    case TD_INT32:   ((int32_t *)p)[i] = (int32_t)v; break;
    case TD_INT64:   ((int64_t *)p)[i] = (int64_t)v; break;
    case TD_UINT8:   ((uint8_t *)p)[i] = (uint8_t)v; break;
    default: break;
    }
}

/* Rank R's input element I for reduce op OP: small integers (1..2 for
 * PROD so that 8 ranks stay exact in float32 and uint8). */
static int64_t
val(int r, int64_t i, int op)
{
    if (op == TD_REDUCE_PROD) {
        return 1 + (r + i) % 2;
    }
    return ((r + 1) * 3 + i * 7) % 11 + 1 + (op >= TD_REDUCE_BAND ? r : 0);
}

/* The reduction of val(0..n-1, i, op) in DT, computed naively. */
static double
expect_reduce(int n, int64_t i, int op, td_dtype_t dt)
{
    int64_t acc = val(0, i, op);

    for (int r = 1; r < n; r++) {
        int64_t v = val(r, i, op);

        switch (op) {
        case TD_REDUCE_SUM: case TD_REDUCE_AVG: acc += v; break;
        case TD_REDUCE_PROD: acc *= v; break;
        case TD_REDUCE_MIN: acc = v < acc ? v : acc; break;
        case TD_REDUCE_MAX: acc = v > acc ? v : acc; break;
        case TD_REDUCE_BAND: acc &= v; break;
        case TD_REDUCE_BOR: acc |= v; break;
        case TD_REDUCE_BXOR: acc ^= v; break;
        }
    }
    if (dt == TD_UINT8) {
        acc &= 0xff;
    }
    if (op == TD_REDUCE_AVG) {
        if (dt == TD_FLOAT32) {
            return (double)((float)acc / (float)n);
        }
        if (dt == TD_FLOAT64) {
            return (double)acc / (double)n;
        }
        return (double)(acc / n);
    }
    return (double)acc;
}

/* First index where T differs from WANT(i) (-1: none). */
#define FIRST_BAD(t, n, want_expr, bad_p)                                   \
    do {                                                                    \
        *(bad_p) = -1;                                                      \
        for (int64_t i = 0; i < (n); i++) {                                 \
            if (get((t), i) != (want_expr)) {                               \
                *(bad_p) = i;                                               \
                break;                                                      \
            }                                                               \
        }                                                                   \
    } while (0)

/* ---- the matrix ---------------------------------------------------------- */

static const td_dtype_t dtypes[] = { TD_FLOAT32, TD_FLOAT64, TD_INT32,
                                     TD_INT64, TD_UINT8 };
static const int64_t counts[] = { 0, 1, 7, 4097, 1048579 };
#define BIG 1048579

/* A death (or a drop) is noticed by detection, in milliseconds to 2 s
 * (liveness.h; measured in bench/, printed below), or else only by the
 * call's timeout (60 s; 20 s where a check sets it). The checks tell the
 * two apart with this bound, far from both, so that a loaded machine
 * does not fail them: no check depends on timing. */
#define DETECT_MAX_S 10.0

static long m_fail[16];          /* per collective */
static long m_runs[16];
static const char *m_names[] = { "all_reduce", "broadcast", "reduce",
    "all_gather", "gather", "scatter", "reduce_scatter", "all_to_all",
    "barrier", "all_gather_list" };

static void
m_check(int which, int ok, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
m_check(int which, int ok, const char *fmt, ...)
{
    va_list ap;

    m_runs[which]++;
    if (ok) {
        return;
    }
    if (m_fail[which]++ < 5) {
        fprintf(stderr, "rank %d: matrix %s: ", rank, m_names[which]);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\n");
    }
}

/* Whether to run count C for dtype DT and op OP: the 1,048,579 count
 * (4 MiB a rank, up to 32 MiB for all_to_all on 8 ranks) only for float32
 * SUM and the data movers, so the matrix (about 14 x 1200 calls) stays
 * near a minute with 8 ranks on two loaded cores; the small counts
 * {0, 1, 7, 4097} run every op and dtype. */
static int
want(int64_t c, td_dtype_t dt, int op)
{
    if (c != BIG) {
        return 1;
    }
    return dt == TD_FLOAT32 && (op == TD_REDUCE_SUM || op < 0);
}

static void
matrix_group(td_group_t *g, const char *algo_tag)
{
    int n = td_group_size(g), me = td_group_rank(g);
    char what[160];

    for (size_t di = 0; di < sizeof(dtypes) / sizeof(dtypes[0]); di++) {
        td_dtype_t dt = dtypes[di];
        int nops = td_dtype_is_float(dt) ? TD_REDUCE_BAND : TD_REDUCE_NUM_OPS;

        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
            int64_t c = counts[ci];
            int64_t bad;
            td_status_t st;

            /* reductions: all_reduce, reduce (root n-1), reduce_scatter */
            for (int op = 0; op < nops; op++) {
                if (!want(c, dt, op)) {
                    continue;
                }
                snprintf(what, sizeof(what), "%s n=%d %s count=%" PRId64
                         " op=%s", algo_tag, n, td_dtype_name(dt), c,
                         td_reduce_op_name((td_reduce_op_t)op));
                td_tensor_t *t = make(c, dt);

                for (int64_t i = 0; i < c; i++) {
                    set(t, i, (double)val(me, i, op));
                }
                st = td_all_reduce(g, t, (td_reduce_op_t)op);
                FIRST_BAD(t, c, expect_reduce(n, i, op, dt), &bad);
                m_check(0, st == TD_OK && bad < 0, "%s: %s, [%" PRId64 "]=%g "
                        "want %g", what, st ? td_last_error() : "ok", bad,
                        bad >= 0 ? get(t, bad) : 0,
                        bad >= 0 ? expect_reduce(n, bad, op, dt) : 0);

                for (int64_t i = 0; i < c; i++) {
                    set(t, i, (double)val(me, i, op));
                }
                st = td_reduce(g, t, n - 1, (td_reduce_op_t)op);
                if (me == n - 1) {
                    FIRST_BAD(t, c, expect_reduce(n, i, op, dt), &bad);
                } else {
                    FIRST_BAD(t, c, (double)val(me, i, op), &bad);
                }
                m_check(2, st == TD_OK && bad < 0, "%s: %s, [%" PRId64 "]=%g",
                        what, st ? td_last_error() : "ok", bad,
                        bad >= 0 ? get(t, bad) : 0);
                td_tensor_release(t);

                td_tensor_t *in = make(c * n, dt), *out = make(c, dt);

                for (int64_t i = 0; i < c * n; i++) {
                    set(in, i, (double)val(me, i, op));
                }
                st = td_reduce_scatter(g, out, in, (td_reduce_op_t)op);
                FIRST_BAD(out, c, expect_reduce(n, me * c + i, op, dt), &bad);
                m_check(6, st == TD_OK && bad < 0, "%s: %s, [%" PRId64 "]=%g "
                        "want %g", what, st ? td_last_error() : "ok", bad,
                        bad >= 0 ? get(out, bad) : 0,
                        bad >= 0 ? expect_reduce(n, me * c + bad, op, dt) : 0);
                td_tensor_release(in);
                td_tensor_release(out);
            }
            if (!want(c, dt, -1)) {
                continue;
            }
            snprintf(what, sizeof(what), "%s n=%d %s count=%" PRId64,
                     algo_tag, n, td_dtype_name(dt), c);
            /* data movers: value = 100 * rank + i mod 97 (fits uint8? no:
             * reduced mod 256 consistently by set/get through the dtype) */
#define MV(r, i) ((double)(((r) * 37 + (i) * 5) % 101))
            {
                int root = n > 1 ? 1 : 0;
                td_tensor_t *t = make(c, dt);

                for (int64_t i = 0; i < c; i++) {
                    set(t, i, me == root ? MV(root, i) : -1 + 0 * i);
                }
                if (dt == TD_UINT8 && me != root) {
                    for (int64_t i = 0; i < c; i++) {
                        set(t, i, 255);
                    }
                }
                st = td_broadcast(g, t, root);
                FIRST_BAD(t, c, MV(root, i), &bad);
                m_check(1, st == TD_OK && bad < 0, "%s: %s, [%" PRId64 "]=%g",
                        what, st ? td_last_error() : "ok", bad,
                        bad >= 0 ? get(t, bad) : 0);
                td_tensor_release(t);
            }
            {
                td_tensor_t *in = make(c, dt), *out = make(c * n, dt);

                for (int64_t i = 0; i < c; i++) {
                    set(in, i, MV(me, i));
                }
                st = td_all_gather(g, out, in);
                FIRST_BAD(out, c * n, MV(i / (c ? c : 1), i % (c ? c : 1)),
                          &bad);
                m_check(3, st == TD_OK && bad < 0, "%s: %s, [%" PRId64 "]=%g",
                        what, st ? td_last_error() : "ok", bad,
                        bad >= 0 ? get(out, bad) : 0);

                td_tensor_zero_(out);
                st = td_gather(g, me == 0 ? out : NULL, in, 0);
                if (me == 0) {
                    FIRST_BAD(out, c * n, MV(i / (c ? c : 1), i % (c ? c : 1)),
                              &bad);
                } else {
                    bad = -1;
                }
                m_check(4, st == TD_OK && bad < 0, "%s: %s, [%" PRId64 "]=%g",
                        what, st ? td_last_error() : "ok", bad,
                        bad >= 0 ? get(out, bad) : 0);

                /* scatter from the last rank: block j is MV(j, i) */
                for (int64_t i = 0; i < c * n; i++) {
                    set(out, i, MV(i / (c ? c : 1), i % (c ? c : 1)));
                }
                td_tensor_zero_(in);
                st = td_scatter(g, in, me == n - 1 ? out : NULL, n - 1);
                FIRST_BAD(in, c, MV(me, i), &bad);
                m_check(5, st == TD_OK && bad < 0, "%s: %s, [%" PRId64 "]=%g",
                        what, st ? td_last_error() : "ok", bad,
                        bad >= 0 ? get(in, bad) : 0);

                /* all_to_all: block j of rank r's input is MV(r * n + j, i);
                 * block i of rank me's output came from rank i's block me */
                td_tensor_t *a = make(c * n, dt), *b = make(c * n, dt);

                for (int64_t i = 0; i < c * n; i++) {
                    set(a, i, MV(me * n + i / (c ? c : 1), i % (c ? c : 1)));
                }
                st = td_all_to_all(g, b, a);
                FIRST_BAD(b, c * n, MV((i / (c ? c : 1)) * n + me,
                                       i % (c ? c : 1)), &bad);
                m_check(7, st == TD_OK && bad < 0, "%s: %s, [%" PRId64 "]=%g",
                        what, st ? td_last_error() : "ok", bad,
                        bad >= 0 ? get(b, bad) : 0);
                td_tensor_release(a);
                td_tensor_release(b);

                if (c < BIG) {
                    td_tensor_t *outs[8];

                    for (int j = 0; j < n; j++) {
                        outs[j] = make(c, dt);
                    }
                    st = td_all_gather_list(g, outs, in);
                    bad = -1;
                    for (int j = 0; j < n && bad < 0; j++) {
                        FIRST_BAD(outs[j], c, MV(j, i), &bad);
                    }
                    m_check(9, st == TD_OK && bad < 0, "%s: %s", what,
                            st ? td_last_error() : "ok");
                    for (int j = 0; j < n; j++) {
                        td_tensor_release(outs[j]);
                    }
                }
                td_tensor_release(in);
                td_tensor_release(out);
            }
        }
    }
    m_check(8, td_group_barrier(g) == TD_OK, "%s n=%d: %s", algo_tag, n,
            td_last_error());
}

static const char *algo_sets[] = {
    "",                                   /* the defaults by size */
    "all_reduce:rd,broadcast:linear,reduce:linear,all_gather:direct,"
    "reduce_scatter:direct",
    "all_reduce:ring,broadcast:binomial,reduce:binomial,all_gather:ring,"
    "reduce_scatter:ring",
    "all_reduce:shm,barrier:shm,broadcast:shm,all_gather:shm,"
    "reduce_scatter:shm",                 /* the segment at every size */
};

/* The verdict of the matrix runs so far: failures summed over the world
 * with the defaults, printed by rank 0. */
static int
matrix_verdict(double t0)
{
    td_tensor_t *t;

    /* The verdict: failures summed over the world with the defaults. */
    t = make(20, TD_INT64);
    for (int i = 0; i < 10; i++) {
        set(t, i, (double)m_fail[i]);
        set(t, 10 + i, (double)m_runs[i]);
    }
    if (td_all_reduce(td_group_world(), t, TD_REDUCE_SUM) != TD_OK) {
        check(0, "matrix_verdict", "%s", td_last_error());
        return 1;
    }
    if (rank == 0) {
        for (int i = 0; i < 10; i++) {
            char name[64];
            int64_t f = (int64_t)get(t, i), r = (int64_t)get(t, 10 + i);

            snprintf(name, sizeof(name), "matrix_%s", m_names[i]);
            check(f == 0 && r > 0, name, "%" PRId64 " of %" PRId64 " calls "
                  "failed (details on stderr)", f, r);
            printf("# %s: %" PRId64 " calls checked\n", m_names[i], r);
        }
        printf("# matrix took %.1f s\n", now_s() - t0);
    }
    td_tensor_release(t);
    return 0;
}

static int
mode_matrix(void)
{
    static const int sizes[] = { 1, 2, 3, 4, 5, 8 };
    double t0 = now_s();

    for (size_t a = 0; a < sizeof(algo_sets) / sizeof(algo_sets[0]); a++) {
        if (td_coll_set_algo(algo_sets[a]) != TD_OK) {
            check(0, "matrix_set_algo", "%s", td_last_error());
        }
        for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
            int ranks[8], k = sizes[si];
            td_group_t *g;

            /* The forced sets skip sizes 1 (no algorithm runs) and 4 (a
             * power of two like 2 and 8): the matrix's time stays near a
             * minute on two loaded cores. */
            if (k > size || (a > 0 && (k == 1 || k == 4))) {
                continue;
            }
            /* A different slice of the world each time (not always 0..). */
            for (int i = 0; i < k; i++) {
                ranks[i] = (i + (int)a + (int)si) % size;
            }
            if (td_group_new(ranks, k, &g) != TD_OK) {
                check(0, "matrix_group_new", "%s", td_last_error());
                return 1;
            }
            if (td_group_rank(g) >= 0) {
                matrix_group(g, a == 0 ? "auto" : a == 1 ? "rd/linear/direct"
                                : a == 2 ? "ring/binomial" : "shm");
            }
            td_group_destroy(g);
        }
    }
    td_coll_set_algo(NULL);
    return matrix_verdict(t0);
}

/* The hierarchical algorithms (runtime/coll/hier.c) against the exact
 * values, forced, then the flat ones and auto for comparison, on the world
 * and on the world in another order (hosts then number differently from
 * group ranks, and leaders are not group rank 0). Meant for ranks on
 * several hosts (tests/hosts/test_hosts.sh); on one host "hier" runs
 * with one leader. */
static int
mode_hier(void)
{
    static const char *sets[] = {
        "all_reduce:hier,broadcast:hier,all_gather:hier,"
        "reduce_scatter:hier,barrier:hier",
        "all_reduce:ring,broadcast:binomial,all_gather:ring,"
        "reduce_scatter:ring,barrier:dissemination",
        "",                                   /* auto */
    };
    double t0 = now_s();
    int ranks[64];
    td_group_t *g;

    for (size_t a = 0; a < sizeof(sets) / sizeof(sets[0]); a++) {
        if (td_coll_set_algo(sets[a]) != TD_OK) {
            check(0, "hier_set_algo", "%s", td_last_error());
        }
        matrix_group(td_group_world(), a == 0 ? "hier" : a == 1 ? "flat"
                                                                : "auto");
    }
    /* the world backwards, then odd ranks first */
    for (int k = 0; k < 2 && size <= 64; k++) {
        for (int i = 0; i < size; i++) {
            ranks[i] = k == 0 ? size - 1 - i
                              : (2 * i < size ? 2 * i + 1 : 2 * i - size) %
                                size;
        }
        if (k == 1 && size % 2 == 1) {
            break;                  /* (the formula pairs an even world) */
        }
        if (td_group_new(ranks, size, &g) != TD_OK) {
            check(0, "hier_group_new", "%s", td_last_error());
            return 1;
        }
        if (td_coll_set_algo(sets[0]) != TD_OK) {
            check(0, "hier_set_algo", "%s", td_last_error());
        }
        matrix_group(g, k == 0 ? "hier backwards" : "hier odd first");
        td_group_destroy(g);
    }
    td_coll_set_algo(NULL);
    return matrix_verdict(t0);
}

/* Does auto pick ALGO here? Rank 0 forces ALGO for all_reduce, broadcast,
 * all_gather, reduce_scatter and the barrier, the others leave the choice
 * to auto; the algorithm travels in every call's description, so the
 * calls succeed only if auto picked ALGO on every other rank (else they
 * fail as mismatched). */
static int
mode_auto_is(const char *algo)
{
    char spec[256];
    td_tensor_t *t = make(16, TD_FLOAT32), *big = make(16 * size, TD_FLOAT32);
    td_status_t st = TD_OK;

    snprintf(spec, sizeof(spec), "all_reduce:%s,broadcast:%s,all_gather:%s,"
             "reduce_scatter:%s,barrier:%s", algo, algo, algo, algo, algo);
    if (rank == 0 && td_coll_set_algo(spec) != TD_OK) {
        check(0, "auto_is", "%s", td_last_error());
        return 1;
    }
    td_tensor_fill_(t, 1);
    td_tensor_fill_(big, 1);
    st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
    st = st == TD_OK ? td_broadcast(td_group_world(), t, size - 1) : st;
    st = st == TD_OK ? td_all_gather(td_group_world(), big, t) : st;
    st = st == TD_OK ? td_reduce_scatter(td_group_world(), t, big,
                                         TD_REDUCE_SUM) : st;
    st = st == TD_OK ? td_group_barrier(td_group_world()) : st;
    check(st == TD_OK && get(t, 15) == (double)size * size, "auto_is",
          "auto did not pick %s: %s (%g)", algo,
          st != TD_OK ? td_last_error() : "wrong value", get(t, 15));
    td_coll_set_algo(NULL);
    td_tensor_release(t);
    td_tensor_release(big);
    return 0;
}

/* reduce_scatter whose OUT overlaps its IN (a tensor over IN's memory,
 * as a caller reducing in place wraps it): OUT over IN's block `rank`,
 * then over block rank + 1. Rank r's block j holds (r + 1) * 1000 + j,
 * so block j's sum is 1000 n (n + 1) / 2 + n j, in every element. Then
 * all_gather whose IN is OUT's block `rank`. COUNT elements a block:
 * ring.c's segments, several of them. */
static int
mode_rs_alias(int64_t count)
{
    td_group_t *w = td_group_world();
    td_tensor_t *in = make(count * size, TD_INT32);
    int32_t *d = td_tensor_data(in);
    int64_t shape[1] = { count };

    for (int at = 0; at < 2; at++) {
        int blk = (rank + at) % size;
        td_tensor_t *out = NULL;
        int64_t bad = -1;
        td_status_t st;

        for (int64_t i = 0; i < count * size; i++) {
            d[i] = (rank + 1) * 1000 + (int32_t)(i / count);
        }
        st = td_tensor_from_blob(d + (size_t)blk * (size_t)count, shape, 1,
                                 TD_INT32, TD_CPU, NULL, NULL, &out);
        if (st == TD_OK) {
            st = td_reduce_scatter(w, out, in, TD_REDUCE_SUM);
        }
        for (int64_t i = 0; st == TD_OK && bad < 0 && i < count; i++) {
            if (d[(size_t)blk * (size_t)count + (size_t)i] !=
                1000 * size * (size + 1) / 2 + size * rank) {
                bad = i;
            }
        }
        check(st == TD_OK && bad < 0,
              at == 0 ? "rs_alias_own_block" : "rs_alias_next_block",
              "%s; element %" PRId64 " of %" PRId64 " is %d, want %d",
              st == TD_OK ? "ok" : td_last_error(), bad, count,
              bad >= 0 ? d[(size_t)blk * (size_t)count + (size_t)bad] : 0,
              1000 * size * (size + 1) / 2 + size * rank);
        td_tensor_release(out);
    }
    /* all_gather whose IN is OUT's block `rank` (in place) */
    {
        td_tensor_t *mine = NULL;
        int64_t bad = -1;
        td_status_t st;

        for (int64_t i = 0; i < count * size; i++) {
            d[i] = i / count == rank
                   ? (rank + 1) * 1000 + (int32_t)(i % count % 7) : -1;
        }
        st = td_tensor_from_blob(d + (size_t)rank * (size_t)count, shape, 1,
                                 TD_INT32, TD_CPU, NULL, NULL, &mine);
        if (st == TD_OK) {
            st = td_all_gather(w, in, mine);
        }
        for (int64_t i = 0; st == TD_OK && bad < 0 && i < count * size; i++) {
            if (d[i] != (int32_t)(i / count + 1) * 1000 +
                        (int32_t)(i % count % 7)) {
                bad = i;
            }
        }
        check(st == TD_OK && bad < 0, "ag_alias_own_block",
              "%s; element %" PRId64 " of %" PRId64 " is %d",
              st == TD_OK ? "ok" : td_last_error(), bad, count * size,
              bad >= 0 ? d[bad] : 0);
        td_tensor_release(mine);
    }
    td_tensor_release(in);
    return 0;
}

/* Chunk boundaries of the hierarchical collectives (runtime/coll/hier.c
 * H9, H11): all_gather, reduce_scatter, all_reduce and broadcast forced
 * to "hier" (or to the algorithms ALGOS names: the flat ones across
 * hosts cut pieces too, ring.c R2, tree.c T1) at counts a rank just
 * below, at and above a chunk (1 MiB),
 * at several chunks and a bit, and below a chunk with the whole vector
 * above (blocks are the units); every element of a vector distinct, so
 * a chunk at a wrong offset, lost or sent twice shows. Meant for ranks
 * on several hosts, with the transport inside hosts (TODIST_COLL_SHM=0
 * on one host) or the segments. */
static double
ck_val(td_dtype_t dt, int r, int64_t e)
{
    return dt == TD_UINT8 ? (double)((e * 3 + r) % 251) : (double)(e + r);
}

static double
ck_reduce(td_dtype_t dt, int op, int n, int64_t e)
{
    double acc = op == TD_REDUCE_MAX ? ck_val(dt, n - 1, e) : 0;

    for (int r = 0; op != TD_REDUCE_MAX && r < n; r++) {
        acc += ck_val(dt, r, e);
    }
    if (dt == TD_UINT8) {
        return (double)((int64_t)acc & 0xff);
    }
    if (op == TD_REDUCE_AVG) {
        return dt == TD_FLOAT32 ? (double)((float)acc / (float)n) : acc / n;
    }
    return acc;
}

static int
mode_chunks(const char *algos)
{
    static const struct { td_dtype_t dt; int64_t count; } cases[] = {
        { TD_FLOAT32, 262143 }, { TD_FLOAT32, 262144 },
        { TD_FLOAT32, 262145 }, { TD_FLOAT32, 3 * 262144 + 5 },
        { TD_FLOAT32, 100003 }, { TD_FLOAT64, 2 * 131072 + 1 },
        { TD_UINT8, 1048577 },
    };
    static const int ops[] = { TD_REDUCE_SUM, TD_REDUCE_AVG, TD_REDUCE_MAX };
    td_group_t *g = td_group_world();
    int n = size, bad_calls = 0, calls = 0;

    if (td_coll_set_algo(algos) != TD_OK) {
        check(0, "chunks_set_algo", "%s", td_last_error());
        return 1;
    }
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        td_dtype_t dt = cases[k].dt;
        int64_t c = cases[k].count, bad;
        td_tensor_t *in = make(c, dt), *all = make(c * n, dt);
        td_status_t st;

        /* all_gather: rank j's block holds ck_val(j, j x c + i) */
        for (int64_t i = 0; i < c; i++) {
            set(in, i, ck_val(dt, rank, rank * c + i));
        }
        st = td_all_gather(g, all, in);
        FIRST_BAD(all, c * n, ck_val(dt, (int)(i / c), i), &bad);
        calls++;
        if (st != TD_OK || bad >= 0) {
            bad_calls++;
            fprintf(stderr, "rank %d: chunks: all_gather %s x %" PRId64
                    ": %s [%" PRId64 "]\n", rank, td_dtype_name(dt), c,
                    st != TD_OK ? td_last_error() : "wrong", bad);
        }
        /* reduce_scatter and all_reduce: element e of rank r is
         * ck_val(r, e); SUM for every dtype, AVG and MAX for float32 */
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
            int op = ops[o];

            if (op != TD_REDUCE_SUM && dt != TD_FLOAT32) {
                continue;
            }
            for (int64_t e = 0; e < c * n; e++) {
                set(all, e, ck_val(dt, rank, e));
            }
            st = td_reduce_scatter(g, in, all, (td_reduce_op_t)op);
            FIRST_BAD(in, c, ck_reduce(dt, op, n, rank * c + i), &bad);
            calls++;
            if (st != TD_OK || bad >= 0) {
                bad_calls++;
                fprintf(stderr, "rank %d: chunks: reduce_scatter %s %s x %"
                        PRId64 ": %s [%" PRId64 "]\n", rank,
                        td_reduce_op_name((td_reduce_op_t)op),
                        td_dtype_name(dt), c,
                        st != TD_OK ? td_last_error() : "wrong", bad);
            }
            st = td_all_reduce(g, all, (td_reduce_op_t)op);
            FIRST_BAD(all, c * n, ck_reduce(dt, op, n, i), &bad);
            calls++;
            if (st != TD_OK || bad >= 0) {
                bad_calls++;
                fprintf(stderr, "rank %d: chunks: all_reduce %s %s x %"
                        PRId64 ": %s [%" PRId64 "]\n", rank,
                        td_reduce_op_name((td_reduce_op_t)op),
                        td_dtype_name(dt), c * n,
                        st != TD_OK ? td_last_error() : "wrong", bad);
            }
        }
        /* broadcast from the last rank */
        for (int64_t e = 0; e < c * n; e++) {
            set(all, e, rank == n - 1 ? ck_val(dt, n - 1, e) : 0);
        }
        st = td_broadcast(g, all, n - 1);
        FIRST_BAD(all, c * n, ck_val(dt, n - 1, i), &bad);
        calls++;
        if (st != TD_OK || bad >= 0) {
            bad_calls++;
            fprintf(stderr, "rank %d: chunks: broadcast %s x %" PRId64
                    ": %s [%" PRId64 "]\n", rank, td_dtype_name(dt), c * n,
                    st != TD_OK ? td_last_error() : "wrong", bad);
        }
        td_tensor_release(in);
        td_tensor_release(all);
    }
    td_coll_set_algo(NULL);
    check(bad_calls == 0, "chunks", "%d of %d calls failed (details on "
          "stderr)", bad_calls, calls);
    return 0;
}

/* ITERS all_reduces (sum) of 2 float32 (8 B) on the world, each checked
 * (tests/coll/test_coll.sh: the segment's waits, shm.c S10). */
static int
mode_small(int iters)
{
    td_tensor_t *t = make(2, TD_FLOAT32);
    int bad_calls = 0;

    for (int it = 0; it < iters; it++) {
        td_status_t st;

        set(t, 0, rank + it % 7);
        set(t, 1, rank);
        st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
        if (st != TD_OK ||
            get(t, 0) != (double)size * (size - 1) / 2 + size * (it % 7) ||
            get(t, 1) != (double)size * (size - 1) / 2) {
            if (bad_calls++ < 5) {
                fprintf(stderr, "rank %d: small #%d: %s (%g, %g)\n", rank, it,
                        st != TD_OK ? td_last_error() : "wrong", get(t, 0),
                        get(t, 1));
            }
        }
    }
    check(bad_calls == 0, "small", "%d of %d calls failed", bad_calls, iters);
    td_tensor_release(t);
    return 0;
}

/* transport.c N1, two ranks: a loop of short calls lengthens the
 * progress thread's nap to its longest, 1,000 us ("nap_grows"); one long
 * wait (rank 1 sleeps 300 ms before its call) brings it back to 100 us
 * ("nap_back"). The loop runs until both ranks have seen the longest
 * nap (the calls' sum tells) or for MAX_CALLS. */
static int
mode_nap(int max_calls)
{
    td_transport_t *tp = td__runtime_transport();
    td_tensor_t *t = make(1, TD_FLOAT32);
    unsigned seen = 0, now;
    int calls = 0, bad = 0, done = 0;

    while (!done && calls < max_calls) {
        unsigned us = td__transport_nap_us(tp);

        seen = us > seen ? us : seen;
        set(t, 0, seen >= 1000 ? 1 : 0);
        if (td_all_reduce(td_group_world(), t, TD_REDUCE_SUM) != TD_OK) {
            bad++;
            break;
        }
        done = get(t, 0) == 2;
        calls++;
    }
    check(bad == 0 && seen == 1000, "nap_grows", "the longest nap seen: "
          "%u us after %d calls (%d failed)", seen, calls, bad);
    if (rank == 1) {
        usleep(300000);
    }
    set(t, 0, rank);
    bad = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM) != TD_OK ||
          get(t, 0) != 1;
    now = td__transport_nap_us(tp);
    check(!bad && now == 100, "nap_back", "the nap after one long wait: "
          "%u us (call %s)", now, bad ? "failed" : "ok");
    td_tensor_release(t);
    return 0;
}

/* transport.c N2: UCX gives the worker an event fd exactly when WANT
 * (1: some thread may sleep on it; 0: busy progress with cores to spare)
 * ("wakeup_fd"), and 200 all_reduces of 8 B are exact in that
 * configuration ("wakeup_calls"). */
static int
mode_wakeup(int want)
{
    td_transport_t *tp = td__runtime_transport();
    td_tensor_t *t = make(2, TD_FLOAT32);
    int has = td__transport_has_efd(tp), bad = 0;

    check(has == want, "wakeup_fd", "the worker %s an event fd, expected "
          "%s", has ? "has" : "has no", want ? "one" : "none");
    for (int it = 0; it < 200; it++) {
        set(t, 0, rank + it);
        set(t, 1, 1);
        if (td_all_reduce(td_group_world(), t, TD_REDUCE_SUM) != TD_OK ||
            get(t, 0) != size * it + size * (size - 1) / 2 ||
            get(t, 1) != size) {
            bad++;
        }
    }
    check(bad == 0, "wakeup_calls", "%d of 200 calls wrong (%s)", bad,
          td_last_error());
    td_tensor_release(t);
    return 0;
}

/* ITERS all_reduces (sum) of N float32 on the world, each checked
 * exactly; the number of wrong calls. */
static int
reduce_loop(int iters, int64_t n)
{
    td_tensor_t *t = make(n, TD_FLOAT32);
    int bad_calls = 0;

    for (int it = 0; it < iters; it++) {
        td_status_t st;
        int64_t bad = -1;

        for (int64_t i = 0; i < n; i++) {
            set(t, i, rank * 3 + (it + i) % 5);
        }
        st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
        for (int64_t i = 0; i < n && bad < 0; i++) {
            if (get(t, i) != 3.0 * size * (size - 1) / 2 +
                             size * ((it + i) % 5)) {
                bad = i;
            }
        }
        if ((st != TD_OK || bad >= 0) && bad_calls++ < 5) {
            fprintf(stderr, "rank %d: taken %" PRId64 " floats #%d: %s [%"
                    PRId64 "]\n", rank, n, it,
                    st != TD_OK ? td_last_error() : "wrong", bad);
        }
    }
    td_tensor_release(t);
    return bad_calls;
}

/* ITERS broadcasts of N float32 on the world, the root alternating
 * (every rank both sends and receives), each checked exactly; the number
 * of wrong calls. */
static int
bcast_loop(int iters, int64_t n)
{
    td_tensor_t *t = make(n, TD_FLOAT32);
    int bad_calls = 0;

    for (int it = 0; it < iters; it++) {
        int root = it % size;
        td_status_t st;
        int64_t bad = -1;

        for (int64_t i = 0; i < n; i++) {
            set(t, i, rank == root ? root * 7 + (it + i) % 5 : -1);
        }
        st = td_broadcast(td_group_world(), t, root);
        for (int64_t i = 0; i < n && bad < 0; i++) {
            if (get(t, i) != root * 7 + (it + i) % 5) {
                bad = i;
            }
        }
        if ((st != TD_OK || bad >= 0) && bad_calls++ < 5) {
            fprintf(stderr, "rank %d: broadcast %" PRId64 " floats #%d: %s [%"
                    PRId64 "]\n", rank, n, it,
                    st != TD_OK ? td_last_error() : "wrong", bad);
        }
    }
    td_tensor_release(t);
    return bad_calls;
}

/* Small bodies from another host taken by coll's receive handler
 * (transport.c S1, match.h C13): ITERS broadcasts each of 8 B and 256 B
 * (COLL_UX_SMALL: an early one kept in its entry), the root alternating,
 * and ITERS all_reduces each of 8 B, 256 B and 1,028 B (an early one
 * above it takes the transport's buffer as before), exact; then EXPECT
 * "some" (every broadcast this rank received was taken) or "none" (ranks
 * of one host: nothing taken). The broadcasts' sends on the lean path
 * (transport.c S2): across hosts some (a send that finds the progress
 * thread holding the token goes the usual way, so not every one), none of
 * the 1,028 B loop's (header and body above LEAN_MAX); on one host none.
 * At two ranks every all_reduce of the first two sizes (but the first,
 * which may try the segment) is run as one step: across hosts one tagged
 * message each way (allreduce.c T1), on one host begun with its receive
 * posted (step.h C16); none of the third's (above COLL_PAIR_MAX):
 * "pair_all", "pair_bounded". */
static int
mode_taken(int iters, const char *expect)
{
    td_transport_t *tp = td__runtime_transport();
    uint64_t before = td__transport_taken_count(tp);
    uint64_t lean0 = td__transport_lean_count(tp), lean, lean_big;
    uint64_t taken;
    unsigned long pair0 = coll_all_reduce_pair_count(), pair, pair_big;
    unsigned long tag0 = coll_all_reduce_pair_tag_count(), tagged;
    int across = strcmp(expect, "none") != 0;
    int bad = bcast_loop(iters, 2) + bcast_loop(iters, 64);

    taken = td__transport_taken_count(tp) - before;
    lean = td__transport_lean_count(tp) - lean0;
    bad += reduce_loop(iters, 2) + reduce_loop(iters, 64);
    pair = coll_all_reduce_pair_count() - pair0;
    tagged = coll_all_reduce_pair_tag_count() - tag0;
    lean0 = td__transport_lean_count(tp);
    bad += reduce_loop(iters, 257);
    lean_big = td__transport_lean_count(tp) - lean0;
    pair_big = coll_all_reduce_pair_count() - pair0 - pair +
               coll_all_reduce_pair_tag_count() - tag0 - tagged;
    check(bad == 0, "taken_exact", "%d of %d calls wrong", bad, 5 * iters);
    check(lean_big == 0, "lean_bounded", "%" PRIu64 " sends of 1,028 B "
          "bodies took the lean path", lean_big);
    if (size == 2) {
        /* all but the first call across hosts: it tries the segment
         * first (the peer's host unknown until then, shm.c S1) */
        unsigned long one = across ? tagged : pair;

        check(one + 1 >= (unsigned long)(2 * iters) &&
              (across ? pair : tagged) == 0, "pair_all", "%lu of %d calls "
              "of 8 B and 256 B ran as one %s (%lu the other way)", one,
              2 * iters, across ? "tagged exchange" : "begun step",
              across ? pair : tagged);
        check(pair_big == 0, "pair_bounded", "%lu calls of 1,028 B ran as "
              "one step", pair_big);
    }
    if (!across) {
        check(taken == 0, "taken_none", "%" PRIu64 " bodies taken by the "
              "handler between ranks of one host", taken);
        check(lean == 0, "lean_none", "%" PRIu64 " sends took the lean "
              "path between ranks of one host", lean);
    } else {
        /* a broadcast of two: each rank received every other one */
        check(taken >= (uint64_t)iters, "taken_some", "%" PRIu64
              " bodies taken by the handler in %d broadcasts received "
              "across hosts", taken, iters);
        check(lean > 0, "lean_some", "%" PRIu64 " of %d sends across hosts "
              "took the lean path", lean, iters);
    }
    return 0;
}

/* ITERS all_reduces (sum) of 1,048,579 float32 (4 MiB a rank) with the
 * algorithm TODIST_COLL_ALGO forces, each checked exactly: the test
 * compares the bytes each algorithm moves across hosts. */
static int
mode_allreduce_big(int iters, int64_t count)
{
    td_tensor_t *t = make(count, TD_FLOAT32);
    int bad_calls = 0;

    for (int it = 0; it < iters; it++) {
        int64_t bad;
        td_status_t st;

        for (int64_t i = 0; i < count; i++) {
            set(t, i, (double)val(rank, i, TD_REDUCE_SUM));
        }
        st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
        FIRST_BAD(t, count, expect_reduce(size, i, TD_REDUCE_SUM, TD_FLOAT32),
                  &bad);
        if (st != TD_OK || bad >= 0) {
            bad_calls++;
            fprintf(stderr, "rank %d: allreduce_big: %s [%" PRId64 "]\n",
                    rank, st != TD_OK ? td_last_error() : "wrong", bad);
        }
    }
    check(bad_calls == 0, "allreduce_big", "%d of %d calls failed",
          bad_calls, iters);
    td_tensor_release(t);
    return 0;
}

/* ---- point-to-point ---------------------------------------------------------- */

static int
mode_p2p(void)
{
    td_group_t *w = td_group_world();
    td_status_t st;
    int src = -2;

    /* tags out of order: 1 sends tags 5, 6, 7; 0 receives 7, 5, 6 */
    if (rank == 1) {
        td_work_t *ws[3];

        for (int k = 0; k < 3; k++) {
            td_tensor_t *t = make(4, TD_INT32);

            td_tensor_fill_(t, 50 + k);
            td_isend(w, t, 0, 5 + k, &ws[k]);
            td_tensor_release(t);           /* the work keeps it */
        }
        for (int k = 0; k < 3; k++) {
            st = td_work_wait(ws[k], 30);
            check(st == TD_OK, "p2p_tags_out_of_order_send", "%s",
                  td_last_error());
            td_work_release(ws[k]);
        }
    } else if (rank == 0) {
        int order[3] = { 7, 5, 6 };
        int ok = 1;

        for (int k = 0; k < 3; k++) {
            td_tensor_t *t = make(4, TD_INT32);

            st = td_recv(w, t, 1, order[k], &src);
            ok &= st == TD_OK && get(t, 3) == 50 + order[k] - 5 && src == 1;
            td_tensor_release(t);
        }
        check(ok, "p2p_tags_out_of_order", "a receive got the wrong message");
    }

    /* TD_ANY_SOURCE: 1 and 2 send to 0, which reports who sent */
    if (rank == 1 || rank == 2) {
        td_tensor_t *t = make(3, TD_FLOAT64);

        td_tensor_fill_(t, rank * 10);
        st = td_send(w, t, 0, 9);
        check(st == TD_OK, "p2p_any_source_send", "%s", td_last_error());
        td_tensor_release(t);
    } else if (rank == 0) {
        int seen = 0, ok = 1;

        for (int k = 0; k < 2; k++) {
            td_tensor_t *t = make(3, TD_FLOAT64);

            st = td_recv(w, t, TD_ANY_SOURCE, 9, &src);
            ok &= st == TD_OK && (src == 1 || src == 2) &&
                  get(t, 0) == src * 10;
            seen |= 1 << src;
            td_tensor_release(t);
        }
        check(ok && seen == 6, "p2p_any_source", "senders seen 0x%x", seen);
    }

    /* td_irecv from TD_ANY_SOURCE: td_work_test before and after,
     * td_work_source names the sender */
    if (rank == 2) {
        td_tensor_t *t = make(2, TD_INT64);

        td_tensor_fill_(t, 5);
        st = td_send(w, t, 0, 11);
        td_tensor_release(t);
    } else if (rank == 0) {
        td_tensor_t *t = make(2, TD_INT64);
        td_work_t *wk = NULL;
        int done = -1, before = -1, from = -1;

        st = td_irecv(w, t, TD_ANY_SOURCE, 11, &wk);
        td_work_test(wk, &before);
        if (st == TD_OK) {
            st = td_work_wait(wk, 30);
        }
        td_work_test(wk, &done);
        td_work_source(wk, &from);
        check(st == TD_OK && done == 1 && from == 2 && get(t, 1) == 5,
              "p2p_irecv_any_source", "st %d done %d from %d (test before: "
              "%d)", st, done, from, before);
        td_work_release(wk);
        td_tensor_release(t);
    }

    /* many in flight: 200 isends each way between 0 and 1, irecv'd
     * before or after */
    if (rank <= 1) {
        enum { M = 200 };
        td_work_t *sw[M], *rw[M];
        td_tensor_t *rs[M];
        int peer = 1 - rank, ok = 1;

        for (int k = 0; k < M; k++) {
            td_tensor_t *t = make(16, TD_INT64);

            td_tensor_fill_(t, rank * 1000 + k);
            ok &= td_isend(w, t, peer, 100 + k, &sw[k]) == TD_OK;
            td_tensor_release(t);
        }
        for (int k = M - 1; k >= 0; k--) {
            rs[k] = make(16, TD_INT64);
            ok &= td_irecv(w, rs[k], peer, 100 + k, &rw[k]) == TD_OK;
        }
        for (int k = 0; k < M; k++) {
            ok &= td_work_wait(rw[k], 30) == TD_OK &&
                  get(rs[k], 15) == peer * 1000 + k;
            ok &= td_work_wait(sw[k], 30) == TD_OK;
            td_work_release(rw[k]);
            td_work_release(sw[k]);
            td_tensor_release(rs[k]);
        }
        check(ok, "p2p_many_in_flight", "%s", td_last_error());
    }

    /* 0 B and 256 MiB */
    if (rank <= 1) {
        td_tensor_t *z = make(0, TD_FLOAT32);
        td_tensor_t *big = make((int64_t)64 << 20, TD_FLOAT32);   /* 256 MiB */
        float *p = td_tensor_data(big);
        int ok;

        if (rank == 0) {
            st = td_send(w, z, 1, 1);
            check(st == TD_OK, "p2p_zero_bytes", "%s", td_last_error());
            for (int64_t i = 0; i < ((int64_t)64 << 20); i += 4093) {
                p[i] = (float)(i % 1000);
            }
            p[((int64_t)64 << 20) - 1] = 7;
            st = td_send(w, big, 1, 2);
            check(st == TD_OK, "p2p_256MiB_send", "%s", td_last_error());
        } else {
            st = td_recv(w, z, 0, 1, &src);
            check(st == TD_OK && src == 0, "p2p_zero_bytes", "%s",
                  td_last_error());
            st = td_recv(w, big, 0, 2, NULL);
            ok = st == TD_OK && p[((int64_t)64 << 20) - 1] == 7;
            for (int64_t i = 0; ok && i < ((int64_t)64 << 20); i += 4093) {
                ok &= p[i] == (float)(i % 1000);
            }
            check(ok, "p2p_256MiB_send", "%s", st ? td_last_error() :
                  "wrong data");
        }
        td_tensor_release(z);
        td_tensor_release(big);
    }

    /* size and dtype mismatch: an error on both sides naming both shapes */
    if (rank <= 1) {
        td_tensor_t *a = make(rank == 0 ? 8 : 4, TD_FLOAT32);
        td_tensor_t *b = make(4, rank == 0 ? TD_FLOAT32 : TD_INT32);

        st = rank == 0 ? td_send(w, a, 1, 3) : td_recv(w, a, 0, 3, NULL);
        check(st == TD_ERR_SHAPE && strstr(td_last_error(), "[8]") &&
              strstr(td_last_error(), "[4]"), "p2p_size_mismatch",
              "%d: %s", st, td_last_error());
        st = rank == 0 ? td_send(w, b, 1, 4) : td_recv(w, b, 0, 4, NULL);
        check(st == TD_ERR_DTYPE && strstr(td_last_error(), "int32") &&
              strstr(td_last_error(), "float32"), "p2p_dtype_mismatch",
              "%d: %s", st, td_last_error());
        /* and the pair still works after */
        {
            td_tensor_t *c = make(4, TD_FLOAT32);

            td_tensor_fill_(c, rank == 0 ? 42 : 0);
            st = rank == 0 ? td_send(w, c, 1, 5) : td_recv(w, c, 0, 5, NULL);
            check(st == TD_OK && get(c, 3) == 42, "p2p_after_mismatch",
                  "%d: %s", st, td_last_error());
            td_tensor_release(c);
        }
        td_tensor_release(a);
        td_tensor_release(b);
    }

    /* bad input: clear errors, nothing sent */
    if (rank == 0) {
        td_tensor_t *t = make(6, TD_FLOAT32), *tt = NULL, *cu = NULL;
        float blob[4];
        int64_t shape[2] = { 2, 3 };
        td_device_t cuda = { TD_DEVICE_CUDA, 0 };
        td_work_t *wk = NULL;

        check(td_send(w, NULL, 1, 0) == TD_ERR_INVALID &&
              strstr(td_last_error(), "NULL"), "bad_null_tensor", "%s",
              td_last_error());
        check(td_send(w, t, size, 0) == TD_ERR_RANGE &&
              strstr(td_last_error(), "rank"), "bad_rank", "%s",
              td_last_error());
        check(td_recv(w, t, -5, 0, NULL) == TD_ERR_RANGE, "bad_src_rank",
              "%s", td_last_error());
        check(td_isend(w, t, 1, -1, &wk) == TD_ERR_RANGE &&
              strstr(td_last_error(), "tag"), "bad_tag", "%s",
              td_last_error());
        td_tensor_view(t, shape, 2, &tt);
        {
            td_tensor_t *tr = NULL;

            td_tensor_transpose(tt, 0, 1, &tr);
            check(td_all_reduce(w, tr, TD_REDUCE_SUM) == TD_ERR_INVALID &&
                  strstr(td_last_error(), "contiguous"), "bad_noncontiguous",
                  "%s", td_last_error());
            td_tensor_release(tr);
        }
        check(td_broadcast(w, t, size + 3) == TD_ERR_RANGE &&
              strstr(td_last_error(), "root"), "bad_root", "%s",
              td_last_error());
        check(td_all_reduce(w, t, TD_REDUCE_BXOR) == TD_ERR_INVALID,
              "bad_op_on_float", "%s", td_last_error());
        if (td_tensor_from_blob(blob, (int64_t[]){ 4 }, 1, TD_FLOAT32, cuda,
                                NULL, NULL, &cu) == TD_OK) {
            check(td_all_reduce(w, cu, TD_REDUCE_SUM) == TD_ERR_UNSUPPORTED &&
                  strstr(td_last_error(), "cuda:0"), "bad_device", "%s",
                  td_last_error());
            td_tensor_release(cu);
        } else {
            check(1, "bad_device", "no cuda tensor can be made here");
        }
        td_tensor_release(tt);
        td_tensor_release(t);
    }
    /* a group this rank is not in */
    {
        int r[1] = { 1 };
        td_group_t *g;
        td_tensor_t *t = make(1, TD_FLOAT32);

        td_group_new(r, 1, &g);
        if (rank == 0) {
            check(td_all_reduce(g, t, TD_REDUCE_SUM) == TD_ERR_STATE &&
                  td_group_rank(g) == -1, "bad_not_member", "%s",
                  td_last_error());
        }
        td_group_destroy(g);
        td_tensor_release(t);
    }
    td_group_barrier(w);
    return 0;
}

/* ---- subgroups concurrently with the world group and RPC ------------------- */

/* An isend of COUNT floats whose sender stops (SIGSTOP, the whole
 * process: its progress thread too) right after td_isend returned, to a
 * receiver already waiting for it in td_work_wait (a thread of rank 0;
 * rank 1 is told to send only once that thread is in the wait): the
 * receive completes while the sender is stopped, so nothing of the
 * message waits for the sender's progress (a pipeline stage sends and
 * goes straight into a matrix product). 32 KiB go eager through UCX's
 * shared memory; 64 KiB and more are offered in place and read by the
 * waiting receiver (cma.h C12; before it, the offer was declined and the
 * body resent by the sender when it next progressed). Rank 0 receives,
 * rank 1 sends. A rank 0 whose wait got nothing in 10 s resumes rank 1
 * anyway and fails. */
typedef struct {
    td_work_t  *wk;
    td_status_t st;
    char        err[256];
} stopped_wait_t;

static void *
stopped_waiter(void *arg)
{
    stopped_wait_t *sw = arg;

    sw->st = td_work_wait(sw->wk, 10);
    snprintf(sw->err, sizeof(sw->err), "%s",
             sw->st != TD_OK ? td_last_error() : "ok");
    return NULL;
}

/* Wait until rank 1 (pid PID) is stopped: its state in /proc is T. */
static int
wait_stopped(long long pid)
{
    char path[64], buf[512];
    double t0 = now_s();

    snprintf(path, sizeof(path), "/proc/%lld/stat", pid);
    while (now_s() - t0 < 30) {
        FILE *f = fopen(path, "r");
        char *e;
        int stopped = 0;

        if (f == NULL) {
            return 0;
        }
        if (fgets(buf, sizeof(buf), f) != NULL &&
            (e = strrchr(buf, ')')) != NULL && e[1] == ' ') {
            stopped = e[2] == 'T';
        }
        fclose(f);
        if (stopped) {
            return 1;
        }
        usleep(1000);
    }
    return 0;
}

/* X11: N messages of COUNT floats from rank 0 to rank 1, which counts the
 * UCX events its transport saw while they came: one a message where each
 * took one shared-memory segment (UCX's own 8 KiB segments: 4 for 32 KiB,
 * 7 for 56 KiB). Besides them only a keepalive or two may come. */
static int
mode_p2p_segments(int64_t count)
{
    enum { N = 40 };
    td_group_t *w = td_group_world();
    td_tensor_t *go = make(1, TD_INT32), *t = make(count, TD_FLOAT32);
    td_status_t st = TD_OK;
    uint64_t before = 0, events;
    int64_t bad = -1;

    if (rank == 0) {
        st = td_recv(w, go, 1, 1, NULL);
        for (int k = 0; k < N && st == TD_OK; k++) {
            for (int64_t j = 0; j < count; j++) {
                set(t, j, (double)((k + j) % 977));
            }
            st = td_send(w, t, 1, 2);
        }
        check(st == TD_OK, "p2p_segments_send", "%s",
              st ? td_last_error() : "ok");
    } else if (rank == 1) {
        before = td__transport_ucx_events(coll_transport());
        st = td_send(w, go, 0, 1);
        for (int k = 0; k < N && st == TD_OK; k++) {
            st = td_recv(w, t, 0, 2, NULL);
            if (st == TD_OK) {
                FIRST_BAD(t, count, (double)((k + i) % 977), &bad);
                st = bad < 0 ? TD_OK : TD_ERR_PROTOCOL;
            }
        }
        events = td__transport_ucx_events(coll_transport()) - before;
        check(st == TD_OK, "p2p_segments_recv", "%s (first bad element "
              "%" PRId64 ")", st ? td_last_error() : "ok", bad);
        check(events <= N + N / 2, "p2p_segments_one_each", "%d messages of "
              "%" PRId64 " B took %" PRIu64 " UCX events (one segment each "
              "would be %d)", N, count * 4, events, N);
        printf("# p2p_segments: %d messages of %" PRId64 " B, %" PRIu64
               " UCX events\n", N, count * 4, events);
    }
    td_tensor_release(go);
    td_tensor_release(t);
    return n_fail ? 1 : 0;
}

static int
mode_p2p_stopped_sender(int64_t count)
{
    td_group_t *w = td_group_world();
    td_tensor_t *pid = make(1, TD_INT64), *go = make(1, TD_INT32);
    td_tensor_t *t = make(count, TD_FLOAT32);
    td_work_t *wk = NULL;
    td_status_t st;
    int64_t bad;

    if (rank == 1) {
        set(pid, 0, (double)getpid());
        st = td_send(w, pid, 0, 1);
        if (st == TD_OK) {
            st = td_recv(w, go, 0, 2, NULL);
        }
        for (int64_t i = 0; i < count; i++) {
            set(t, i, (double)(i % 977));
        }
        if (st == TD_OK) {
            st = td_isend(w, t, 0, 3, &wk);
        }
        if (st == TD_OK) {
            /* td_isend only queues the offer while another thread holds
             * the progress token: stopped before it left, no receiver
             * could read it. Wait until the transport has sent it. */
            st = td__transport_flush(coll_transport(), 10);
        }
        if (st == TD_OK) {
            raise(SIGSTOP);             /* rank 0 sends SIGCONT */
            st = td_work_wait(wk, 30);
        }
        check(st == TD_OK, "p2p_stopped_sender_send", "%s",
              st ? td_last_error() : "ok");
    } else if (rank == 0) {
        stopped_wait_t sw = { NULL, TD_ERR_STATE, "not waited" };
        td_status_t st2;
        char err2[256] = "not waited";
        pthread_t th;
        int started = 0, done = 0;

        st = td_recv(w, pid, 1, 1, NULL);
        if (st == TD_OK) {
            st = td_irecv(w, t, 1, 3, &wk);
        }
        if (st == TD_OK) {
            sw.wk = wk;
            started = pthread_create(&th, NULL, stopped_waiter, &sw) == 0;
        }
        if (started) {
            while (coll_work_waiters(wk) == 0 && !td_work_test(wk, &done) &&
                   !done) {
                usleep(100);
            }
            st = td_send(w, go, 1, 2);
            check(wait_stopped((long long)get(pid, 0)),
                  "p2p_stopped_sender_is_stopped", "rank 1 (pid %lld) did "
                  "not stop", (long long)get(pid, 0));
            pthread_join(th, NULL);
            st = sw.st;
            kill((pid_t)get(pid, 0), SIGCONT);
            if (st != TD_OK) {
                /* not a pass, but say whether it came after the SIGCONT */
                st2 = td_work_wait(wk, 30);
                snprintf(err2, sizeof(err2), "%s",
                         st2 != TD_OK ? td_last_error() : "ok");
            }
        }
        FIRST_BAD(t, count, (double)(i % 977), &bad);
        check(started && st == TD_OK && bad < 0, "p2p_stopped_sender_recv",
              "%s; the receive of %" PRId64 " bytes did not complete while "
              "its sender was stopped (after SIGCONT: %s; first bad element "
              "%" PRId64 ")", sw.err, count * 4, err2, bad);
    }
    if (wk != NULL) {
        td_work_release(wk);
    }
    td_tensor_release(pid);
    td_tensor_release(go);
    td_tensor_release(t);
    return 0;
}

/* Offers of 256 KiB to irecvs nobody waits for yet (cma.h C17): after
 * one read by a waiter (which checks the sender's pid), each is read at
 * once by the receiver's token holder, not declined; the bodies are
 * intact and every send completes while the receiver has not waited. */
static int
mode_p2p_held_offer(void)
{
    enum { N = 4 };
    const int64_t count = 65536;
    td_group_t *w = td_group_world();
    td_tensor_t *go = make(1, TD_INT32), *t[N + 1];
    td_work_t *wk[N] = { NULL };
    td_status_t st;
    unsigned long before = 0, after = 0;
    int done = 0;
    int64_t bad = -1;

    for (int i = 0; i <= N; i++) {
        t[i] = make(count, TD_FLOAT32);
        if (rank == 1) {
            for (int64_t k = 0; k < count; k++) {
                set(t[i], k, (double)((k + i) % 977));
            }
        }
    }
    if (rank == 1) {
        st = td_send(w, t[0], 0, 10);                   /* a waiter reads */
        if (st == TD_OK) {
            st = td_recv(w, go, 0, 11, NULL);
        }
        for (int i = 1; i <= N && st == TD_OK; i++) {
            st = td_isend(w, t[i], 0, 11 + i, &wk[i - 1]);
            if (st == TD_OK) {
                st = td_work_wait(wk[i - 1], 30);
            }
        }
        check(st == TD_OK, "held_offer_sends", "%s",
              st ? td_last_error() : "ok");
        st = td_send(w, go, 0, 20);                     /* all sent */
    } else if (rank == 0) {
        st = td_recv(w, t[0], 1, 10, NULL);
        for (int i = 1; i <= N && st == TD_OK; i++) {
            st = td_irecv(w, t[i], 1, 11 + i, &wk[i - 1]);
        }
        before = coll_cma_holder_reads();
        if (st == TD_OK) {
            st = td_send(w, go, 1, 11);
        }
        if (st == TD_OK) {
            /* not one wait on the irecvs: rank 1's sends completed, so
             * someone here read each offer or took its body */
            st = td_recv(w, go, 1, 20, NULL);
        }
        after = coll_cma_holder_reads();
        for (int i = 0; i < N && st == TD_OK; i++) {
            st = td_work_test(wk[i], &done);
            if (st == TD_OK && !done) {
                st = TD_ERR_STATE;
            }
        }
        for (int j = 1; j <= N && st == TD_OK && bad < 0; j++) {
            FIRST_BAD(t[j], count, (double)((i + j) % 977), &bad);
        }
        check(st == TD_OK && bad < 0, "held_offer_recv", "%s (first bad "
              "element %" PRId64 ")", st ? "not all done" : "ok", bad);
        check(after - before == N, "held_offer_read_by_holder", "%lu of %d "
              "offers read by the token holder", after - before, N);
    }
    for (int i = 0; i < N; i++) {
        if (wk[i] != NULL) {
            td_work_release(wk[i]);
        }
    }
    for (int i = 0; i <= N; i++) {
        td_tensor_release(t[i]);
    }
    td_tensor_release(go);
    return 0;
}

/* The offer arrives after the receiver's first wait gave up (its
 * timeout): GAP_MS between telling the sender and waiting again (0: the
 * second wait is already there, C12; > 0: nobody waits, the offer is
 * declined and its body sent, C10). Either way the receive completes. */
static int
mode_p2p_late_offer(int64_t count, int gap_ms)
{
    td_group_t *w = td_group_world();
    td_tensor_t *go = make(1, TD_INT32);
    td_tensor_t *t = make(count, TD_FLOAT32);
    td_work_t *wk = NULL;
    td_status_t st, st1 = TD_ERR_STATE;
    char err1[256] = "not waited";
    int64_t bad;

    if (rank == 1) {
        for (int64_t i = 0; i < count; i++) {
            set(t, i, (double)(i % 977));
        }
        st = td_recv(w, go, 0, 2, NULL);
        if (st == TD_OK) {
            st = td_isend(w, t, 0, 3, &wk);
        }
        if (st == TD_OK) {
            st = td_work_wait(wk, 30);
        }
        check(st == TD_OK, "p2p_late_offer_send", "%s",
              st ? td_last_error() : "ok");
    } else if (rank == 0) {
        st = td_irecv(w, t, 1, 3, &wk);
        if (st == TD_OK) {
            st1 = td_work_wait(wk, 0.2);        /* nothing sent yet */
            snprintf(err1, sizeof(err1), "%s",
                     st1 != TD_OK ? td_last_error() : "ok");
            st = td_send(w, go, 1, 2);
        }
        if (st == TD_OK && gap_ms > 0) {
            usleep((useconds_t)gap_ms * 1000);
        }
        if (st == TD_OK) {
            st = td_work_wait(wk, 30);
        }
        FIRST_BAD(t, count, (double)(i % 977), &bad);
        check(st1 == TD_ERR_TIMEOUT, "p2p_late_offer_first_wait",
              "the first wait returned %s, not a timeout", err1);
        check(st == TD_OK && bad < 0, "p2p_late_offer_recv", "%s (first bad "
              "element %" PRId64 ")", st ? td_last_error() : "ok", bad);
    }
    if (wk != NULL) {
        td_work_release(wk);
    }
    td_tensor_release(go);
    td_tensor_release(t);
    return 0;
}

static td_status_t
fn_twice(void *arg, const td_rpc_call_info_t *info, const td_rpc_list_t *args,
         td_rpc_list_t *result)
{
    int64_t v = 0;

    (void)arg;
    (void)info;
    td_rpc_list_int(args, 0, &v);
    return td_rpc_list_add_int(result, 2 * v);
}

typedef struct {
    td_group_t *g;
    int         ok;
    int         rounds;
    int         rpc;      /* make RPC calls instead */
} conc_t;

static void *
conc_main(void *arg)
{
    conc_t *c = arg;

    c->ok = 1;
    for (int k = 0; k < c->rounds; k++) {
        if (c->rpc) {
            td_rpc_list_t *a = NULL, *res = NULL;
            int64_t v = 0;

            td_rpc_list_create(&a);
            td_rpc_list_add_int(a, k);
            if (td_rpc_sync((rank + 1) % size, "twice", a, 30, &res) != TD_OK ||
                td_rpc_list_int(res, 0, &v) != TD_OK || v != 2 * k) {
                c->ok = 0;
            }
            td_rpc_list_free(a);
            td_rpc_list_free(res);
            continue;
        }
        int n = td_group_size(c->g);
        int64_t cnt = k % 2 ? 70000 : 5;        /* ring and rd */
        td_tensor_t *t = make(cnt, TD_FLOAT32);

        for (int64_t i = 0; i < cnt; i++) {
            set(t, i, td_group_rank(c->g) + k + i % 3);
        }
        if (td_all_reduce(c->g, t, TD_REDUCE_SUM) != TD_OK) {
            fprintf(stderr, "rank %d: concurrent: %s\n", rank,
                    td_last_error());
            c->ok = 0;
        }
        for (int64_t i = 0; i < cnt && c->ok; i++) {
            c->ok &= get(t, i) == n * (n - 1) / 2 + n * (k + i % 3);
        }
        td_tensor_release(t);
    }
    return NULL;
}

static int
mode_concurrent(void)
{
    int even[2] = { 0, 2 }, odd[2] = { 1, 3 };
    td_group_t *ge, *go;
    conc_t c[3];
    pthread_t th[3];
    td_work_t *wk[10];
    td_tensor_t *ts[10];
    int ok = 1;

    td_group_new(even, 2, &ge);
    td_group_new(odd, 2, &go);
    c[0] = (conc_t){ rank % 2 == 0 ? ge : go, 0, 40, 0 };
    c[1] = (conc_t){ td_group_world(), 0, 40, 0 };
    c[2] = (conc_t){ NULL, 0, 200, 1 };
    for (int i = 0; i < 3; i++) {
        pthread_create(&th[i], NULL, conc_main, &c[i]);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
    }
    check(c[0].ok, "concurrent_subgroup", "subgroup all_reduce wrong");
    check(c[1].ok, "concurrent_world", "world all_reduce wrong");
    check(c[2].ok, "concurrent_rpc", "rpc wrong");
    /* async: 10 all_reduces queued on the subgroup, completed in order */
    for (int k = 0; k < 10; k++) {
        ts[k] = make(1000, TD_INT64);
        td_tensor_fill_(ts[k], k + rank);
        wk[k] = NULL;
        ok &= td_all_reduce_async(c[0].g, ts[k], TD_REDUCE_SUM, &wk[k]) ==
              TD_OK;
    }
    for (int k = 0; k < 10; k++) {
        int pr = rank % 2 == 0 ? 0 + 2 : 1 + 3;

        /* (a failed call leaves no handle to wait for) */
        ok &= wk[k] != NULL && td_work_wait(wk[k], 60) == TD_OK &&
              get(ts[k], 999) == 2 * k + pr;
        if (wk[k] != NULL) {
            td_work_release(wk[k]);
        }
        td_tensor_release(ts[k]);
    }
    check(ok, "concurrent_async_queue", "%s", td_last_error());

    /* every _async entry point once on the world, queued back to back,
     * then waited for in reverse (they complete in issue order anyway) */
    {
        td_group_t *w = td_group_world();
        int n = size;
        td_work_t *aw[9];
        td_tensor_t *b = make(5, TD_INT32), *r = make(5, TD_INT32);
        td_tensor_t *gi = make(3, TD_INT32), *go_ = make(3 * n, TD_INT32);
        td_tensor_t *ga = make(3 * n, TD_INT32), *sc = make(3, TD_INT32);
        td_tensor_t *rs = make(3, TD_INT32), *a2a = make(3 * n, TD_INT32);
        td_tensor_t *gat = make(3 * n, TD_INT32);
        int done = 0, okk = 1;

        td_tensor_fill_(b, rank == 0 ? 77 : 0);
        td_tensor_fill_(r, rank + 1);
        td_tensor_fill_(gi, rank);
        for (int64_t i = 0; i < 3 * n; i++) {
            set(go_, i, (double)(i / 3));
        }
        okk &= td_broadcast_async(w, b, 0, &aw[0]) == TD_OK;
        okk &= td_reduce_async(w, r, 0, TD_REDUCE_SUM, &aw[1]) == TD_OK;
        okk &= td_all_gather_async(w, ga, gi, &aw[2]) == TD_OK;
        okk &= td_gather_async(w, rank == 0 ? gat : NULL, gi, 0, &aw[3]) ==
               TD_OK;
        okk &= td_scatter_async(w, sc, rank == 0 ? go_ : NULL, 0, &aw[4]) ==
               TD_OK;
        okk &= td_reduce_scatter_async(w, rs, go_, TD_REDUCE_SUM, &aw[5]) ==
               TD_OK;
        okk &= td_all_to_all_async(w, a2a, go_, &aw[6]) == TD_OK;
        okk &= td_group_barrier_async(w, &aw[7]) == TD_OK;
        okk &= td_all_reduce_async(w, gi, TD_REDUCE_MAX, &aw[8]) == TD_OK;
        for (int k = 8; k >= 0; k--) {
            okk &= td_work_wait(aw[k], 60) == TD_OK;
            td_work_test(aw[k], &done);
            okk &= done == 1;
            td_work_release(aw[k]);
        }
        okk &= get(b, 4) == 77;
        okk &= rank != 0 || get(r, 4) == n * (n + 1) / 2;
        okk &= get(ga, 3 * n - 1) == n - 1;
        okk &= rank != 0 || get(gat, 3 * n - 1) == n - 1;
        okk &= get(sc, 2) == rank;
        okk &= get(rs, 0) == n * rank;
        okk &= get(a2a, 3 * n - 1) == rank;
        okk &= get(gi, 0) == n - 1;
        check(okk, "async_every_collective", "%s", td_last_error());
        td_tensor_release(b);
        td_tensor_release(r);
        td_tensor_release(gi);
        td_tensor_release(go_);
        td_tensor_release(ga);
        td_tensor_release(sc);
        td_tensor_release(rs);
        td_tensor_release(a2a);
        td_tensor_release(gat);
    }
    td_group_destroy(ge);
    td_group_destroy(go);
    return 0;
}

/* ---- mismatches ----------------------------------------------------------------- */

static void
mismatch_case(const char *name, int odd_rank)
{
    int ranks[16];
    td_group_t *g;
    td_tensor_t *t = make(16, TD_FLOAT32), *o = make(16 * size, TD_FLOAT32);
    td_tensor_t *ti = make(16, TD_INT32), *t8 = make(8, TD_FLOAT32);
    td_status_t st = TD_OK, st2;
    int me_odd = rank == odd_rank;
    char err[1024];

    for (int i = 0; i < size; i++) {
        ranks[i] = i;
    }
    td_group_new(ranks, size, &g);
    if (strcmp(name, "mismatch_collective") == 0) {
        st = me_odd ? td_all_gather(g, o, t)
                    : td_all_reduce(g, t, TD_REDUCE_SUM);
    } else if (strcmp(name, "mismatch_size") == 0) {
        st = td_all_reduce(g, me_odd ? t8 : t, TD_REDUCE_SUM);
    } else if (strcmp(name, "mismatch_dtype") == 0) {
        st = td_all_reduce(g, me_odd ? ti : t, TD_REDUCE_SUM);
    } else if (strcmp(name, "mismatch_op") == 0) {
        st = td_all_reduce(g, t, me_odd ? TD_REDUCE_MAX : TD_REDUCE_SUM);
    } else if (strcmp(name, "mismatch_root") == 0) {
        st = td_broadcast(g, t, me_odd ? 1 : 0);
    }
    snprintf(err, sizeof(err), "%s", td_last_error());
    /* The call itself, or (for a root whose sends completed before the
     * others noticed) the next one on the group, fails. */
    st2 = td_group_barrier(g);
    if (st == TD_OK) {
        st = st2;
        snprintf(err, sizeof(err), "%s", td_last_error());
    }
    check(st == TD_ERR_INVALID && strstr(err, "mismatched collectives") &&
          strstr(err, "rank"), name, "%d: %s", st, err);
    printf("# rank %d %s: %s\n", rank, name, err);
    td_group_destroy(g);
    td_tensor_release(t);
    td_tensor_release(o);
    td_tensor_release(ti);
    td_tensor_release(t8);
}

/* Rank LATE never calls an all_reduce the others call: each of them
 * fails with TD_ERR_TIMEOUT naming exactly LATE, whichever waiting rank
 * reports first (the rank one waits for may be waiting itself:
 * recursive doubling's partner, the segment's handshake through rank 0;
 * issue 36). On the group's first call, or (WARM) after one call. Rank
 * FIRST calls at once and the other waiting ranks 0.3 s later, so its
 * deadline passes first and its own report is the one every rank gets
 * (which rank that is only picks the path; the check is the same). Ends
 * with every rank in td_barrier, so cases do not overlap, and only then
 * destroys G: LATE is late, not gone (a member that destroyed G would
 * answer the others' messages at once, naming itself: match.h C14). */
static void
late_case(const char *name, int late, int warm, int first)
{
    int ranks[16];
    td_group_t *g;
    td_tensor_t *t = make(4, TD_FLOAT32);
    td_status_t st;

    for (int i = 0; i < size; i++) {
        ranks[i] = i;
    }
    td_group_new(ranks, size, &g);
    if (warm) {
        td_tensor_fill_(t, 1);
        st = td_all_reduce(g, t, TD_REDUCE_SUM);
        if (st != TD_OK || get(t, 3) != size) {
            check(0, name, "warm-up: %d: %s", st, td_last_error());
        }
    }
    td_coll_set_timeout(1.5);
    if (rank != late) {
        char want[48];
        const char *e, *at;
        double t0;
        size_t n;

        if (rank != first) {
            usleep(300000);
        }
        t0 = now_s();
        st = td_all_reduce(g, t, TD_REDUCE_SUM);
        e = td_last_error();
        n = (size_t)snprintf(want, sizeof(want), "waiting for rank(s) %d",
                             late);
        at = strstr(e, want);
        /* LATE and no other: the list ends right after it */
        check(st == TD_ERR_TIMEOUT && at != NULL &&
              (at[n] == '\0' || at[n] == ' ') && now_s() - t0 < 30, name,
              "want \"%s\" alone; got %d: %s", want, st, e);
        printf("# rank %d %s: %s\n", rank, name, e);
    }
    td_coll_set_timeout(60);
    td_barrier(60);
    td_group_destroy(g);
    td_tensor_release(t);
}

/* late_case on the first call with the last rank late, each waiting
 * rank reporting first in turn (late_first_byK); on a warmed group; and
 * with rank 1 late, the last rank reporting (on the segment it waits for
 * rank 0's decision, and rank 0 for rank 1). */
static int
mode_late_names(void)
{
    for (int k = 0; k < size - 1; k++) {
        char name[32];

        snprintf(name, sizeof(name), "late_first_by%d", k);
        late_case(name, size - 1, 0, k);
    }
    late_case("late_warm", size - 1, 1, 0);
    late_case("late_first_rank1", 1, 0, size - 1);
    return 0;
}

static int
mode_mismatch(void)
{
    mismatch_case("mismatch_collective", size - 1);
    mismatch_case("mismatch_size", 1);
    mismatch_case("mismatch_dtype", size - 1);
    mismatch_case("mismatch_op", 0);
    mismatch_case("mismatch_root", size - 1);
    /* the world group still works after all that */
    {
        td_tensor_t *t = make(3, TD_INT64);

        td_tensor_fill_(t, 1);
        check(td_all_reduce(td_group_world(), t, TD_REDUCE_SUM) == TD_OK &&
              get(t, 2) == size, "mismatch_world_still_works", "%s",
              td_last_error());
        td_tensor_release(t);
    }
    late_case("timeout_names_ranks", size - 1, 0, 0);
    return 0;
}

/* ---- point-to-point through the mailboxes (mbox.c) -------------------- */

/* Ranks 0 and 1. After one exchange each way small messages go through
 * the receiver's mailbox (the shell test checks the "attached" lines):
 * their order holds across mailbox and transport messages of one tag
 * (M2, M3: 24 isends of mixed sizes, more than the slots, received late);
 * a mismatch fails both sides naming both shapes; a receiver and a sender
 * that sleep are woken (M5); a message dropped unreceived (its group
 * destroyed) fails its send (M6); a size of MBOX_BODY and one past it. */
static int
mode_mbox(void)
{
    td_group_t *w = td_group_world(), *g = NULL;
    td_status_t st;
    int peer = 1 - rank, ok = 1;

    if (rank > 1) {
        return 0;
    }
    /* warm-up: the first message each way carries the inbox offer */
    for (int k = 0; k < 2; k++) {
        td_tensor_t *t = make(2, TD_FLOAT32);

        td_tensor_fill_(t, 7);
        st = (rank == k) ? td_send(w, t, peer, 1) : td_recv(w, t, peer, 1,
                                                             NULL);
        ok &= st == TD_OK && get(t, 1) == 7;
        td_tensor_release(t);
    }
    check(ok, "mbox_warm_up", "%s", td_last_error());

    /* order across the two paths: one tag, sizes around MBOX_BODY and
     * the single-copy threshold, all sent before any is received */
    {
        enum { M = 24 };
        static const int64_t n_of[6] = { 2, 1024, 1025, 20000, 0, 3 };
        td_work_t *wk[M];
        int good = 1;

        if (rank == 0) {
            for (int k = 0; k < M; k++) {
                td_tensor_t *t = make(n_of[k % 6], TD_INT32);

                td_tensor_fill_(t, 1000 + k);
                good &= td_isend(w, t, 1, 2, &wk[k]) == TD_OK;
                td_tensor_release(t);
            }
            for (int k = 0; k < M; k++) {
                good &= td_work_wait(wk[k], 30) == TD_OK;
                td_work_release(wk[k]);
            }
        } else {
            usleep(50000);              /* let them pile up */
            for (int k = 0; k < M; k++) {
                td_tensor_t *t = make(n_of[k % 6], TD_INT32);

                st = td_recv(w, t, 0, 2, NULL);
                good &= st == TD_OK &&
                        (n_of[k % 6] == 0 ||
                         get(t, n_of[k % 6] - 1) == 1000 + k);
                td_tensor_release(t);
            }
        }
        check(good, "mbox_order_across_paths", "%s", td_last_error());
    }

    /* a mismatch through the mailbox: both sides, both shapes */
    {
        td_tensor_t *a = make(rank == 0 ? 4 : 2, TD_FLOAT32);

        st = rank == 0 ? td_send(w, a, 1, 3) : td_recv(w, a, 0, 3, NULL);
        check(st == TD_ERR_SHAPE && strstr(td_last_error(), "[4]") &&
              strstr(td_last_error(), "[2]"), "mbox_size_mismatch",
              "%d: %s", st, td_last_error());
        td_tensor_release(a);
    }

    /* an unexpected message first (M10): A (tag 8) is drained into the
     * unexpected list by the wait for C (tag 9); B (tag 8) is sent after
     * C and waits in the mailbox. A blocking receive of tag 8 must match
     * A, though B is the one in the mailbox where its fast path looks.
     * td_isend writes B into the mailbox before it returns, and nothing
     * drains a mailbox but a wait of its receiver: rank 1 receives once
     * rank 0 said (through the store) that B is written, not after a
     * sleep that a loaded machine can outlast. */
    {
        td_tensor_t *a = make(1, TD_INT32), *b = make(1, TD_INT32),
                    *c = make(1, TD_INT32);
        td_work_t *wa = NULL, *wb = NULL;
        const char *keys[1] = { "test/mbox_unexpected_first/b_sent" };
        int good = 1;

        if (rank == 0) {
            td_tensor_fill_(a, 1);
            td_tensor_fill_(b, 2);
            good &= td_isend(w, a, 1, 8, &wa) == TD_OK;
            good &= td_send(w, c, 1, 9) == TD_OK;
            good &= td_isend(w, b, 1, 8, &wb) == TD_OK;
            good &= td_store_set(td__runtime_store(), keys[0], "1", 1) ==
                    TD_OK;
            good &= wa != NULL && td_work_wait(wa, 30) == TD_OK;
            good &= wb != NULL && td_work_wait(wb, 30) == TD_OK;
            td_work_release(wa);
            td_work_release(wb);
        } else {
            good &= td_recv(w, c, 0, 9, NULL) == TD_OK;
            good &= td_store_wait(td__runtime_store(), keys, 1, 30) ==
                    TD_OK;              /* B is in the mailbox */
            good &= td_recv(w, a, 0, 8, NULL) == TD_OK && get(a, 0) == 1;
            good &= td_recv(w, b, 0, 8, NULL) == TD_OK && get(b, 0) == 2;
        }
        check(good, "mbox_unexpected_first", "%s (got %g then %g)",
              td_last_error(), get(a, 0), get(b, 0));
        td_tensor_release(a);
        td_tensor_release(b);
        td_tensor_release(c);
    }

    /* sleepers: the receiver waits 0.3 s (asleep after 2 ms), then the
     * sender does */
    for (int k = 0; k < 2; k++) {
        td_tensor_t *t = make(1, TD_INT64);
        double t0 = now_s();

        td_tensor_fill_(t, rank == 0 ? 5 + k : 0);
        if (rank == 0) {
            if (k == 0) {
                usleep(300000);
            }
            st = td_send(w, t, 1, 4);
        } else {
            if (k == 1) {
                usleep(300000);
            }
            st = td_recv(w, t, 0, 4, NULL);
        }
        check(st == TD_OK && (rank == 0 || get(t, 0) == 5 + k),
              k == 0 ? "mbox_sleeping_receiver" : "mbox_sleeping_sender",
              "%s", td_last_error());
        printf("# rank %d: %s case took %.3f s\n", rank,
               k == 0 ? "sleeping receiver" : "sleeping sender",
               now_s() - t0);
        td_tensor_release(t);
    }

    /* MBOX_BODY bytes and one element past it, both ways */
    for (int k = 0; k < 2; k++) {
        int64_t n = k == 0 ? 1024 : 1025;
        td_tensor_t *t = make(n, TD_FLOAT32);

        td_tensor_fill_(t, rank == 0 ? 9 : 0);
        st = rank == 0 ? td_send(w, t, 1, 5) : td_recv(w, t, 0, 5, NULL);
        check(st == TD_OK && (rank == 0 || get(t, n - 1) == 9),
              k == 0 ? "mbox_body_max" : "mbox_body_max_plus_one", "%s",
              td_last_error());
        td_tensor_release(t);
    }

    /* dropped unreceived: rank 1 destroys the group with rank 0's
     * message still in its mailbox; its later receive drains it (C11:
     * a destroyed group's message), which fails rank 0's send */
    st = td_group_new((int[]){0, 1}, 2, &g);
    check(st == TD_OK, "mbox_group_new", "%s", td_last_error());
    {
        td_tensor_t *t = make(2, TD_FLOAT32);
        td_work_t *wk = NULL;

        if (rank == 0) {
            st = td_isend(g, t, 1, 6, &wk);
            td_group_barrier(w);
            if (st == TD_OK) {
                st = td_work_wait(wk, 20);
                td_work_release(wk);
            }
            check(st == TD_ERR_CANCELED &&
                  strstr(td_last_error(), "dropped") != NULL,
                  "mbox_dropped_fails_send", "%s: %s", td_status_name(st),
                  td_last_error());
            td_tensor_fill_(t, 3);
            st = td_send(w, t, 1, 7);
        } else {
            td_group_barrier(w);
            td_group_destroy(g);
            g = NULL;
            st = td_recv(w, t, 0, 7, NULL);
            check(st == TD_OK && get(t, 0) == 3, "mbox_dropped_then_recv",
                  "%s", td_last_error());
        }
        td_tensor_release(t);
    }
    if (g != NULL) {
        td_group_destroy(g);
    }
    td_group_barrier(w);
    return 0;
}

/* Rank 1 is SIGKILLed with rank 0's send waiting in its mailbox: the
 * send fails within 2 s naming it (the transport's failure detection
 * fails sends through the mailbox too, M7). */
static int
mode_mbox_kill(void)
{
    td_group_t *w = td_group_world();
    td_tensor_t *t = make(2, TD_FLOAT32);
    td_status_t st;
    double t0;

    for (int k = 0; k < 2; k++) {
        st = (rank == k) ? td_send(w, t, 1 - rank, 1)
                         : td_recv(w, t, 1 - rank, 1, NULL);
        check(st == TD_OK, "mbox_kill_warm_up", "%s", td_last_error());
    }
    td_group_barrier(w);
    if (rank == 1) {
        usleep(100000);                 /* rank 0's send is in our mailbox */
        raise(SIGKILL);
    }
    t0 = now_s();
    st = td_send(w, t, 1, 2);
    check(st == TD_ERR_PEER && strstr(td_last_error(), "rank 1") != NULL,
          "mbox_kill_send_fails_naming_it", "%s: %s", td_status_name(st),
          td_last_error());
    /* the death came 0.1 s after t0 */
    check(now_s() - t0 <= DETECT_MAX_S, "mbox_kill_by_detection", "failed %.2f s later",
          now_s() - t0);
    printf("# rank 0: the send failed %.3f s after it began: %s\n",
           now_s() - t0, td_last_error());
    td_tensor_release(t);
    return 0;
}

/* Under TODIST_FAULT=corrupt:mbox:RATE (tests/transport/test_faults.sh): after a
 * warm-up through the transport (not "mbox", so never faulted), rank 0
 * sends 60 small messages to rank 1 through its mailbox. A corrupted one
 * is rejected by rank 1's decoder and fails rank 0's send naming it
 * malformed; every other one arrives whole and in order, and none is
 * lost: rank 1 receives exactly as many as rank 0 sent successfully. */
static int
mode_mbox_fault(void)
{
    enum { K = 60 };
    td_group_t *w = td_group_world();
    td_tensor_t *t = make(2, TD_INT64), *n = make(2, TD_INT64);
    int sent = 0, failed = 0, named = 0, got = 0, bad = 0;
    td_status_t st = TD_OK;

    for (int k = 0; k < 2; k++) {
        st = (rank == k) ? td_send(w, t, 1 - rank, 1)
                         : td_recv(w, t, 1 - rank, 1, NULL);
        check(st == TD_OK, "mbox_fault_warm_up", "%s", td_last_error());
    }
    if (rank == 0) {
        for (int k = 0; k < K; k++) {
            set(t, 0, k);
            set(t, 1, -k);
            st = td_send(w, t, 1, 2);
            if (st == TD_OK) {
                sent++;
            } else {
                failed++;
                named += st == TD_ERR_PROTOCOL &&
                         strstr(td_last_error(), "malformed") != NULL;
                printf("# rank 0: send %d: %s\n", k, td_last_error());
            }
        }
        check(failed > 0 && named == failed, "mbox_fault_sender_told",
              "%d of %d sends failed, %d naming a malformed message", failed,
              K, named);
    } else {
        double last = -1;

        /* until TODIST_COLL_TIMEOUT passes with nothing more */
        while ((st = td_recv(w, t, 0, 2, NULL)) == TD_OK) {
            bad += get(t, 1) != -get(t, 0) || get(t, 0) <= last;
            last = get(t, 0);
            got++;
        }
        check(bad == 0 && got > 0 && st == TD_ERR_TIMEOUT,
              "mbox_fault_received_whole", "%d received, %d damaged or out "
              "of order, ended with %s", got, bad, td_status_name(st));
    }
    /* (a collective: through the shared segment, not faulted; rank 0
     * waits for rank 1's last receive to time out) */
    td_coll_set_timeout(30);
    set(n, 0, rank == 0 ? sent : 0);
    set(n, 1, rank == 1 ? got : 0);
    st = td_all_reduce(w, n, TD_REDUCE_SUM);
    check(st == TD_OK && get(n, 0) == get(n, 1), "mbox_fault_none_lost",
          "rank 0 sent %g, rank 1 received %g: %s", get(n, 0), get(n, 1),
          st ? td_last_error() : "ok");
    printf("# rank %d: %g sent, %d rejected, %g received\n", rank, get(n, 0),
           failed, get(n, 1));
    td_tensor_release(t);
    td_tensor_release(n);
    return 0;
}

/* ---- a member SIGKILLed mid all_reduce ---------------------------------------- */

static int
mode_kill(void)
{
    td_tensor_t *t = make(1 << 20, TD_FLOAT32);
    td_status_t st = TD_OK;
    double t_dead = 0, t_fail;
    int k;

    td_coll_set_timeout(60);
    for (k = 0; k < 1000000; k++) {
        if (rank == size - 1 && k == 20) {
            raise(SIGKILL);
        }
        if (k == 19) {
            /* It dies after its call 19, which cannot end before ours
             * began: the time from here bounds the detection delay (our
             * call 19 may itself fail: it may still wait on another rank
             * when the group breaks). */
            t_dead = now_s();
        }
        st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
        if (st != TD_OK) {
            break;
        }
    }
    t_fail = now_s();
    {
        char want[32];

        snprintf(want, sizeof(want), "rank %d", size - 1);
        check(st == TD_ERR_PEER && strstr(td_last_error(), want) != NULL,
              "kill_fails_naming_it", "%d: %s", st, td_last_error());
        check(t_dead > 0 && t_fail - t_dead <= DETECT_MAX_S, "kill_by_detection",
              "failed %.2f s after the death", t_fail - t_dead);
        printf("# rank %d: failed %.3f s after starting call 19: %s\n", rank,
               t_fail - t_dead, td_last_error());
    }
    /* later operations fail at once too */
    st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
    check(st == TD_ERR_PEER, "kill_later_ops_fail", "%d: %s", st,
          td_last_error());
    td_tensor_release(t);
    return 0;
}

/* ---- a member SIGKILLed right after td_init (issue 36) --------------------
 * Nobody ever talked to it: every other member's first all_reduce must
 * fail with TD_ERR_PEER naming it, soon after the death (its deadline,
 * 30 s here, is far later), through the segment's handshake (shm) or the
 * transport's algorithms alike. */
static int
mode_early_kill(void)
{
    td_tensor_t *t = make(4, TD_FLOAT32);
    td_status_t st;
    double t0;
    char want[32];

    if (rank == size - 1) {
        raise(SIGKILL);
    }
    td_coll_set_timeout(30);
    t0 = now_s();
    st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
    snprintf(want, sizeof(want), "rank %d ", size - 1);
    check(st == TD_ERR_PEER && strstr(td_last_error(), want) != NULL,
          "early_kill_fails_naming_it", "%s: %s", td_status_name(st),
          td_last_error());
    check(now_s() - t0 <= DETECT_MAX_S, "early_kill_by_detection", "failed %.2f s after "
          "the call began", now_s() - t0);
    printf("# rank %d: %s after %.3f s: %s\n", rank, td_status_name(st),
           now_s() - t0, td_last_error());
    td_tensor_release(t);
    return 0;
}

/* A barrier through the store (its own TCP, not UCX): no rank exits
 * while another still checks, so none is taken for dead. */
static void
store_meet(const char *name)
{
    if (td_store_barrier(td__runtime_store(), name, size, 30) != TD_OK) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, name, td_last_error());
    }
}

/* ---- a peer UCX cannot reach (transport.c L16) ---------------------------
 * Run under UCX_TLS=self, two ranks: no UCX transport connects the two
 * processes. Each rank's first all_reduce fails naming the other as
 * unreachable, and why, long before the collective timeout (before L16
 * it waited all of it: "timed out waiting for rank 1"); the next fails
 * at once with the group's first failure, and so does an RPC to it. */
static int
mode_unreachable(void)
{
    td_tensor_t *t = make(1024, TD_FLOAT32);
    td_rpc_list_t *a = NULL, *res = NULL;
    int peer = (rank + 1) % size;
    char want[32];
    td_status_t st;
    double t0;

    td_coll_set_timeout(60);
    snprintf(want, sizeof(want), "rank %d ", peer);
    t0 = now_s();
    st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
    check(st == TD_ERR_PEER && strstr(td_last_error(), want) != NULL &&
          strstr(td_last_error(), "is unreachable: UCX has no transport to "
                 "it") != NULL, "unreachable_coll_names_it", "%s: %s",
          td_status_name(st), td_last_error());
    check(now_s() - t0 <= DETECT_MAX_S, "unreachable_coll_by_detection",
          "failed %.2f s after the call began (timeout 60 s)", now_s() - t0);
    st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
    check(st == TD_ERR_PEER && strstr(td_last_error(), "is unreachable")
          != NULL, "unreachable_coll_again", "%s: %s", td_status_name(st),
          td_last_error());
    td_rpc_list_create(&a);
    td_rpc_list_add_int(a, 1);
    st = td_rpc_sync(peer, "twice", a, 30, &res);
    check(st == TD_ERR_PEER && strstr(td_last_error(), "is unreachable")
          != NULL, "unreachable_rpc", "%s: %s", td_status_name(st),
          td_last_error());
    td_rpc_list_free(a);
    td_rpc_list_free(res);
    td_tensor_release(t);
    store_meet("test/unreachable/done");
    return 0;
}

/* ---- sends between live members fail (wait.h C19) ------------------------
 * Under TODIST_FAULT=break:coll:1:-1, every collective message fails
 * with a plain transport error, as UCX fails a send on an endpoint it
 * found broken, while both ranks live on: no message arrives, none dies.
 * Each rank's all_reduce reports its own failed send (its group broken
 * by it) once the transport's grace for naming a dead peer has passed,
 * not after its 60 s timeout. */
static int
mode_send_broken(void)
{
    td_tensor_t *t = make(1024, TD_FLOAT32);
    char want[32];
    td_status_t st;
    double t0;

    td_coll_set_timeout(60);
    snprintf(want, sizeof(want), "send to rank %d ", (rank + 1) % size);
    t0 = now_s();
    st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
    check(st == TD_ERR_TRANSPORT && strstr(td_last_error(), want) != NULL &&
          strstr(td_last_error(), "TODIST_FAULT") != NULL,
          "send_broken_reported", "%s: %s", td_status_name(st),
          td_last_error());
    /* (half the timeout: the grace, and L10's wait of up to a second on
     * each failed send, under ASan on a loaded machine) */
    check(now_s() - t0 <= 30, "send_broken_by_detection",
          "failed %.2f s after the call began (timeout 60 s)", now_s() - t0);
    printf("# rank %d: failed after %.3f s\n", rank, now_s() - t0);
    st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
    check(st == TD_ERR_TRANSPORT && strstr(td_last_error(), want) != NULL,
          "send_broken_again", "%s: %s", td_status_name(st),
          td_last_error());
    printf("# rank %d: %s after %.3f s: %s\n", rank, td_status_name(st),
           now_s() - t0, td_last_error());
    td_tensor_release(t);
    store_meet("test/send_broken/done");
    return 0;
}

/* ---- an offer in place whose header fails on its way (wait.h C19) --------
 * 3 ranks, TODIST_FAULT=break:coll:1:2 (every collective message to rank
 * 2 fails with a plain transport error once its endpoint is made, rank 2
 * alive) and TODIST_COLL_SHM=0. Group {2, 1} (group rank 0 is rank 2, so
 * the host map's hidden broadcast, run.c A1, goes 2 -> 1 and arrives),
 * then a 4 MiB all_reduce: a ring whose steps are offers in place (same
 * host). Rank 1's offers to rank 2 fail after they left the send call,
 * no answer will come, and rank 1 must end its call with that failure
 * once the grace passed (2 s here; 4.5 s in all, measured), within 15 s:
 * not at rank 2's timeout (20 s, whose abort reaches rank 1), nor its own
 * (60 s). Rank 2 (its answers and the abort to it broken too) only has
 * to fail. */
static int
mode_offer_broken(void)
{
    int ranks[2] = { 2, 1 };
    td_group_t *g = NULL;
    td_tensor_t *t = make(1048576, TD_FLOAT32);
    td_status_t st;
    double t0;

    td_coll_set_timeout(rank == 2 ? 20 : 60);
    if (size != 3 || td_group_new(ranks, 2, &g) != TD_OK) {
        check(0, "offer_broken_group", "%d ranks (3 wanted): %s", size,
              td_last_error());
        return 1;
    }
    if (rank != 0) {
        t0 = now_s();
        st = td_all_reduce(g, t, TD_REDUCE_SUM);
        printf("# rank %d: %s after %.3f s: %s\n", rank, td_status_name(st),
               now_s() - t0, st != TD_OK ? td_last_error() : "");
        if (rank == 1) {
            check(st == TD_ERR_TRANSPORT &&
                  strstr(td_last_error(), "send to rank 2 ") != NULL,
                  "offer_broken_reported", "%s: %s", td_status_name(st),
                  td_last_error());
            check(now_s() - t0 <= 15, "offer_broken_by_detection",
                  "failed %.2f s after the call began (rank 2's timeout "
                  "20 s)", now_s() - t0);
        } else {
            check(st != TD_OK, "offer_broken_reported", "%s",
                  td_status_name(st));
        }
    }
    td_tensor_release(t);
    store_meet("test/offer_broken/done");
    return 0;
}

/* ---- a member lost, its rank's pid key then overwritten (issue 32) -------
 * As when an admitted joiner dies and a replacement for its rank publishes
 * its own pid (liveness.h V5): every survivor looks the last rank's
 * address up while it lives, it dies, rank 0 overwrites "td/pid/<it>"
 * with a live process's (the launcher's), and only then does the group's
 * first all_reduce talk to it. The liveness check must watch the process
 * whose address was fetched: TD_ERR_PEER naming it, soon (a check that
 * asked the store then watched the launcher and waited for ever). */
static int
store_pid(const char *key)
{
    void *v = NULL;
    size_t len = 0;
    int pid = 0;

    if (td_store_get(td__runtime_store(), key, 10, &v, &len) == TD_OK) {
        pid = atoi(v);
        free(v);
    }
    return pid;
}

static int
mode_late_pid(void)
{
    td_store_t *store = td__runtime_store();
    td_tensor_t *t = make(4, TD_FLOAT32);
    int victim = size - 1, pid;
    char key[64], want[32], val[32];
    const char *keys[1];
    td_status_t st;
    double t0;

    snprintf(key, sizeof(key), "test/late_pid/looked/%d", rank);
    if (rank == victim) {
        for (int r = 0; r < victim; r++) {
            snprintf(key, sizeof(key), "test/late_pid/looked/%d", r);
            keys[0] = key;
            if (td_store_wait(store, keys, 1, 30) != TD_OK) {
                return 1;
            }
        }
        raise(SIGKILL);
    }
    check(td__runtime_host_id(victim) != 0, "late_pid_address_looked_up",
          "rank %d's address: %s", victim, td_last_error());
    /* Its pid before this rank says it looked: rank 0 overwrites the key
     * below only once every rank said so. Read after, it was the
     * launcher's, which lives on (loaded make check: "rank 2 (pid N)
     * still runs", N the launcher's pid). */
    snprintf(want, sizeof(want), "td/pid/%d", victim);
    pid = store_pid(want);
    check(td_store_set(store, key, "1", 1) == TD_OK, "late_pid_told",
          "%s", td_last_error());
    /* The victim dies once every other rank got here: wait for them too
     * before the clock of its death starts (a rank starved for 10 s
     * before it set its key made another's 10 s run out first, under a
     * load of 8) */
    for (int r = 0; r < victim; r++) {
        char k[64];

        snprintf(k, sizeof(k), "test/late_pid/looked/%d", r);
        keys[0] = k;
        if (td_store_wait(store, keys, 1, 30) != TD_OK) {
            break;                      /* the check below says it */
        }
    }
    snprintf(key, sizeof(key), "td/pid/%d", victim);
    for (int i = 0; i < 30000 && pid > 0 && kill(pid, 0) == 0; i++) {
        struct timespec ts = { 0, 1000000 };       /* reaped: ESRCH */

        nanosleep(&ts, NULL);
    }
    check(pid > 0 && kill(pid, 0) != 0, "late_pid_victim_gone",
          "rank %d (pid %d) still runs", victim, pid);
    if (rank == 0) {
        int n = snprintf(val, sizeof(val), "%ld", (long)getppid());

        td_store_set(store, key, val, (size_t)n);
        td_store_set(store, "test/late_pid/forged", "1", 1);
    }
    keys[0] = "test/late_pid/forged";
    td_store_wait(store, keys, 1, 30);
    td_coll_set_timeout(30);
    t0 = now_s();
    st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
    snprintf(want, sizeof(want), "rank %d ", victim);
    check(st == TD_ERR_PEER && strstr(td_last_error(), want) != NULL,
          "late_pid_fails_naming_it", "%s: %s", td_status_name(st),
          td_last_error());
    check(now_s() - t0 <= DETECT_MAX_S, "late_pid_by_detection", "failed %.2f s after "
          "the call began", now_s() - t0);
    printf("# rank %d: %s after %.3f s: %s\n", rank, td_status_name(st),
           now_s() - t0, td_last_error());
    td_tensor_release(t);
    return 0;
}

/* Point-to-point bodies above the single-copy threshold between ranks 0
 * and 1 (cma.h C9, C10): blocking send/recv both ways; both ranks irecv
 * then send (an offer matching an irecv posted earlier must not wait for
 * a thread that is blocked in its own send); an irecv posted after the
 * offer arrived (read by td_irecv itself). Content checked each time. */
static int
big_p2p(int64_t c)
{
    td_group_t *w = td_group_world();
    td_tensor_t *s, *r;
    td_work_t *wk = NULL;
    td_status_t st = TD_OK, st2;
    int64_t bad;
    int peer = 1 - rank;

    if (rank > 1) {
        td_group_barrier(w);
        return 0;
    }
    s = make(c, TD_FLOAT32);
    r = make(c, TD_FLOAT32);
    for (int64_t i = 0; i < c; i++) {
        set(s, i, (double)(rank * 1000 + i % 997));
    }
    /* blocking, 0 -> 1 then 1 -> 0 */
    for (int dir = 0; dir < 2; dir++) {
        td_tensor_fill_(r, -1);
        if (rank == dir) {
            st = td_send(w, s, peer, 5);
        } else {
            st = td_recv(w, r, peer, 5, NULL);
            FIRST_BAD(r, c, (double)(peer * 1000 + i % 997), &bad);
            check(st == TD_OK && bad < 0, dir ? "big_p2p_recv_1to0" :
                  "big_p2p_recv_0to1", "%s [%" PRId64 "]",
                  st ? td_last_error() : "ok", bad);
        }
        if (rank == dir) {
            check(st == TD_OK, dir ? "big_p2p_send_1to0" :
                  "big_p2p_send_0to1", "%s", st ? td_last_error() : "ok");
        }
    }
    /* both irecv, then both send, then wait */
    td_tensor_fill_(r, -1);
    st = td_irecv(w, r, peer, 6, &wk);
    st2 = st == TD_OK ? td_send(w, s, peer, 6) : st;
    if (st == TD_OK) {
        st = td_work_wait(wk, -1);
        td_work_release(wk);
    }
    FIRST_BAD(r, c, (double)(peer * 1000 + i % 997), &bad);
    check(st == TD_OK && st2 == TD_OK && bad < 0, "big_p2p_irecv_then_send",
          "%s / %s [%" PRId64 "]", td_status_name(st), td_status_name(st2),
          bad);
    /* an irecv posted after the offer arrived: rank 1 receives only after
     * a zero-byte message rank 0 sends after its large isend, which the
     * transport delivers after the offer (one endpoint, in order, C7) */
    td_tensor_fill_(r, -1);
    {
        td_tensor_t *z = make(0, TD_FLOAT32);

        if (rank == 0) {
            st = td_isend(w, s, 1, 7, &wk);
            st2 = st == TD_OK ? td_send(w, z, 1, 8) : st;
            if (st == TD_OK) {
                st = td_work_wait(wk, -1);
                td_work_release(wk);
            }
            check(st == TD_OK && st2 == TD_OK, "big_p2p_late_irecv_send",
                  "%s / %s", td_status_name(st), td_status_name(st2));
        } else {
            st = td_recv(w, z, 0, 8, NULL);
            st2 = st == TD_OK ? td_irecv(w, r, 0, 7, &wk) : st;
            if (st2 == TD_OK && st == TD_OK) {
                st = td_work_wait(wk, -1);
                td_work_release(wk);
            }
            FIRST_BAD(r, c, (double)(i % 997), &bad);
            check(st == TD_OK && st2 == TD_OK && bad < 0,
                  "big_p2p_late_irecv", "%s / %s [%" PRId64 "]",
                  td_status_name(st), td_status_name(st2), bad);
        }
        td_tensor_release(z);
    }
    td_tensor_release(s);
    td_tensor_release(r);
    td_group_barrier(w);
    return 0;
}

/* Messages for a destroyed group (match.h C11): rank 1 isends on G = {0,1}
 * twice; rank 0 never receives. The first is queued on rank 0 when it
 * destroys G (freed then); the second arrives after (dropped). Both are
 * answered (C14): rank 1's sends fail TD_ERR_CANCELED naming rank 0, well
 * before their timeout (30 s: they waited it out before C14). The test
 * reads the debug log for both drops. */
static int
mode_destroyed(void)
{
    td_group_t *w = td_group_world(), *g = NULL;
    td_tensor_t *t = make(1000, TD_FLOAT32);
    td_work_t *wk[2] = { NULL, NULL };
    td_status_t st;
    double t0;

    st = td_group_new((int[]){0, 1}, 2, &g);
    check(st == TD_OK, "destroyed_group_new", "%s", td_last_error());
    if (rank == 1) {
        st = td_isend(g, t, 0, 3, &wk[0]);
        check(st == TD_OK, "destroyed_isend_1", "%s", td_last_error());
    }
    td_group_barrier(w);        /* after the isend's message, on rank 0 */
    if (rank == 0) {
        td_group_destroy(g);
        g = NULL;
    }
    td_group_barrier(w);
    if (rank == 1) {
        st = td_isend(g, t, 0, 4, &wk[1]);
        check(st == TD_OK, "destroyed_isend_2", "%s", td_last_error());
    }
    td_group_barrier(w);        /* the second message was handled */
    if (rank == 1) {
        t0 = now_s();
        for (int i = 0; i < 2; i++) {
            st = td_work_wait(wk[i], -1);
            check(st == TD_ERR_CANCELED &&
                  strstr(td_last_error(), "rank 0 dropped") != NULL,
                  "destroyed_send_fails_naming_it", "%s: %s",
                  td_status_name(st), td_last_error());
            td_work_release(wk[i]);
        }
        check(now_s() - t0 <= DETECT_MAX_S, "destroyed_send_by_detection",
              "%.2f s", now_s() - t0);
        td_group_destroy(g);
    }
    td_tensor_release(t);
    td_group_barrier(w);
    return 0;
}

/* A sender of 256 KiB (an offer in place; with TODIST_COLL_CMA=0 a UCX
 * rendezvous) to a rank that will never take it: that rank answers
 * (match.h C14), so the sender fails naming it at once instead of waiting
 * out its timeout (20 s here; before C14 each case below waited it out).
 * Groups {0,1}; rank 1 drops, rank 0 sends:
 *  queued: rank 0 isends A (tag 1), then sends B (32 KiB, tag 2, after A
 *    on the same endpoint); rank 1 receives B, so A waits in its queue,
 *    and destroys the group: A's isend fails TD_ERR_CANCELED naming
 *    rank 1 (the heal's case: a receive that will never be posted);
 *  arrival: rank 1 destroyed the group first: rank 0's td_send fails so;
 *  coll: the same for rank 0's td_broadcast from rank 0 (through the
 *    group's segment handshake, or with TODIST_COLL_SHM=0 a transport
 *    step's offer or rendezvous): it fails naming rank 1. The group's
 *    host map goes first (run.c A1: a hidden call #0, 16 B), so rank 1
 *    aborts the group for #0 and then answers #1's offer "dropped":
 *    the answer, behind the abort, must still end the offer (cma.h C15;
 *    dropped for the failed group, it waited out the 20 s).
 * Each within 5 s. */
static int
mode_dropped(void)
{
    td_group_t *w = td_group_world(), *g[3] = { NULL, NULL, NULL };
    td_tensor_t *a = make(65536, TD_FLOAT32), *b = make(8192, TD_FLOAT32);
    td_work_t *wk = NULL;
    td_status_t st = TD_OK;
    double t0;

    td_coll_set_timeout(20);
    for (int k = 0; k < 3 && st == TD_OK; k++) {
        st = td_group_new((int[]){0, 1}, 2, &g[k]);
    }
    check(st == TD_OK, "dropped_groups", "%s", td_last_error());
    if (st != TD_OK || size != 2) {
        return 1;
    }
    /* queued */
    if (rank == 0) {
        st = td_isend(g[0], a, 1, 1, &wk);
        if (st == TD_OK) {
            st = td_send(g[0], b, 1, 2);
        }
        check(st == TD_OK, "dropped_queued_sent", "%s", td_last_error());
        t0 = now_s();
        st = wk != NULL ? td_work_wait(wk, -1) : st;
        check(st == TD_ERR_CANCELED &&
              strstr(td_last_error(), "rank 1 dropped") != NULL,
              "dropped_queued_fails_naming_it", "%s: %s", td_status_name(st),
              td_last_error());
        check(now_s() - t0 <= DETECT_MAX_S, "dropped_queued_by_detection", "%.2f s",
              now_s() - t0);
        td_work_release(wk);
    } else {
        st = td_recv(g[0], b, 0, 2, NULL);
        check(st == TD_OK, "dropped_queued_sent", "%s", td_last_error());
    }
    td_group_destroy(g[0]);
    /* arrival */
    if (rank == 1) {
        td_group_destroy(g[1]);
        g[1] = NULL;
    }
    td_group_barrier(w);
    if (rank == 0) {
        t0 = now_s();
        st = td_send(g[1], a, 1, 1);
        check(st == TD_ERR_CANCELED &&
              strstr(td_last_error(), "rank 1 dropped") != NULL,
              "dropped_arrival_fails_naming_it", "%s: %s", td_status_name(st),
              td_last_error());
        check(now_s() - t0 <= DETECT_MAX_S, "dropped_arrival_by_detection", "%.2f s",
              now_s() - t0);
        td_group_destroy(g[1]);
    }
    /* coll */
    if (rank == 1) {
        td_group_destroy(g[2]);
        g[2] = NULL;
    }
    td_group_barrier(w);
    if (rank == 0) {
        t0 = now_s();
        st = td_broadcast(g[2], a, 0);
        check(st == TD_ERR_CANCELED &&
              strstr(td_last_error(), "rank 1 dropped") != NULL,
              "dropped_coll_fails_naming_it", "%s: %s", td_status_name(st),
              td_last_error());
        check(now_s() - t0 <= DETECT_MAX_S, "dropped_coll_by_detection", "%.2f s",
              now_s() - t0);
        printf("# dropped: rank 0's broadcast: %s after %.3f s: %s\n",
               td_status_name(st), now_s() - t0, td_last_error());
        td_group_destroy(g[2]);
    }
    td_tensor_release(a);
    td_tensor_release(b);
    td_group_barrier(w);
    return 0;
}

/* As mode_dropped, but the receiver's group fails instead of being
 * destroyed (match.h C14 through coll_group_fail_local), quietly (it tells
 * nobody): ranks 0 and 1 make G = {0, 1, 2}, rank 2 makes the same id
 * with another order, {0, 2, 1} (another member digest). Rank 0 isends
 * 256 KiB (an offer; a rendezvous with TODIST_COLL_CMA=0) to rank 1 and
 * then 32 KiB that rank 1 receives, so the first waits in its queue; then
 * rank 2 sends rank 1 a message on its G: the digests differ, rank 1
 * fails its G, and both senders' messages are dropped: each is told
 * (TD_ERR_CANCELED naming rank 1) within 5 s, timeout 20 s. */
static int
mode_dropped_broken(void)
{
    td_group_t *w = td_group_world(), *g = NULL;
    td_tensor_t *a = make(65536, TD_FLOAT32), *b = make(8192, TD_FLOAT32);
    td_tensor_t *c = make(4, TD_FLOAT32);
    td_work_t *wk = NULL;
    td_status_t st;
    double t0;

    if (size != 3) {
        return 1;
    }
    td_coll_set_timeout(20);
    st = rank == 2 ? td_group_new((int[]){0, 2, 1}, 3, &g)
                   : td_group_new((int[]){0, 1, 2}, 3, &g);
    check(st == TD_OK, "dropped_broken_group", "%s", td_last_error());
    if (st != TD_OK) {
        return 1;
    }
    if (rank == 0) {
        st = td_isend(g, a, 1, 1, &wk);
        if (st == TD_OK) {
            st = td_send(g, b, 1, 2);
        }
        check(st == TD_OK, "dropped_broken_queued", "%s", td_last_error());
    } else if (rank == 1) {
        st = td_recv(g, b, 0, 2, NULL);
        check(st == TD_OK, "dropped_broken_queued", "%s", td_last_error());
    }
    td_group_barrier(w);            /* the 256 KiB wait in rank 1's queue */
    t0 = now_s();
    if (rank == 2) {
        /* group rank 2 of {0, 2, 1}: world rank 1 */
        st = td_send(g, c, 2, 3);
        check(st == TD_ERR_CANCELED &&
              strstr(td_last_error(), "rank 1 dropped") != NULL,
              "dropped_broken_mismatch_told", "%s: %s", td_status_name(st),
              td_last_error());
    } else if (rank == 0) {
        st = td_work_wait(wk, -1);
        check(st == TD_ERR_CANCELED &&
              strstr(td_last_error(), "rank 1 dropped") != NULL,
              "dropped_broken_queued_told", "%s: %s", td_status_name(st),
              td_last_error());
        td_work_release(wk);
    }
    if (rank != 1) {
        check(now_s() - t0 <= DETECT_MAX_S, "dropped_broken_by_detection", "%.2f s",
              now_s() - t0);
    }
    td_group_barrier(w);
    td_group_destroy(g);
    td_tensor_release(a);
    td_tensor_release(b);
    td_tensor_release(c);
    return 0;
}

/* 40 live groups of the whole world, an all_reduce on each (the world
 * group has a segment too): past the 32 segments a process maps
 * (shm.c), groups run through the transport, and every result is right. */
static int
mode_many_groups(void)
{
    td_group_t *g[40];
    int ranks[64], bad = 0;
    td_tensor_t *t = make(5000, TD_INT64);

    for (int i = 0; i < size; i++) {
        ranks[i] = i;
    }
    for (int k = 0; k < 40; k++) {
        td_status_t st = td_group_new(ranks, size, &g[k]);

        td_tensor_fill_(t, k + rank);
        if (st == TD_OK) {
            st = td_all_reduce(g[k], t, TD_REDUCE_SUM);
        }
        /* sum over ranks of (k + r) */
        bad += st != TD_OK ||
               get(t, 4999) != (double)(k * size + size * (size - 1) / 2);
    }
    check(bad == 0, "many_groups_right", "%d wrong", bad);
    for (int k = 0; k < 40; k++) {
        td_group_destroy(g[k]);
    }
    td_tensor_release(t);
    return 0;
}

int
main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "matrix";
    td_status_t st;
    int rc = 0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(mode, "kill") == 0 || strcmp(mode, "mbox_kill") == 0 ||
        strcmp(mode, "early_kill") == 0 || strcmp(mode, "late_pid") == 0) {
        signal(SIGTERM, SIG_IGN);       /* finish the checks */
    }
    td_rpc_register("twice", fn_twice, NULL);
    st = td_init(NULL);
    if (st != TD_OK) {
        fprintf(stderr, "td_init: %s\n", td_last_error());
        return 2;
    }
    rank = td_world()->rank;
    size = td_world()->world_size;
    if (strcmp(mode, "matrix") == 0) {
        rc = mode_matrix();
    } else if (strcmp(mode, "hier") == 0) {
        rc = mode_hier();
    } else if (strcmp(mode, "auto_is") == 0) {
        rc = mode_auto_is(argc > 2 ? argv[2] : "hier");
    } else if (strcmp(mode, "taken") == 0) {
        rc = mode_taken(argc > 2 ? atoi(argv[2]) : 100,
                        argc > 3 ? argv[3] : "some");
    } else if (strcmp(mode, "wakeup") == 0) {
        rc = mode_wakeup(argc > 2 ? atoi(argv[2]) : 1);
    } else if (strcmp(mode, "nap") == 0) {
        rc = mode_nap(argc > 2 ? atoi(argv[2]) : 200000);
    } else if (strcmp(mode, "small") == 0) {
        rc = mode_small(argc > 2 ? atoi(argv[2]) : 2000);
    } else if (strcmp(mode, "chunks") == 0) {
        rc = mode_chunks(argc > 2 ? argv[2]
                                  : "all_reduce:hier,broadcast:hier,"
                                    "all_gather:hier,reduce_scatter:hier");
    } else if (strcmp(mode, "rs_alias") == 0) {
        rc = mode_rs_alias(argc > 2 ? atoll(argv[2]) : 300001);
    } else if (strcmp(mode, "allreduce_big") == 0) {
        rc = mode_allreduce_big(argc > 2 ? atoi(argv[2]) : 8,
                                argc > 3 ? atoll(argv[3]) : BIG);
    } else if (strcmp(mode, "p2p") == 0) {
        rc = mode_p2p();
    } else if (strcmp(mode, "p2p_segments") == 0) {
        rc = mode_p2p_segments(argc > 2 ? atoll(argv[2]) : 8192);
    } else if (strcmp(mode, "p2p_stopped_sender") == 0) {
        rc = mode_p2p_stopped_sender(argc > 2 ? atoll(argv[2]) : 8192);
    } else if (strcmp(mode, "p2p_held_offer") == 0) {
        rc = mode_p2p_held_offer();
    } else if (strcmp(mode, "p2p_late_offer") == 0) {
        rc = mode_p2p_late_offer(argc > 2 ? atoll(argv[2]) : 65536,
                                 argc > 3 ? atoi(argv[3]) : 0);
    } else if (strcmp(mode, "concurrent") == 0) {
        rc = mode_concurrent();
    } else if (strcmp(mode, "mismatch") == 0) {
        rc = mode_mismatch();
    } else if (strcmp(mode, "late_names") == 0) {
        rc = mode_late_names();
    } else if (strcmp(mode, "dropped") == 0) {
        rc = mode_dropped();
    } else if (strcmp(mode, "dropped_broken") == 0) {
        rc = mode_dropped_broken();
    } else if (strcmp(mode, "destroyed") == 0) {
        rc = mode_destroyed();
    } else if (strcmp(mode, "mbox") == 0) {
        rc = mode_mbox();
    } else if (strcmp(mode, "mbox_fault") == 0) {
        rc = mode_mbox_fault();
    } else if (strcmp(mode, "mbox_kill") == 0) {
        rc = mode_mbox_kill();
        fflush(stdout);
        sleep(1);
        _exit(n_fail ? 1 : 0);
    } else if (strcmp(mode, "many_groups") == 0) {
        rc = mode_many_groups();
    } else if (strcmp(mode, "big") == 0) {
        /* bodies above the single-copy threshold (read in place, or sent
         * through UCX when that cannot be done) */
        int64_t c = 300007;
        td_tensor_t *t = make(c, TD_FLOAT32);
        int64_t bad;

        for (int64_t i = 0; i < c; i++) {
            set(t, i, (double)val(rank, i, TD_REDUCE_SUM));
        }
        st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
        FIRST_BAD(t, c, expect_reduce(size, i, TD_REDUCE_SUM, TD_FLOAT32),
                  &bad);
        check(st == TD_OK && bad < 0, "big_all_reduce", "%s [%" PRId64 "]",
              st ? td_last_error() : "ok", bad);
        for (int64_t i = 0; i < c; i++) {
            set(t, i, rank == 0 ? (double)(i % 1000) : -1);
        }
        st = td_broadcast(td_group_world(), t, 0);
        FIRST_BAD(t, c, (double)(i % 1000), &bad);
        check(st == TD_OK && bad < 0, "big_broadcast", "%s [%" PRId64 "]",
              st ? td_last_error() : "ok", bad);
        td_tensor_release(t);
        rc = big_p2p(c);
    } else if (strcmp(mode, "kind") == 0 && argc > 2) {
        /* one call of the kind argv[2] (all_reduce, broadcast from the
         * last rank, all_gather, reduce_scatter, barrier) on the world;
         * prints what happened, as "one" */
        td_tensor_t *t = make(16, TD_FLOAT32), *big = make(16 * size,
                                                           TD_FLOAT32);
        const char *k = argv[2];

        td_tensor_fill_(t, 1);
        td_tensor_fill_(big, 1);
        if (strcmp(k, "all_reduce") == 0) {
            st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
        } else if (strcmp(k, "broadcast") == 0) {
            st = td_broadcast(td_group_world(), t, size - 1);
        } else if (strcmp(k, "all_gather") == 0) {
            st = td_all_gather(td_group_world(), big, t);
        } else if (strcmp(k, "reduce_scatter") == 0) {
            st = td_reduce_scatter(td_group_world(), t, big, TD_REDUCE_SUM);
        } else {
            st = td_group_barrier(td_group_world());
        }
        printf("# rank %d %s: %s %s\n", rank, k, td_status_name(st),
               st ? td_last_error() : "");
        td_tensor_release(t);
        td_tensor_release(big);
    } else if (strcmp(mode, "one") == 0 || strcmp(mode, "late") == 0) {
        /* one all_reduce of 16 floats; prints what happened ("late": the
         * last rank calls it 3 s after the others) */
        td_tensor_t *t = make(16, TD_FLOAT32);

        if (strcmp(mode, "late") == 0 && rank == size - 1) {
            sleep(3);
        }
        td_tensor_fill_(t, 1);
        st = td_all_reduce(td_group_world(), t, TD_REDUCE_SUM);
        printf("# rank %d one: %s %s\n", rank, td_status_name(st),
               st ? td_last_error() : "");
        check(st != TD_OK || get(t, 15) == size, "one_result", "%g",
              get(t, 15));
        td_tensor_release(t);
    } else if (strcmp(mode, "unreachable") == 0 ||
               strcmp(mode, "send_broken") == 0 ||
               strcmp(mode, "offer_broken") == 0) {
        rc = mode[0] == 'u' ? mode_unreachable()
             : mode[0] == 'o' ? mode_offer_broken() : mode_send_broken();
        /* no join: the ranks cannot (or may not) reach each other */
        fflush(stdout);
        _exit(n_fail ? 1 : 0);
    } else if (strcmp(mode, "kill") == 0 || strcmp(mode, "early_kill") == 0 ||
               strcmp(mode, "late_pid") == 0) {
        rc = mode[0] == 'k' ? mode_kill() : mode[0] == 'e' ?
             mode_early_kill() : mode_late_pid();
        /* the survivors leave without the join (a member is dead), late
         * enough that no survivor sees another survivor leave first */
        fflush(stdout);
        sleep(3);
        _exit(n_fail ? 1 : 0);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        rc = 2;
    }
    st = td_finalize();
    if (st != TD_OK) {
        fprintf(stderr, "rank %d: td_finalize: %s\n", rank, td_last_error());
        rc = rc ? rc : 1;
    }
    return rc ? rc : (n_fail ? 1 : 0);
}
