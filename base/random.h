/* base/random.h: MT19937, the generator behind torch.Generator on the CPU,
 * so that seeded orders (DistributedSampler's shuffle) match PyTorch's bit
 * for bit on every machine. Not thread-safe per state; states are cheap. */
#ifndef TD_BASE_RANDOM_H
#define TD_BASE_RANDOM_H

#include <stdint.h>

typedef struct {
    uint32_t mt[624];
    int      index;
} td_mt19937_t;

/* Seed as torch.Generator.manual_seed(SEED) does: the low 32 bits. */
void td__mt19937_seed(td_mt19937_t *g, uint64_t seed);

/* The next 32-bit output (torch's CPUGeneratorImpl::random()). */
uint32_t td__mt19937_next(td_mt19937_t *g);

/* torch.randperm(N, generator=g) on the CPU: PERM[i] for i < N. */
void td__mt19937_randperm(td_mt19937_t *g, int64_t n, int64_t *perm);

#endif /* TD_BASE_RANDOM_H */
