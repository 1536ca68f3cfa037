/* runtime/coll/desc.h: what one member called (internal): the collective
 * kinds and algorithms, the description every message of a collective
 * carries (the mismatch check, match.h C5), and their names.
 *
 * The bottom of runtime/coll: includes nothing of the folder. Thread
 * safety: all functions are pure. */
#ifndef TD_RUNTIME_COLL_DESC_H
#define TD_RUNTIME_COLL_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "todist/coll.h"

#define COLL_ERR_MAX 640              /* bytes of an error message */

/* Collective kinds (in the description). */
typedef enum {
    COLL_NONE = 0, COLL_ALL_REDUCE, COLL_BROADCAST, COLL_REDUCE,
    COLL_ALL_GATHER, COLL_GATHER, COLL_SCATTER, COLL_REDUCE_SCATTER,
    COLL_ALL_TO_ALL, COLL_BARRIER, COLL_NUM_KINDS
} coll_kind_t;

/* Algorithms. */
typedef enum {
    ALGO_AUTO = 0, ALGO_RD, ALGO_RING, ALGO_BINOMIAL, ALGO_LINEAR,
    ALGO_DIRECT, ALGO_PAIRWISE, ALGO_DISSEMINATION, ALGO_SHM, ALGO_HIER,
    ALGO_NUM
} coll_algo_t;

/* What one member called: every message of a collective carries it, and
 * members compare (the mismatch check, match.h C5). */
typedef struct {
    uint8_t  kind;     /* coll_kind_t */
    uint8_t  dtype;
    uint8_t  op;
    uint8_t  algo;     /* coll_algo_t actually chosen */
    int32_t  root;     /* group rank, -1 when none */
    uint64_t count;    /* elements of the per-rank tensor */
} coll_desc_t;

const char *coll_kind_name(coll_kind_t k);
const char *coll_algo_name(coll_algo_t a);
/* "all_reduce(float32 x 4097, sum, rd)" into S. */
void        coll_desc_text(const coll_desc_t *d, char *s, size_t len);
int         coll_desc_equal(const coll_desc_t *a, const coll_desc_t *b);
/* The text naming two calls at one sequence number (C5): OTHER (a world
 * rank) called THEIRS, ME called OURS, in group GID at call SEQ. */
void        coll_mismatch_text(char *msg, size_t len, uint32_t gid,
                               uint32_t seq, int other, int me,
                               const coll_desc_t *theirs,
                               const coll_desc_t *ours);
/* Parse TODIST_COLL_ALGO's "kind:algo,..." into FORCED (ALGO_AUTO for the
 * rest); an error names the bad item. */
td_status_t coll_algo_parse(const char *spec,
                            coll_algo_t forced[COLL_NUM_KINDS]);

#endif /* TD_RUNTIME_COLL_DESC_H */
