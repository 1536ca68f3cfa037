/* tests/peer_agree.h: what the multi-process peers of the DDP tests share
 * (ddp_peer, syncbn_peer, join_peer): a check agreed over the world group
 * (all_reduce MIN of the ranks' verdicts; rank 0 prints "PASS name" or
 * "FAIL name: detail", a failing rank also says why on stderr), the detail
 * a failing check reports, and the largest difference of two float64
 * tensors. Call after td_init. */
#ifndef TD_TESTS_PEER_AGREE_H
#define TD_TESTS_PEER_AGREE_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include <todist/todist.h>

static char detail[512];

static void fail_detail(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), unused));

static void
fail_detail(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
}

static void
agree(int ok, const char *name)
{
    int me = td_world()->rank;
    int64_t one = 1;
    td_tensor_t *t;

    td_tensor_full(&one, 1, TD_INT32, ok ? 1 : 0, &t);
    if (td_all_reduce(td_group_world(), t, TD_REDUCE_MIN) != TD_OK) {
        printf("FAIL %s: all_reduce of the verdict: %s\n", name,
               td_last_error());
    } else if (me == 0) {
        if (((int32_t *)td_tensor_data(t))[0] == 1) {
            printf("PASS %s\n", name);
        } else {
            printf("FAIL %s: %s\n", name, ok ? "another rank failed" : detail);
        }
    }
    if (!ok && me != 0) {
        fprintf(stderr, "rank %d: FAIL %s: %s\n", me, name, detail);
    }
    fflush(stdout);
    td_tensor_release(t);
}

/* max |a - b| of two float64 tensors over contiguous copies (INFINITY if
 * either is missing, the sizes differ or a difference is NaN) */
static double
maxdiff(td_tensor_t *a, td_tensor_t *b)
{
    td_tensor_t *ac, *bc;
    double m = 0;

    if (a == NULL || b == NULL || td_tensor_numel(a) != td_tensor_numel(b)) {
        return INFINITY;
    }
    td_tensor_contiguous(a, &ac);
    td_tensor_contiguous(b, &bc);
    for (int64_t i = 0; i < td_tensor_numel(ac); i++) {
        double d = fabs(((double *)td_tensor_data(ac))[i] -
                        ((double *)td_tensor_data(bc))[i]);
        m = isnan(d) ? INFINITY : fmax(m, d);
    }
    td_tensor_release(ac);
    td_tensor_release(bc);
    return m;
}

#endif /* TD_TESTS_PEER_AGREE_H */
