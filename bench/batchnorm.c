/* bench/batchnorm: BatchNorm1d forward + backward (train mode, float32,
 * one thread) over [N, C] batches; prints one line per shape:
 *   todist batchnorm1d n=N c=C fwd_bwd_us=T
 * bench/batchnorm.sh runs it beside torch (bench/batchnorm_torch.py). */
#include "config.h"

#include <stdio.h>

#include <base/clock.h>
#include <todist/todist.h>

static const int64_t shapes[][2] = {{64, 256}, {256, 1024}, {4096, 256}};

int
main(void)
{
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int64_t n = shapes[s][0], c = shapes[s][1], shape[2] = {n, c};
        int iters = (int)(20000000 / (n * c)) + 5;
        td_batchnorm1d_t bn;
        td_tensor_t *x, *w, *ins[3], *g[3];
        double t0 = 0, best = 1e30;

        td_batchnorm1d_init(&bn, c, TD_FLOAT32);
        td_tensor_empty(shape, 2, TD_FLOAT32, TD_CPU, &x);
        td_tensor_empty(shape, 2, TD_FLOAT32, TD_CPU, &w);
        td_tensor_normal_(x, 0, 1, 1);
        td_tensor_normal_(w, 0, 1, 2);
        td_tensor_set_requires_grad(x, 1);
        ins[0] = x;
        ins[1] = bn.weight;
        ins[2] = bn.bias;
        for (int rep = 0; rep < 3; rep++) {
            t0 = td_now_s();
            for (int i = 0; i < iters; i++) {
                td_tensor_t *y, *p, *l;
                if (td_batchnorm1d_forward(&bn, x, &y) != TD_OK ||
                    td_mul(y, w, &p) != TD_OK || td_sum(p, &l) != TD_OK ||
                    td_grad(&l, NULL, 1, ins, 3, 0, 0, 0, g) != TD_OK) {
                    fprintf(stderr, "batchnorm: %s\n", td_last_error());
                    return 1;
                }
                for (int k = 0; k < 3; k++) {
                    td_tensor_release(g[k]);
                }
                td_tensor_release(y);
                td_tensor_release(p);
                td_tensor_release(l);
            }
            double us = (td_now_s() - t0) / iters * 1e6;
            best = us < best ? us : best;
        }
        printf("todist batchnorm1d n=%lld c=%lld fwd_bwd_us=%.1f\n",
               (long long)n, (long long)c, best);
        td_tensor_release(x);
        td_tensor_release(w);
        td_batchnorm1d_destroy(&bn);
    }
    return 0;
}
