/* desc.c: collective kinds, algorithms and descriptions: their names, the
 * text of a mismatch (match.h C5), TODIST_COLL_ALGO's parser. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "runtime/coll/desc.h"

/* Algorithms each collective has (bit per coll_algo_t). */
static const unsigned algo_valid[COLL_NUM_KINDS] = {
    [COLL_ALL_REDUCE]     = 1u << ALGO_RD | 1u << ALGO_RING | 1u << ALGO_SHM |
                            1u << ALGO_HIER,
    [COLL_BROADCAST]      = 1u << ALGO_BINOMIAL | 1u << ALGO_LINEAR |
                            1u << ALGO_SHM | 1u << ALGO_HIER,
    [COLL_REDUCE]         = 1u << ALGO_BINOMIAL | 1u << ALGO_LINEAR,
    [COLL_ALL_GATHER]     = 1u << ALGO_DIRECT | 1u << ALGO_RING |
                            1u << ALGO_SHM | 1u << ALGO_HIER,
    [COLL_GATHER]         = 1u << ALGO_LINEAR,
    [COLL_SCATTER]        = 1u << ALGO_LINEAR,
    [COLL_REDUCE_SCATTER] = 1u << ALGO_DIRECT | 1u << ALGO_RING |
                            1u << ALGO_SHM | 1u << ALGO_HIER,
    [COLL_ALL_TO_ALL]     = 1u << ALGO_PAIRWISE,
    [COLL_BARRIER]        = 1u << ALGO_DISSEMINATION | 1u << ALGO_SHM |
                            1u << ALGO_HIER,
};

static const char *kind_names[COLL_NUM_KINDS] = {
    "none", "all_reduce", "broadcast", "reduce", "all_gather", "gather",
    "scatter", "reduce_scatter", "all_to_all", "barrier"
};
static const char *algo_names[ALGO_NUM] = {
    "auto", "rd", "ring", "binomial", "linear", "direct", "pairwise",
    "dissemination", "shm", "hier"
};
static const char *op_names[TD_REDUCE_NUM_OPS] = {
    "sum", "prod", "min", "max", "avg", "band", "bor", "bxor"
};

const char *
coll_kind_name(coll_kind_t k)
{
    return (unsigned)k < COLL_NUM_KINDS ? kind_names[k] : "?";
}

const char *
coll_algo_name(coll_algo_t a)
{
    return (unsigned)a < ALGO_NUM ? algo_names[a] : "?";
}

const char *
td_reduce_op_name(td_reduce_op_t op)
{
    return (unsigned)op < TD_REDUCE_NUM_OPS ? op_names[op] : "?";
}

void
coll_desc_text(const coll_desc_t *d, char *s, size_t len)
{
    int n = snprintf(s, len, "%s(%s x %" PRIu64, coll_kind_name(d->kind),
                     td_dtype_name((td_dtype_t)d->dtype), d->count);

    if (n < 0 || (size_t)n >= len) {
        return;
    }
    if (d->kind == COLL_ALL_REDUCE || d->kind == COLL_REDUCE ||
        d->kind == COLL_REDUCE_SCATTER) {
        n += snprintf(s + n, len - n, ", %s",
                      td_reduce_op_name((td_reduce_op_t)d->op));
    }
    if (d->root >= 0 && (size_t)n < len) {
        n += snprintf(s + n, len - n, ", root %d", d->root);
    }
    if ((size_t)n < len) {
        snprintf(s + n, len - n, ", %s)", coll_algo_name(d->algo));
    }
}

int
coll_desc_equal(const coll_desc_t *a, const coll_desc_t *b)
{
    return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op &&
           a->algo == b->algo && a->root == b->root && a->count == b->count;
}

void
coll_mismatch_text(char *msg, size_t len, uint32_t gid, uint32_t seq,
                   int other, int me, const coll_desc_t *theirs,
                   const coll_desc_t *ours)
{
    char a[160], b[160];

    coll_desc_text(theirs, a, sizeof(a));
    coll_desc_text(ours, b, sizeof(b));
    snprintf(msg, len, "coll: mismatched collectives in group %u at call "
             "#%u: rank %d called %s, rank %d called %s%s", gid, seq, other,
             a, me, b, theirs->algo != ours->algo &&
             theirs->kind == ours->kind && theirs->dtype == ours->dtype &&
             theirs->op == ours->op && theirs->root == ours->root &&
             theirs->count == ours->count ? " (only the algorithm differs: "
             "TODIST_COLL_ALGO or TODIST_COLL_SHM is set differently on "
             "these ranks)" : "");
}

td_status_t
coll_algo_parse(const char *spec, coll_algo_t forced[COLL_NUM_KINDS])
{
    char buf[512], *save = NULL, *item;

    for (int k = 0; k < COLL_NUM_KINDS; k++) {
        forced[k] = ALGO_AUTO;
    }
    if (spec == NULL || spec[0] == '\0') {
        return TD_OK;
    }
    if (strlen(spec) >= sizeof(buf)) {
        return td_error(TD_ERR_INVALID, "coll: TODIST_COLL_ALGO has %zu "
                        "bytes, at most %zu", strlen(spec), sizeof(buf) - 1);
    }
    strcpy(buf, spec);
    for (item = strtok_r(buf, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':');
        int k, a;

        if (colon == NULL) {
            return td_error(TD_ERR_INVALID, "coll: TODIST_COLL_ALGO item "
                            "'%s' is not collective:algorithm", item);
        }
        *colon = '\0';
        for (k = 1; k < COLL_NUM_KINDS; k++) {
            if (strcmp(item, kind_names[k]) == 0) {
                break;
            }
        }
        for (a = 0; a < ALGO_NUM; a++) {
            if (strcmp(colon + 1, algo_names[a]) == 0) {
                break;
            }
        }
        if (k == COLL_NUM_KINDS || a == ALGO_NUM) {
            return td_error(TD_ERR_INVALID, "coll: TODIST_COLL_ALGO: unknown "
                            "%s '%s' (collectives: all_reduce broadcast "
                            "reduce all_gather gather scatter reduce_scatter "
                            "all_to_all barrier; algorithms: auto rd ring "
                            "binomial linear direct pairwise dissemination shm hier)",
                            k == COLL_NUM_KINDS ? "collective" : "algorithm",
                            k == COLL_NUM_KINDS ? item : colon + 1);
        }
        if (a != ALGO_AUTO && !(algo_valid[k] & (1u << a))) {
            return td_error(TD_ERR_INVALID, "coll: TODIST_COLL_ALGO: %s has "
                            "no algorithm '%s'", kind_names[k], colon + 1);
        }
        forced[k] = (coll_algo_t)a;
    }
    return TD_OK;
}
