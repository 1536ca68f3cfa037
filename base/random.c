/* base/random.c: MT19937 (Matsumoto & Nishimura 1998) and torch's CPU
 * randperm over it. */
#include "config.h"

#include "base/random.h"

#define MT_N 624
#define MT_M 397

void
td__mt19937_seed(td_mt19937_t *g, uint64_t seed)
{
    g->mt[0] = (uint32_t)seed;   /* torch keeps the low 32 bits */
    for (int i = 1; i < MT_N; i++) {
        g->mt[i] = 1812433253u * (g->mt[i - 1] ^ (g->mt[i - 1] >> 30)) +
                   (uint32_t)i;
    }
    g->index = MT_N;
}

static void
twist(td_mt19937_t *g)
{
    for (int i = 0; i < MT_N; i++) {
        uint32_t y = (g->mt[i] & 0x80000000u) |
                     (g->mt[(i + 1) % MT_N] & 0x7fffffffu);
        g->mt[i] = g->mt[(i + MT_M) % MT_N] ^ (y >> 1) ^
                   ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    g->index = 0;
}

uint32_t
td__mt19937_next(td_mt19937_t *g)
{
    uint32_t y;

    if (g->index >= MT_N) {
        twist(g);
    }
    y = g->mt[g->index++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* aten's randperm_cpu: a forward Fisher-Yates with z = random() % (n - i).
 * The modulo bias is PyTorch's; matching it is the point. */
void
td__mt19937_randperm(td_mt19937_t *g, int64_t n, int64_t *perm)
{
    for (int64_t i = 0; i < n; i++) {
        perm[i] = i;
    }
    for (int64_t i = 0; i + 1 < n; i++) {
        int64_t z = (int64_t)(td__mt19937_next(g) % (uint64_t)(n - i));
        int64_t sav = perm[i];

        perm[i] = perm[z + i];
        perm[z + i] = sav;
    }
}
