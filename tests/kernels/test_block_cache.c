/* test_block_cache: the caching allocator under the CUDA backend
 * (kernels/block_cache.h), over a counting malloc: freed blocks are
 * reused (C1), the cache is bounded (C2), an exhausted raw allocator gets
 * the cache back and retries (C3), a bad free is counted (C4). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/block_cache.h"
#include "tests/tap.h"

static size_t raw_live, raw_calls, raw_limit = SIZE_MAX;

/* A counting malloc: a 16-byte header keeps the size for raw_free. */
static td_status_t
raw_alloc(void *ctx, size_t n, void **p)
{
    char *m;

    (void)ctx;
    if (raw_live + n > raw_limit || (m = malloc(n + 16)) == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "test: raw limit");
    }
    memcpy(m, &n, sizeof(n));
    raw_live += n;
    raw_calls++;
    *p = m + 16;
    return TD_OK;
}

static void
raw_free(void *ctx, void *p)
{
    size_t n;

    (void)ctx;
    memcpy(&n, (char *)p - 16, sizeof(n));
    raw_live -= n;
    free((char *)p - 16);
}

int
main(void)
{
    td_block_cache_t *c;
    td_block_cache_stats_t s;
    void *a, *b, *d, *e, *ptrs[64];
    int distinct = 1;

    plan(23);
    is_int(td__block_cache_class(0), 512, "0 B -> one 512 B class");
    is_int(td__block_cache_class(513), 1024, "513 B -> 1024");
    is_int(td__block_cache_class((1 << 20) + 1), 2 << 20, "1 MiB + 1 -> 2 MiB");
    is_int(td__block_cache_create(&(td_block_cache_params_t){
               .name = "test:0", .raw_alloc = raw_alloc, .raw_free = raw_free,
               .max_cached = 8 << 20}, &c), TD_OK, "create");

    is_int(td__block_cache_alloc(c, 1000, &a), TD_OK, "alloc 1000 B");
    td__block_cache_free(c, a);
    is_int(td__block_cache_alloc(c, 1024, &b), TD_OK, "alloc 1024 B");
    ok(a == b, "a freed block of the same class is reused (%p, %p)", a, b);
    td__block_cache_stats(c, &s);
    is_int(s.raw_allocs, 1, "one raw allocation for both");
    is_int(s.reuses, 1, "one reuse");
    is_int(td__block_cache_alloc(c, 1000, &d), TD_OK, "alloc while b is live");
    ok(d != b, "a live block is never handed out twice (C1)");

    for (int i = 0; i < 64; i++) {
        td__block_cache_alloc(c, (size_t)(i % 7 + 1) * 4096, &ptrs[i]);
    }
    for (int i = 0; i < 64; i++) {
        for (int j = 0; j < i; j++) {
            distinct &= ptrs[i] != ptrs[j];
        }
    }
    ok(distinct, "64 live blocks are distinct");
    for (int i = 0; i < 64; i++) {
        td__block_cache_free(c, ptrs[i]);
    }
    td__block_cache_stats(c, &s);
    is_int(s.live_bytes, 2 * 1024, "only b and d are live");

    /* C2: a 6 MiB and a 4 MiB block do not both fit in 8 MiB of cache */
    td__block_cache_alloc(c, 6 << 20, &a);
    td__block_cache_alloc(c, 4 << 20, &e);
    td__block_cache_free(c, a);
    td__block_cache_free(c, e);
    td__block_cache_stats(c, &s);
    ok(s.cached_bytes <= (8u << 20), "cached %zu B <= 8 MiB", s.cached_bytes);

    /* C3: the raw allocator has room only once the cache is given back */
    td__block_cache_stats(c, &s);
    ok(s.cached_bytes >= (6u << 20), "the 6 MiB block is cached");
    raw_limit = raw_live + (2 << 20);
    is_int(td__block_cache_alloc(c, 3 << 20, &a), TD_OK,
           "a 4 MiB class fits after the cache is given back");
    td__block_cache_stats(c, &s);
    is_int(s.cached_bytes, 0, "the cache was given back first");
    raw_limit = raw_live;            /* nothing more from the raw side */
    is_int(td__block_cache_alloc(c, 3 << 20, &e), TD_ERR_NO_MEMORY,
           "nothing left to give back: out of memory");
    like(td_last_error(), "test:0: cannot allocate 3145728 bytes",
         "the error names the device and the size");
    raw_limit = SIZE_MAX;
    td__block_cache_free(c, a);

    /* C4 */
    td__block_cache_free(c, (void *)&distinct);
    td__block_cache_stats(c, &s);
    is_int(s.bad_frees, 1, "a foreign pointer is counted, not freed");
    td__block_cache_free(c, NULL);
    td__block_cache_stats(c, &s);
    is_int(s.bad_frees, 1, "NULL is a no-op");
    td__block_cache_trim(c);
    td__block_cache_stats(c, &s);
    is_int(s.cached_bytes, 0, "trim gives every cached block back");
    td__block_cache_free(c, b);
    td__block_cache_free(c, d);
    td__block_cache_destroy(c);
    is_int(raw_live, 0, "destroy gave every raw block back (%zu calls)",
           raw_calls);
    return exit_status();
}
