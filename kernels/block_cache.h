/* kernels/block_cache.h: a caching allocator over an injected raw
 * allocator (internal). The CUDA row puts cudaMalloc/cudaFree under it so
 * that ops do not pay a cudaMalloc (and its implicit synchronisation) per
 * tensor; tests put malloc/free under it.
 *
 * Sizes are rounded up to a class (512 B steps up to 1 MiB, 2 MiB steps
 * above); a freed block goes to the list of its class and the next
 * allocation of that class takes it back. Stream order makes that safe
 * without synchronising: the device backend runs all work of a device on
 * one stream, so work queued on a reused block runs after the work queued
 * on it before it was freed (C3). A copy on another stream must be
 * synchronised before its block is freed.
 *
 * Invariants:
 *  C1. Every pointer handed out is live until freed, and no live pointer
 *      is handed out twice.
 *  C2. Cached bytes never exceed max_cached: a free beyond it gives the
 *      block back to the raw allocator.
 *  C3. When the raw allocator fails, every cached block is given back and
 *      the allocation tried once more before TD_ERR_NO_MEMORY.
 *  C4. Freeing a pointer the cache did not hand out is reported (counted in
 *      stats.bad_frees) and otherwise ignored, never a crash.
 * Thread-safe: all functions (one mutex per cache). */
#ifndef TD_KERNELS_BLOCK_CACHE_H
#define TD_KERNELS_BLOCK_CACHE_H

#include <stddef.h>
#include <todist/status.h>

typedef struct td_block_cache td_block_cache_t;

typedef struct {
    const char  *name;                /* "cuda:0", for messages */
    td_status_t (*raw_alloc)(void *ctx, size_t nbytes, void **ptr_p);
    void        (*raw_free)(void *ctx, void *ptr);
    void        *ctx;
    size_t       max_cached;          /* bytes kept for reuse (C2) */
} td_block_cache_params_t;

typedef struct {
    size_t raw_allocs;     /* calls that reached the raw allocator */
    size_t reuses;         /* allocations served from the cache */
    size_t live_bytes;     /* handed out, not yet freed (class sizes) */
    size_t cached_bytes;   /* freed, kept for reuse */
    size_t bad_frees;      /* C4 */
} td_block_cache_stats_t;

td_status_t td__block_cache_create(const td_block_cache_params_t *params,
                                  td_block_cache_t **cache_p);
/* Gives every cached block back; live blocks are given back too (the owner
 * is gone), so call it only when no tensor of the device is left. */
void        td__block_cache_destroy(td_block_cache_t *cache);
td_status_t td__block_cache_alloc(td_block_cache_t *cache, size_t nbytes,
                                 void **ptr_p);
void        td__block_cache_free(td_block_cache_t *cache, void *ptr);
/* Give every cached block back to the raw allocator. */
void        td__block_cache_trim(td_block_cache_t *cache);
void        td__block_cache_stats(td_block_cache_t *cache,
                                 td_block_cache_stats_t *stats_p);
/* The class size NBYTES is rounded up to. */
size_t      td__block_cache_class(size_t nbytes);

#endif /* TD_KERNELS_BLOCK_CACHE_H */
