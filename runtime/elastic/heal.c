/* runtime/elastic/heal.c: a heal's tensors along a pipelined chain of
 * point-to-point messages (heal.h, H1-H5). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "runtime/elastic/heal.h"

/* H2: the pieces of TS[N] as views (retained), into *P_P (malloc'ed). */
static td_status_t
pieces_make(td_tensor_t *const *ts, int n, size_t piece, td_tensor_t ***p_p,
            int *np_p)
{
    td_tensor_t **p = NULL;
    int np = 0, cap = 0;
    td_status_t st = TD_OK;

    for (int i = 0; st == TD_OK && i < n; i++) {
        int64_t numel = td_tensor_numel(ts[i]);
        size_t es = td_dtype_size(td_tensor_dtype(ts[i]));
        int64_t per = es > 0 && piece / es < (size_t)numel ?
                      (int64_t)(piece / es) : numel;
        int whole = numel <= per || per < 1;
        int64_t k = whole ? 1 : (numel + per - 1) / per;
        td_tensor_t *flat = NULL;

        if (np + k > cap) {
            int ncap = (int)(np + k) * 2;
            td_tensor_t **q = realloc(p, (size_t)ncap * sizeof(*p));

            if (q == NULL) {
                st = td_error(TD_ERR_NO_MEMORY, "checkpoint: heal: out of "
                              "memory for %d pieces", ncap);
                break;
            }
            p = q;
            cap = ncap;
        }
        if (whole) {
            p[np++] = td_tensor_retain(ts[i]);
            continue;
        }
        st = td_tensor_view(ts[i], &numel, 1, &flat);
        for (int64_t j = 0; st == TD_OK && j < k; j++) {
            int64_t len = j + 1 < k ? per : numel - j * per;

            st = td_tensor_narrow(flat, 0, j * per, len, &p[np]);
            np += st == TD_OK;
        }
        td_tensor_release(flat);
    }
    if (st != TD_OK) {
        for (int i = 0; i < np; i++) {
            td_tensor_release(p[i]);
        }
        free(p);
        return st;
    }
    *p_p = p;
    *np_p = np;
    return TD_OK;
}

td_status_t
elastic_heal_tensors(td_group_t *g, int root, td_tensor_t *const *ts, int n)
{
    int size = td_group_size(g), me = td_group_rank(g), pos, prev, next;
    td_tensor_t **p = NULL;
    int np = 0;
    td_status_t st;

    if (size < 2 || n < 1) {
        return TD_OK;
    }
    pos = (me - root + size) % size;                           /* H1 */
    prev = (me - 1 + size) % size;
    next = pos + 1 < size ? (me + 1) % size : -1;
    /* H2: two members gain nothing from pieces (one message each) */
    st = pieces_make(ts, n, size == 2 ? SIZE_MAX : HEAL_PIECE, &p, &np);
    for (int k = 0; k < np && st == TD_OK; k++) {
        int tag = HEAL_TAG + k % HEAL_TAG_SPAN;                 /* H4 */

        /* H3: piece k in, then on; the successor forwards k - 1 (or
         * waits for k) meanwhile */
        if (pos > 0) {
            st = td_recv(g, p[k], prev, tag, NULL);
        }
        if (st == TD_OK && next >= 0) {
            st = td_send(g, p[k], next, tag);
        }
    }
    for (int i = 0; i < np; i++) {
        td_tensor_release(p[i]);
    }
    free(p);
    return st;
}
