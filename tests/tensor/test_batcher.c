/* test_batcher: td_batcher_set_order on a small data set made here (no
 * Fashion-MNIST needed): the given order, repeats, more indices than
 * samples, none at all (NULL, 0), bad indices refused, and the batcher's
 * own order back at the next epoch. Image i has every pixel 10*i and label
 * i, so each batch names the samples it holds. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tests/tap.h"
#include <todist/todist.h>

/* The labels of the next batch as "a,b,c" (or "end"); its first pixel. */
static const char *
next_labels(td_batcher_t *b, double *px)
{
    static char s[128];
    td_tensor_t *x, *y;
    int r = td_batcher_next(b, &x, &y), n = 0;

    if (r != 1) {
        return r == 0 ? "end" : "error";
    }
    s[0] = '\0';
    for (int64_t i = 0; i < td_tensor_numel(y); i++) {
        n += snprintf(s + n, sizeof(s) - n, "%s%lld", i ? "," : "",
                      (long long)((int64_t *)td_tensor_data(y))[i]);
    }
    *px = ((float *)td_tensor_data(x))[0];
    td_tensor_release(x);
    td_tensor_release(y);
    return s;
}

int
main(void)
{
    uint8_t im[5 * 4], lb[5];
    td_tensor_t *images, *labels;
    td_batcher_t *b;
    double px = -1;

    plan(19);
    for (int i = 0; i < 5; i++) {
        lb[i] = (uint8_t)i;
        for (int k = 0; k < 4; k++) {
            im[i * 4 + k] = (uint8_t)(10 * i);
        }
    }
    td_tensor_from_data(im, (int64_t[]){5, 2, 2}, 3, TD_UINT8, &images);
    td_tensor_from_data(lb, (int64_t[]){5}, 1, TD_UINT8, &labels);
    is_int(td_batcher_create(images, labels, 2, 0, 1, 0.0, 1.0, &b), TD_OK,
           "a batcher over 5 images of 2x2, batches of 2, file order");
    td_batcher_start_epoch(b, 0);
    is_int(td_batcher_num_batches(b), 3, "its own order: 3 batches");

    int64_t o1[] = {4, 4, 1};
    is_int(td_batcher_set_order(b, o1, 3), TD_OK, "set_order 4,4,1");
    is_int(td_batcher_num_batches(b), 2, "2 batches of that order");
    is_str(next_labels(b, &px), "4,4", "first batch: samples 4 and 4");
    is_double(px, 40.0 / 255, 1e-6, "with sample 4's pixels, scaled");
    is_str(next_labels(b, &px), "1", "then sample 1 alone");
    is_str(next_labels(b, &px), "end", "then the epoch ends");

    int64_t o2[] = {0, 1, 2, 3, 4, 3, 2};
    is_int(td_batcher_set_order(b, o2, 7), TD_OK,
           "more indices than samples (repeats) are taken");
    is_int(td_batcher_num_batches(b), 4, "4 batches of 7 indices");
    next_labels(b, &px); next_labels(b, &px); next_labels(b, &px);
    is_str(next_labels(b, &px), "2", "the last batch is the last index");

    is_int(td_batcher_set_order(b, NULL, 0), TD_OK, "no indices at all");
    is_str(next_labels(b, &px), "end", "an epoch with no batch");

    int64_t bad[] = {1, 5};
    is_int(td_batcher_set_order(b, bad, 2), TD_ERR_RANGE,
           "an index past the samples is refused");
    is_int(td_batcher_set_order(b, (int64_t[]){-1}, 1), TD_ERR_RANGE,
           "a negative index is refused");
    is_int(td_batcher_set_order(b, NULL, 2), TD_ERR_INVALID,
           "indices NULL with a count is refused");

    td_batcher_start_epoch(b, 1);
    is_int(td_batcher_num_batches(b), 3,
           "the next epoch has the batcher's own order again");
    td_batcher_free(b);

    /* shuffling: the seed picks the permutation (one batch of all 5) */
    {
        char a[32], c[32], a2[32];
        td_batcher_t *s1, *s2, *s1b;

        td_batcher_create(images, labels, 5, 1, 1, 0.0, 1.0, &s1);
        td_batcher_create(images, labels, 5, 1, 2, 0.0, 1.0, &s2);
        td_batcher_create(images, labels, 5, 1, 1, 0.0, 1.0, &s1b);
        td_batcher_start_epoch(s1, 0);
        td_batcher_start_epoch(s2, 0);
        td_batcher_start_epoch(s1b, 0);
        snprintf(a, sizeof(a), "%s", next_labels(s1, &px));
        snprintf(c, sizeof(c), "%s", next_labels(s2, &px));
        snprintf(a2, sizeof(a2), "%s", next_labels(s1b, &px));
        ok(strcmp(a, c) != 0, "seeds 1 and 2 shuffle differently (%s, %s)",
           a, c);
        is_str(a2, a, "seed 1 again: the same order");
        td_batcher_free(s1);
        td_batcher_free(s2);
        td_batcher_free(s1b);
    }
    td_tensor_release(images);
    td_tensor_release(labels);
    return exit_status();
}
