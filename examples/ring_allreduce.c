/* ring_allreduce.c: seed 004's "own ring all-reduce from send/recv" in C.
 *
 * Each rank holds a vector; the ring all-reduce splits it into one chunk
 * per rank, passes chunks to the right neighbour n-1 times adding what
 * arrives (reduce-scatter), then n-1 times more copying (all-gather), using
 * only td_isend/td_irecv. The result is checked against td_all_reduce on
 * the same data.
 *
 *   todist-run -n 4 examples/ring_allreduce [COUNT]
 *
 * Prints "ring_allreduce: ranks=N count=C max_abs_diff=D" on rank 0 and
 * exits 0 when every element agrees (integer-valued data: exactly). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <todist/todist.h>

#define CHECK(x)                                                            \
    do {                                                                    \
        td_status_t st_ = (x);                                              \
        if (st_ != TD_OK) {                                                 \
            fprintf(stderr, "ring_allreduce: %s: %s\n", #x, td_last_error());\
            exit(1);                                                        \
        }                                                                   \
    } while (0)

/* Elements [start, start+len) of chunk C of COUNT cut in N. */
static void
chunk(int64_t count, int n, int c, int64_t *start, int64_t *len)
{
    *start = count * c / n;
    *len = count * (c + 1) / n - *start;
}

/* Ring all-reduce (sum) of the float32 tensor T in place over group G. */
static void
ring_allreduce(td_group_t *g, td_tensor_t *t)
{
    int n = td_group_size(g), r = td_group_rank(g);
    int right = (r + 1) % n, left = (r - 1 + n) % n;
    int64_t count = td_tensor_numel(t), max = count / n + 1;
    float *data = td_tensor_data(t);
    td_tensor_t *buf;
    int64_t shape[1] = { max };

    CHECK(td_tensor_zeros(shape, 1, TD_FLOAT32, &buf));
    for (int phase = 0; phase < 2; phase++) {
        for (int s = 0; s < n - 1; s++) {
            /* reduce-scatter sends chunk r-s and adds chunk r-s-1;
             * all-gather sends r+1-s and copies r-s. */
            int sc = phase == 0 ? (r - s + 2 * n) % n : (r + 1 - s + 2 * n) % n;
            int rc = phase == 0 ? (r - s - 1 + 2 * n) % n : (r - s + 2 * n) % n;
            int64_t s0, sl, r0, rl;
            td_tensor_t *out, *in;
            td_work_t *ws, *wr;

            chunk(count, n, sc, &s0, &sl);
            chunk(count, n, rc, &r0, &rl);
            CHECK(td_tensor_narrow(t, 0, s0, sl, &out));
            CHECK(td_tensor_narrow(buf, 0, 0, rl, &in));
            CHECK(td_irecv(g, in, left, s, &wr));
            CHECK(td_isend(g, out, right, s, &ws));
            CHECK(td_work_wait(wr, -1));
            CHECK(td_work_wait(ws, -1));
            td_work_release(wr);
            td_work_release(ws);
            const float *got = td_tensor_data(in);
            for (int64_t i = 0; i < rl; i++) {
                data[r0 + i] = phase == 0 ? data[r0 + i] + got[i] : got[i];
            }
            td_tensor_release(out);
            td_tensor_release(in);
        }
    }
    td_tensor_release(buf);
}

int
main(int argc, char **argv)
{
    int64_t count = argc > 1 ? atoll(argv[1]) : 1000003;
    int64_t shape[1] = { count };
    td_tensor_t *mine, *ref;
    td_group_t *g;
    double maxdiff = 0;
    int rank, n;

    CHECK(td_init(NULL));
    g = td_group_world();
    rank = td_group_rank(g);
    n = td_group_size(g);
    CHECK(td_tensor_zeros(shape, 1, TD_FLOAT32, &mine));
    float *p = td_tensor_data(mine);
    for (int64_t i = 0; i < count; i++) {
        p[i] = (float)((rank * 31 + i * 17) % 1000);
    }
    CHECK(td_tensor_clone(mine, &ref));
    ring_allreduce(g, mine);
    CHECK(td_all_reduce(g, ref, TD_REDUCE_SUM));
    const float *q = td_tensor_data(ref);
    for (int64_t i = 0; i < count; i++) {
        double d = p[i] > q[i] ? p[i] - q[i] : q[i] - p[i];
        maxdiff = d > maxdiff ? d : maxdiff;
    }
    /* Every rank's verdict, summed: 0 when all agree. */
    {
        td_tensor_t *bad;

        CHECK(td_tensor_scalar(maxdiff > 0 ? 1 : 0, TD_INT32, &bad));
        CHECK(td_all_reduce(g, bad, TD_REDUCE_SUM));
        if (rank == 0) {
            double nb;

            td_tensor_item(bad, &nb);
            printf("ring_allreduce: ranks=%d count=%lld max_abs_diff=%g "
                   "ranks_disagreeing=%g\n", n, (long long)count, maxdiff, nb);
        }
        td_tensor_release(bad);
    }
    td_tensor_release(mine);
    td_tensor_release(ref);
    CHECK(td_finalize());
    return maxdiff > 0;
}
