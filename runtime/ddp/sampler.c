/* runtime/ddp/sampler.c: DistributedSampler (torch.utils.data.distributed,
 * PyTorch 1.13), index for index. See todist/sampler.h for the rules. */
#include "config.h"

#include <stdlib.h>

#include "base/random.h"
#include <todist/sampler.h>

/* CK4 (runtime/elastic/checkpoint.c): the W ranks consumed the first
 * pos * W entries of the epoch's order in lockstep; at W' ranks the epoch
 * goes on at ceil(pos * W / W'), at most its end. */
int64_t
td_distributed_sampler_position_at(const td_distributed_sampler_t *s,
                                   int64_t position, int saved_replicas)
{
    int64_t w = s->num_replicas;
    int64_t p = (position * saved_replicas + w - 1) / w;

    return p < s->num_samples ? p : s->num_samples;
}

td_status_t
td_distributed_sampler_reshard(td_distributed_sampler_t *s, int num_replicas,
                               int rank, int64_t *position)
{
    int old_w;
    int64_t epoch;
    td_status_t st;

    if (s == NULL || position == NULL) {
        return td_error(TD_ERR_INVALID, "sampler: reshard: %s is NULL",
                        s == NULL ? "the sampler" : "position");
    }
    if (*position < 0 || *position > s->num_samples) {
        return td_error(TD_ERR_INVALID, "sampler: reshard: position %lld is "
                        "outside this epoch's 0..%lld", (long long)*position,
                        (long long)s->num_samples);
    }
    old_w = s->num_replicas;
    epoch = s->epoch;
    st = td_distributed_sampler_init(s, s->dataset_len, num_replicas, rank,
                                     s->shuffle, s->seed, s->drop_last);
    if (st != TD_OK) {
        return st;
    }
    s->epoch = epoch;
    *position = td_distributed_sampler_position_at(s, *position, old_w);
    return TD_OK;
}

td_status_t
td_distributed_sampler_init(td_distributed_sampler_t *s, int64_t dataset_len,
                            int num_replicas, int rank, int shuffle,
                            uint64_t seed, int drop_last)
{
    int64_t n;

    if (s == NULL) {
        return td_error(TD_ERR_INVALID, "sampler: the sampler is NULL");
    }
    if (dataset_len < 0) {
        return td_error(TD_ERR_INVALID, "sampler: dataset length %lld is "
                        "negative", (long long)dataset_len);
    }
    if (num_replicas < 1) {
        return td_error(TD_ERR_INVALID, "sampler: num_replicas=%d; it must "
                        "be at least 1", num_replicas);
    }
    if (rank < 0 || rank >= num_replicas) {
        return td_error(TD_ERR_INVALID, "sampler: invalid rank %d, rank "
                        "should be in the interval [0, %d]", rank,
                        num_replicas - 1);
    }
    /* drop_last with an uneven split: every rank gets the same, smaller
     * count (ceil((len - replicas) / replicas)), as PyTorch does. */
    if (drop_last && dataset_len % num_replicas != 0) {
        n = (dataset_len - num_replicas + num_replicas - 1) / num_replicas;
        if (dataset_len < num_replicas) {
            n = 0;
        }
    } else {
        n = (dataset_len + num_replicas - 1) / num_replicas;
    }
    *s = (td_distributed_sampler_t){
        .dataset_len = dataset_len, .num_replicas = num_replicas,
        .rank = rank, .shuffle = shuffle != 0, .drop_last = drop_last != 0,
        .seed = seed, .epoch = 0, .num_samples = n,
        .total_size = n * num_replicas,
    };
    return TD_OK;
}

void
td_distributed_sampler_set_epoch(td_distributed_sampler_t *s, int64_t epoch)
{
    s->epoch = epoch;
}

td_status_t
td_distributed_sampler_indices(const td_distributed_sampler_t *s,
                               int64_t *out)
{
    int64_t len, *order;
    td_mt19937_t g;

    if (s == NULL || s->num_replicas < 1 || s->rank < 0 ||
        s->rank >= s->num_replicas ||
        s->total_size != s->num_samples * s->num_replicas) {
        return td_error(TD_ERR_INVALID, "sampler: not initialised with "
                        "td_distributed_sampler_init");
    }
    len = s->dataset_len;
    if (s->num_samples == 0) {
        return TD_OK;
    }
    order = malloc((size_t)len * sizeof(*order));
    if (order == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "sampler: out of memory for %lld "
                        "indices", (long long)len);
    }
    if (s->shuffle) {
        td__mt19937_seed(&g, s->seed + (uint64_t)s->epoch);
        td__mt19937_randperm(&g, len, order);
    } else {
        for (int64_t i = 0; i < len; i++) {
            order[i] = i;
        }
    }
    /* Position k of the padded (or cut) order is order[k % len]: padding
     * repeats the order from its head, cycling when it is short, and
     * drop_last only ever reads k < total_size <= len. */
    for (int64_t i = 0; i < s->num_samples; i++) {
        int64_t k = s->rank + i * s->num_replicas;

        out[i] = order[k % len];
    }
    free(order);
    return TD_OK;
}
