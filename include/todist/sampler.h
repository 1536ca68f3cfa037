/* todist/sampler.h: DistributedSampler, PyTorch's semantics exactly.
 *
 * Each of NUM_REPLICAS ranks takes every NUM_REPLICAS-th index of one
 * shared order, starting at its RANK:
 *   - num_samples = ceil(len / replicas), or with drop_last (when len does
 *     not divide evenly) ceil((len - replicas) / replicas);
 *   - total_size = num_samples * replicas;
 *   - the order is 0..len-1, or with shuffle torch.randperm(len) under a
 *     generator seeded with seed + epoch (the same MT19937 stream as torch,
 *     so a todist job and a PyTorch job see the same batches);
 *   - without drop_last the order is padded to total_size by repeating it
 *     from its head (cycling when the padding is longer than the order);
 *     with drop_last it is cut to total_size;
 *   - rank r gets order[r], order[r + replicas], ... (num_samples indices).
 * Call td_distributed_sampler_set_epoch at the start of every epoch, as with
 * PyTorch; otherwise every epoch repeats the same order.
 * Thread safety: a sampler is a plain value; don't share one between
 * threads while one of them sets the epoch. */
#ifndef TODIST_SAMPLER_H
#define TODIST_SAMPLER_H

#include <stdint.h>
#include <todist/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t  dataset_len;
    int      num_replicas;
    int      rank;
    int      shuffle;       /* default 1 in PyTorch */
    int      drop_last;     /* default 0 */
    uint64_t seed;          /* default 0 */
    int64_t  epoch;         /* set_epoch; starts at 0 */
    int64_t  num_samples;   /* indices this rank gets per epoch */
    int64_t  total_size;    /* num_samples * num_replicas */
} td_distributed_sampler_t;

/* Fill S for a dataset of DATASET_LEN items, for RANK of NUM_REPLICAS
 * (usually td_world()->rank and ->world_size, or a group's). Errors:
 * TD_ERR_INVALID naming the bad value (a negative length, fewer than one
 * replica, a rank outside [0, num_replicas-1]). */
td_status_t td_distributed_sampler_init(td_distributed_sampler_t *s,
                                        int64_t dataset_len,
                                        int num_replicas, int rank,
                                        int shuffle, uint64_t seed,
                                        int drop_last);

/* Use EPOCH's order from now on (seed + epoch). */
void td_distributed_sampler_set_epoch(td_distributed_sampler_t *s,
                                      int64_t epoch);

/* This rank's s->num_samples indices for the current epoch, into OUT
 * (caller-allocated, s->num_samples elements). TD_ERR_INVALID if S was
 * not filled by td_distributed_sampler_init; TD_ERR_NO_MEMORY. */
td_status_t td_distributed_sampler_indices(const td_distributed_sampler_t *s,
                                           int64_t *out);

/* Move S to RANK of NUM_REPLICAS (the world shrank or grew), keeping its
 * dataset, shuffle, seed, drop_last and epoch, and re-shard *POSITION
 * (this epoch's indices, or batches, consumed per rank at the old size)
 * to td_distributed_sampler_position_at's. TD_ERR_INVALID naming the bad
 * value; S is unchanged then. */
td_status_t td_distributed_sampler_reshard(td_distributed_sampler_t *s,
                                           int num_replicas, int rank,
                                           int64_t *position);

/* The position at S's size of POSITION consumed per rank at
 * SAVED_REPLICAS ranks: the SAVED_REPLICAS ranks had consumed the first
 * POSITION * SAVED_REPLICAS entries of the epoch's order (DDP steps in
 * lockstep), so ceil(POSITION * SAVED_REPLICAS / num_replicas), at most
 * num_samples: no entry is seen twice, fewer than num_replicas units are
 * skipped. */
int64_t td_distributed_sampler_position_at(const td_distributed_sampler_t *s,
                                           int64_t position,
                                           int saved_replicas);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_SAMPLER_H */
