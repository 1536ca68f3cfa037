/* kernels/block_cache.c: the caching allocator (see block_cache.h). */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/block_cache.h"

#define SMALL_STEP  512u
#define SMALL_MAX   (1u << 20)
#define LARGE_STEP  (2u << 20)
#define N_BUCKETS   1024u

typedef struct block {
    void         *ptr;
    size_t        size;        /* class size */
    struct block *next;
} block_t;

struct td_block_cache {
    td_block_cache_params_t params;
    pthread_mutex_t         lock;
    block_t                *live[N_BUCKETS];   /* by pointer */
    block_t                *cached[N_BUCKETS]; /* by class size */
    td_block_cache_stats_t  stats;
};

size_t
td__block_cache_class(size_t nbytes)
{
    if (nbytes == 0) {
        nbytes = 1;
    }
    if (nbytes <= SMALL_MAX) {
        return (nbytes + SMALL_STEP - 1) / SMALL_STEP * SMALL_STEP;
    }
    if (nbytes > SIZE_MAX - LARGE_STEP) {
        return 0;
    }
    return (nbytes + LARGE_STEP - 1) / LARGE_STEP * LARGE_STEP;
}

static size_t
ptr_bucket(const void *p)
{
    uintptr_t x = (uintptr_t)p >> 9;

    return (size_t)((x * 0x9e3779b97f4a7c15ull) >> 54) % N_BUCKETS;
}

static size_t
size_bucket(size_t size)
{
    return (size_t)(((uint64_t)size * 0x9e3779b97f4a7c15ull) >> 54) %
           N_BUCKETS;
}

td_status_t
td__block_cache_create(const td_block_cache_params_t *params,
                      td_block_cache_t **cache_p)
{
    td_block_cache_t *c;

    if (params == NULL || params->raw_alloc == NULL ||
        params->raw_free == NULL) {
        return td_error(TD_ERR_INVALID, "block cache: raw_alloc and "
                        "raw_free are required");
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "block cache: out of memory");
    }
    c->params = *params;
    if (c->params.name == NULL) {
        c->params.name = "device";
    }
    pthread_mutex_init(&c->lock, NULL);
    *cache_p = c;
    return TD_OK;
}

/* Give the cached blocks back; lock held. */
static void
trim_locked(td_block_cache_t *c)
{
    for (size_t i = 0; i < N_BUCKETS; i++) {
        while (c->cached[i] != NULL) {
            block_t *b = c->cached[i];
            c->cached[i] = b->next;
            c->params.raw_free(c->params.ctx, b->ptr);
            c->stats.cached_bytes -= b->size;
            free(b);
        }
    }
}

void
td__block_cache_destroy(td_block_cache_t *c)
{
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&c->lock);
    trim_locked(c);
    for (size_t i = 0; i < N_BUCKETS; i++) {
        while (c->live[i] != NULL) {
            block_t *b = c->live[i];
            c->live[i] = b->next;
            c->params.raw_free(c->params.ctx, b->ptr);
            free(b);
        }
    }
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

void
td__block_cache_trim(td_block_cache_t *c)
{
    pthread_mutex_lock(&c->lock);
    trim_locked(c);
    pthread_mutex_unlock(&c->lock);
}

td_status_t
td__block_cache_alloc(td_block_cache_t *c, size_t nbytes, void **ptr_p)
{
    size_t size = td__block_cache_class(nbytes);
    block_t **pp, *b = NULL;
    td_status_t status;
    void *ptr;

    if (size == 0) {
        return td_error(TD_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes",
                        c->params.name, nbytes);
    }
    pthread_mutex_lock(&c->lock);
    for (pp = &c->cached[size_bucket(size)]; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->size == size) {
            b = *pp;
            *pp = b->next;
            c->stats.cached_bytes -= size;
            c->stats.reuses++;
            break;
        }
    }
    if (b == NULL) {
        b = calloc(1, sizeof(*b));
        if (b == NULL) {
            pthread_mutex_unlock(&c->lock);
            return td_error(TD_ERR_NO_MEMORY, "%s: out of host memory",
                            c->params.name);
        }
        status = c->params.raw_alloc(c->params.ctx, size, &ptr);
        if (status != TD_OK) {         /* C3: give the cache back, retry */
            trim_locked(c);
            status = c->params.raw_alloc(c->params.ctx, size, &ptr);
        }
        if (status != TD_OK) {
            free(b);
            pthread_mutex_unlock(&c->lock);
            return td_error(TD_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes "
                            "(%zu live)", c->params.name, nbytes,
                            c->stats.live_bytes);
        }
        b->ptr = ptr;
        b->size = size;
        c->stats.raw_allocs++;
    }
    b->next = c->live[ptr_bucket(b->ptr)];
    c->live[ptr_bucket(b->ptr)] = b;
    c->stats.live_bytes += size;
    pthread_mutex_unlock(&c->lock);
    *ptr_p = b->ptr;
    return TD_OK;
}

void
td__block_cache_free(td_block_cache_t *c, void *ptr)
{
    block_t **pp, *b = NULL;

    if (ptr == NULL) {
        return;
    }
    pthread_mutex_lock(&c->lock);
    for (pp = &c->live[ptr_bucket(ptr)]; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->ptr == ptr) {
            b = *pp;
            *pp = b->next;
            break;
        }
    }
    if (b == NULL) {
        c->stats.bad_frees++;          /* C4 */
        pthread_mutex_unlock(&c->lock);
        return;
    }
    c->stats.live_bytes -= b->size;
    if (c->stats.cached_bytes + b->size > c->params.max_cached) {
        c->params.raw_free(c->params.ctx, b->ptr);   /* C2 */
        free(b);
    } else {
        b->next = c->cached[size_bucket(b->size)];
        c->cached[size_bucket(b->size)] = b;
        c->stats.cached_bytes += b->size;
    }
    pthread_mutex_unlock(&c->lock);
}

void
td__block_cache_stats(td_block_cache_t *c, td_block_cache_stats_t *stats_p)
{
    pthread_mutex_lock(&c->lock);
    *stats_p = c->stats;
    pthread_mutex_unlock(&c->lock);
}
