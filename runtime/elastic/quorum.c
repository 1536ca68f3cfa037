/* runtime/elastic/quorum.c: the survivors' agreement on a new epoch's
 * members through the store (quorum.h: the keys and invariants Q1-Q6). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "runtime/elastic/quorum.h"

/* The plan's wait slice: short, since every survivor that enters polls
 * the store for the others' keys between slices. */
#define SLICE_S 0.002

void
elastic_plan_free(elastic_plan_t *p)
{
    if (p != NULL) {
        free(p->ranks);
        p->ranks = NULL;
        p->n = 0;
    }
}

td_status_t
elastic_plan_encode(const elastic_plan_t *p, char **text_p)
{
    size_t cap = 96 + (size_t)p->n * 12, off;
    char *t = malloc(cap);

    if (t == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "elastic: out of memory");
    }
    off = (size_t)snprintf(t, cap, "v1 %" PRId64 " %" PRId64 " %d %d %d",
                           p->epoch, p->step, p->source, p->behind, p->n);
    for (int i = 0; i < p->n && off < cap; i++) {
        off += (size_t)snprintf(t + off, cap - off, " %d", p->ranks[i]);
    }
    *text_p = t;
    return TD_OK;
}

/* The next decimal integer of S at *POS, in [LO, HI]. */
static int
next_int(const char *s, size_t len, size_t *pos, int64_t lo, int64_t hi,
         int64_t *v)
{
    char buf[24];
    size_t i = *pos, k = 0;
    char *end;

    if (i >= len || s[i] != ' ') {
        return 0;
    }
    i++;
    while (i < len && s[i] != ' ' && k < sizeof(buf) - 1) {
        buf[k++] = s[i++];
    }
    buf[k] = '\0';
    if (k == 0 || (i < len && s[i] != ' ')) {
        return 0;
    }
    errno = 0;
    *v = strtoll(buf, &end, 10);
    if (errno != 0 || *end != '\0' || *v < lo || *v > hi) {
        return 0;
    }
    *pos = i;
    return 1;
}

td_status_t
elastic_plan_decode(const char *text, size_t len, int world,
                    elastic_plan_t *p)
{
    int64_t epoch, step, source, behind, n, r;
    size_t pos = 2;
    int *ranks, found = 0;

    if (len < 2 || memcmp(text, "v1", 2) != 0 ||
        !next_int(text, len, &pos, 0, INT64_MAX, &epoch) ||
        !next_int(text, len, &pos, -1, INT64_MAX, &step) ||
        !next_int(text, len, &pos, 0, world - 1, &source) ||
        !next_int(text, len, &pos, 0, 1, &behind) ||
        !next_int(text, len, &pos, 1, world, &n)) {
        return td_error(TD_ERR_PROTOCOL, "elastic: a malformed plan in the "
                        "store (%zu bytes)", len);
    }
    ranks = malloc((size_t)n * sizeof(*ranks));
    if (ranks == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "elastic: out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        if (!next_int(text, len, &pos, i > 0 ? ranks[i - 1] + 1 : 0,
                      world - 1, &r)) {
            free(ranks);
            return td_error(TD_ERR_PROTOCOL, "elastic: the plan of epoch "
                            "%" PRId64 " has a bad rank at entry %" PRId64
                            " (ranks are increasing, below %d)", epoch, i,
                            world);
        }
        ranks[i] = (int)r;
        found |= r == source;
    }
    if (pos != len || !found) {
        free(ranks);
        return td_error(TD_ERR_PROTOCOL, "elastic: the plan of epoch %" PRId64
                        " %s", epoch, !found ? "names a source that is not "
                        "a member" : "has trailing bytes");
    }
    *p = (elastic_plan_t){ .epoch = epoch, .step = step, .source = (int)source,
                           .behind = (int)behind, .n = (int)n,
                           .ranks = ranks };
    return TD_OK;
}

/* Read KEY; *FOUND 1 with its integer value in *V (0 when not one). */
static td_status_t
key_read(td_store_t *store, const char *key, int *found, int64_t *v)
{
    void *val = NULL;
    size_t len;
    td_status_t st = td_store_get(store, key, 0, &val, &len);

    *found = 0;
    if (st == TD_ERR_NOT_FOUND) {
        td_error_clear();
        return TD_OK;
    }
    if (st != TD_OK) {
        return st;
    }
    *found = 1;
    *v = strtoll(val, NULL, 10);
    free(val);
    return TD_OK;
}

/* Epoch EPOCH's record WHAT ("plan", "grow") if written (*FOUND): its
 * bytes in *VAL (the caller frees them). */
static td_status_t
record_get(td_store_t *store, int64_t epoch, const char *what, int *found,
           void **val, size_t *len)
{
    char key[64];
    td_status_t st;

    snprintf(key, sizeof(key), "td/el/%" PRId64 "/%s", epoch, what);
    st = td_store_get(store, key, 0, val, len);
    *found = st == TD_OK;
    if (st == TD_ERR_NOT_FOUND) {
        td_error_clear();
        return TD_OK;
    }
    return st;
}

/* Read epoch EPOCH's plan if written; *FOUND says whether. */
static td_status_t
plan_read(td_store_t *store, int64_t epoch, int *found, elastic_plan_t *p)
{
    void *val = NULL;
    size_t len;
    td_status_t st = record_get(store, epoch, "plan", found, &val, &len);

    if (st != TD_OK || !*found) {
        return st;
    }
    *found = 0;
    st = elastic_plan_decode(val, len, ELASTIC_RANKS_MAX, p);
    free(val);
    if (st == TD_OK) {
        *found = 1;
    }
    return st;
}

/* Advance *EPOCH to the current epoch: the last plan written after it. */
static td_status_t
epoch_last(td_store_t *store, int64_t *epoch)
{
    elastic_plan_t p = {0};
    int found = 1;
    td_status_t st = TD_OK;

    while (st == TD_OK && found) {
        st = plan_read(store, *epoch + 1, &found, &p);
        if (st == TD_OK && found) {
            elastic_plan_free(&p);
            (*epoch)++;
        }
    }
    return st;
}

static int
plan_has(const elastic_plan_t *p, int rank)
{
    for (int i = 0; i < p->n; i++) {
        if (p->ranks[i] == rank) {
            return 1;
        }
    }
    return 0;
}

/* What plan_try_close found (Q3, Q13). */
enum {
    CLOSE_WAIT,     /* members undecided, before the timeout */
    CLOSE_WROTE,    /* this call wrote the plan */
    CLOSE_OTHER,    /* not ours to write: declared dead (Q3) */
    CLOSE_MINORITY  /* the timeout passed, but too many are silent (Q13) */
};

typedef struct {
    int  how;           /* CLOSE_* */
    int  n_in;          /* joined, not declared dead */
    int  n_alive;       /* not declared dead */
    char silent[160];   /* CLOSE_MINORITY: the silent ranks */
} plan_close_t;

/* Q3: if every member is decided (or FORCE), write the plan (Q1: only if
 * absent); Q13: on silence only with a majority of the members nobody
 * declared dead. *C says what it found. */
static td_status_t
plan_try_close(td_store_t *store, int64_t epoch, int me, const int *members,
               int n, int force, plan_close_t *c)
{
    elastic_plan_t p = { .epoch = epoch, .step = -1, .source = -1 };
    int64_t *step = calloc((size_t)n, sizeof(*step));
    char *in = calloc((size_t)n, 1), *quiet = calloc((size_t)n, 1), key[96],
         *text = NULL;
    int decided = 0, me_in = 0, n_dead = 0;
    void *after = NULL;
    size_t after_len, off = 0;
    td_status_t st = TD_OK;

    c->how = CLOSE_WAIT;
    c->n_in = c->n_alive = 0;
    c->silent[0] = '\0';
    if (step == NULL || in == NULL || quiet == NULL) {
        st = td_error(TD_ERR_NO_MEMORY, "elastic: out of memory");
        goto out;
    }
    /* Q2: every in/ key before any dead/ key, so that a rank seen joined
     * has its declarations seen too (they were written before its in/);
     * read member by member, a declaration written between the reads of
     * the dead/ key it set and its own in/ key was missed, and the
     * declared rank wrote itself into the plan (seen: test_hosts_elastic
     * part 5 beside two CPU hogs, 1 run in 5) */
    for (int i = 0; i < n && st == TD_OK; i++) {
        int joined;

        snprintf(key, sizeof(key), "td/el/%" PRId64 "/in/%d", epoch,
                 members[i]);
        st = key_read(store, key, &joined, &step[i]);
        in[i] = (char)joined;
    }
    for (int i = 0; i < n && st == TD_OK; i++) {
        int joined = in[i], dead;
        int64_t v;

        snprintf(key, sizeof(key), "td/el/%" PRId64 "/dead/%d", epoch,
                 members[i]);
        st = key_read(store, key, &dead, &v);
        if (st != TD_OK) {
            break;
        }
        decided += joined || dead;
        in[i] = joined && !dead;
        quiet[i] = !joined && !dead;
        c->n_in += in[i];
        n_dead += dead;
        if (in[i] && members[i] == me) {
            me_in = 1;
        }
    }
    if (st != TD_OK || (!force && decided < n)) {
        goto out;       /* not yet (Q3) */
    }
    c->n_alive = n - n_dead;
    if (!me_in) {
        c->how = CLOSE_OTHER;
        goto out;
    }
    if (decided < n && 2 * c->n_in <= c->n_alive) {
        /* Q13: the silent may be members that hear each other but not
         * the store, and this side the one they cut off */
        c->how = CLOSE_MINORITY;
        for (int i = 0; i < n && off < sizeof(c->silent); i++) {
            if (quiet[i]) {
                off += (size_t)snprintf(c->silent + off,
                                        sizeof(c->silent) - off, "%s%d",
                                        off ? " " : "", members[i]);
            }
        }
        goto out;
    }
    p.ranks = malloc((size_t)n * sizeof(int));
    if (p.ranks == NULL) {
        st = td_error(TD_ERR_NO_MEMORY, "elastic: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        if (!in[i]) {
            continue;
        }
        p.ranks[p.n++] = members[i];
        if (step[i] > p.step) {            /* Q5: the lowest rank first */
            p.step = step[i];
            p.source = members[i];
        }
    }
    for (int i = 0; i < n; i++) {
        p.behind |= in[i] && step[i] < p.step;
    }
    st = elastic_plan_encode(&p, &text);
    if (st == TD_OK) {
        snprintf(key, sizeof(key), "td/el/%" PRId64 "/plan", epoch);
        st = td_store_compare_set(store, key, "", 0, text, strlen(text),
                                  &after, &after_len);
        free(after);
        c->how = st == TD_OK ? CLOSE_WROTE : CLOSE_WAIT;
    }
out:
    free(text);
    elastic_plan_free(&p);
    free(step);
    free(in);
    free(quiet);
    return st;
}

/* Q1/Q4 by sorting members: the caller's members must increase. */
static int
members_sorted(const int *m, int n)
{
    for (int i = 1; i < n; i++) {
        if (m[i] <= m[i - 1]) {
            return 0;
        }
    }
    return 1;
}

/* Q2, Q13: declare dead the members of MEMBERS[N] that DEAD (this rank's
 * transport) lost and MINE does not mark yet, marking them. */
static td_status_t
declare_dead(td_store_t *store, int64_t epoch, int me, const int *members,
             int n, const unsigned char *dead, unsigned char *mine)
{
    char key[96], val[32];
    td_status_t st = TD_OK;

    for (int i = 0; st == TD_OK && dead != NULL && i < n; i++) {
        if (!mine[i] && members[i] != me &&
            __atomic_load_n(&dead[members[i]], __ATOMIC_ACQUIRE)) {
            snprintf(key, sizeof(key), "td/el/%" PRId64 "/dead/%d", epoch,
                     members[i]);
            snprintf(val, sizeof(val), "%d", me);
            st = td_store_set(store, key, val, strlen(val));
            mine[i] = st == TD_OK;
        }
    }
    return st;
}

/* Q13, tests only: does HOLD (a file's path; NULL none) keep ME, past
 * its bound BOUND s after T0, from failing? Yes until the file exists,
 * 60 s past the bound at most; *TOLD: said so. */
static int
held(const char *hold, int me, double t0, double bound, int *told)
{
    if (hold == NULL || access(hold, F_OK) == 0) {
        return 0;
    }
    if (td_now_s() - t0 >= bound + 60) {
        td_log_warn("elastic: TODIST_TEST_ELASTIC_HOLD: rank %d gives up "
                    "waiting for %s", me, hold);
        return 0;
    }
    if (!*told) {
        *told = 1;
        td_log_info("elastic: TODIST_TEST_ELASTIC_HOLD: rank %d waits past "
                    "%.3g s until %s exists", me, bound, hold);
    }
    return 1;
}

td_status_t
elastic_quorum_join(td_store_t *store, int64_t epoch, int me,
                    const int *members, int n, const unsigned char *dead,
                    int64_t committed, double timeout, const char *hold,
                    elastic_plan_t *plan)
{
    char key[96], val[32];
    double t0 = td_now_s();
    int found = 0, is_member = 0, told_q13 = 0, told_hold = 0;
    unsigned char *mine = NULL;
    plan_close_t c = { .how = CLOSE_WAIT };
    elastic_plan_t p = {0};
    td_status_t st;

    if (store == NULL || members == NULL || plan == NULL || epoch < 1 ||
        n < 1 || n > ELASTIC_RANKS_MAX || !members_sorted(members, n)) {
        return td_error(TD_ERR_INVALID, "elastic: join epoch %" PRId64
                        " with %d members (increasing world ranks)", epoch,
                        n);
    }
    for (int i = 0; i < n; i++) {
        is_member |= members[i] == me;
    }
    if (!is_member) {
        return td_error(TD_ERR_INVALID, "elastic: rank %d joins epoch %"
                        PRId64 " but was not a member of epoch %" PRId64, me,
                        epoch, epoch - 1);
    }
    /* Q4: a plan already there without us: we are late or were cut off */
    st = plan_read(store, epoch, &found, &p);
    if (st != TD_OK) {
        return st;
    }
    if (!found) {
        mine = calloc((size_t)n, 1);
        if (mine == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "elastic: out of memory");
        }
        /* Q2, Q6: what our transport saw die, then our step (Q3: whoever
         * sees us joined sees our declarations) */
        st = declare_dead(store, epoch, me, members, n, dead, mine);
        if (st == TD_OK) {
            snprintf(key, sizeof(key), "td/el/%" PRId64 "/in/%d", epoch, me);
            snprintf(val, sizeof(val), "%" PRId64, committed);
            st = td_store_set(store, key, val, strlen(val));
        }
    }
    while (st == TD_OK && !found) {
        char pk[64];
        const char *keys[1] = { pk };
        int force = td_now_s() - t0 >= timeout;

        /* Q13: what our transport judged since (lost: declared now) */
        st = declare_dead(store, epoch, me, members, n, dead, mine);
        if (st == TD_OK) {
            st = plan_try_close(store, epoch, me, members, n, force, &c);
        }
        if (st == TD_OK) {
            st = plan_read(store, epoch, &found, &p);
        }
        if (st != TD_OK || found) {
            break;
        }
        if (c.how == CLOSE_MINORITY && !told_q13) {
            told_q13 = 1;
            td_log_warn("elastic: rank %d forms no epoch %" PRId64 " on "
                        "silence: rank(s) %s neither joined nor were "
                        "declared dead within %.3g s, and %d of the %d "
                        "members not declared dead is no majority (Q13); "
                        "waiting for them, or for this rank's transport to "
                        "judge them", me, epoch, c.silent, timeout, c.n_in,
                        c.n_alive);
        }
        if (force && td_now_s() - t0 >= 2 * timeout + 1 &&
            !held(hold, me, t0, 2 * timeout + 1, &told_hold)) {
            if (c.how == CLOSE_MINORITY) {
                /* Q13: the others may have gone on without us */
                st = td_error(TD_ERR_TIMEOUT, "elastic: rank %d formed no "
                              "epoch %" PRId64 ": rank(s) %s neither joined "
                              "nor were declared dead within %.3g s, and %d "
                              "of the %d members not declared dead is no "
                              "majority (quorum.h Q13): this side may be "
                              "the one cut off; this rank leaves the job",
                              me, epoch, c.silent, 2 * timeout + 1, c.n_in,
                              c.n_alive);
            } else {
                /* Q3: we could not write it (declared dead), nobody did */
                st = td_error(TD_ERR_TIMEOUT, "elastic: no plan for epoch %"
                              PRId64 " within %.3g s", epoch,
                              2 * timeout + 1);
            }
            break;
        }
        snprintf(pk, sizeof(pk), "td/el/%" PRId64 "/plan", epoch);
        st = td_store_wait(store, keys, 1, SLICE_S);
        if (st == TD_ERR_TIMEOUT) {
            td_error_clear();
            st = TD_OK;
        }
    }
    free(mine);
    if (st != TD_OK) {
        return st;
    }
    if (!plan_has(&p, me)) {
        elastic_plan_free(&p);
        return td_error(TD_ERR_STATE, "elastic: rank %d is stale: epoch %"
                        PRId64 " was formed without it (late, cut off, or "
                        "declared dead by a peer); it cannot rejoin", me,
                        epoch);
    }
    for (int i = 0; i < p.n; i++) {
        int ok = 0;
        for (int j = 0; j < n && !ok; j++) {
            ok = p.ranks[i] == members[j];
        }
        if (!ok) {
            elastic_plan_free(&p);
            return td_error(TD_ERR_PROTOCOL, "elastic: the plan of epoch %"
                            PRId64 " lists rank %d, not a member of epoch %"
                            PRId64, epoch, p.ranks[i], epoch - 1);
        }
    }
    *plan = p;
    return TD_OK;
}

/* ---- growth (Q7-Q9) ------------------------------------------------------- */

void
elastic_grow_free(elastic_grow_t *g)
{
    if (g != NULL) {
        free(g->ranks);
        g->ranks = NULL;
        g->n = 0;
    }
}

td_status_t
elastic_grow_encode(const elastic_grow_t *g, char **text_p)
{
    size_t cap = 64 + (size_t)g->n * 12, off;
    char *t;

    if (g->closed) {
        t = strdup("none");
    } else {
        t = malloc(cap);
        if (t != NULL) {
            off = (size_t)snprintf(t, cap, "v1 %" PRId64 " %d", g->step,
                                   g->n);
            for (int i = 0; i < g->n && off < cap; i++) {
                off += (size_t)snprintf(t + off, cap - off, " %d",
                                        g->ranks[i]);
            }
        }
    }
    if (t == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "elastic: out of memory");
    }
    *text_p = t;
    return TD_OK;
}

td_status_t
elastic_grow_decode(const char *text, size_t len, int world, elastic_grow_t *g)
{
    int64_t step, n, r;
    size_t pos = 2;
    int *ranks;

    if (len == 4 && memcmp(text, "none", 4) == 0) {
        *g = (elastic_grow_t){ .closed = 1 };
        return TD_OK;
    }
    if (len < 2 || memcmp(text, "v1", 2) != 0 ||
        !next_int(text, len, &pos, 0, INT64_MAX, &step) ||
        !next_int(text, len, &pos, 1, world, &n)) {
        return td_error(TD_ERR_PROTOCOL, "elastic: a malformed growth record "
                        "in the store (%zu bytes)", len);
    }
    ranks = malloc((size_t)n * sizeof(*ranks));
    if (ranks == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "elastic: out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        /* rank 0 too, when the launcher serves the store (R3) */
        if (!next_int(text, len, &pos, i > 0 ? ranks[i - 1] + 1 : 0,
                      world - 1, &r)) {
            free(ranks);
            return td_error(TD_ERR_PROTOCOL, "elastic: a growth record with "
                            "a bad joiner at entry %" PRId64 " (ranks 0.."
                            "%d, increasing)", i, world - 1);
        }
        ranks[i] = (int)r;
    }
    if (pos != len) {
        free(ranks);
        return td_error(TD_ERR_PROTOCOL, "elastic: a growth record with "
                        "trailing bytes");
    }
    *g = (elastic_grow_t){ .step = step, .n = (int)n, .ranks = ranks };
    return TD_OK;
}

/* Epoch EPOCH's growth record, if written (*FOUND). */
static td_status_t
grow_read(td_store_t *store, int64_t epoch, int world, int *found,
          elastic_grow_t *g)
{
    void *val = NULL;
    size_t len;
    td_status_t st = record_get(store, epoch, "grow", found, &val, &len);

    if (st != TD_OK || !*found) {
        return st;
    }
    *found = 0;
    st = elastic_grow_decode(val, len, world, g);
    free(val);
    *found = st == TD_OK;
    return st;
}

/* Q7: write TEXT as epoch EPOCH's record unless one is there; then read
 * what is. */
static td_status_t
grow_write(td_store_t *store, int64_t epoch, int world, const char *text,
           elastic_grow_t *g)
{
    char key[64];
    void *after = NULL;
    size_t after_len;
    int found;
    td_status_t st;

    snprintf(key, sizeof(key), "td/el/%" PRId64 "/grow", epoch);
    st = td_store_compare_set(store, key, "", 0, text, strlen(text), &after,
                              &after_len);
    free(after);
    if (st != TD_OK) {
        return st;
    }
    st = grow_read(store, epoch, world, &found, g);
    if (st == TD_OK && !found) {
        st = td_error(TD_ERR_PROTOCOL, "elastic: epoch %" PRId64 "'s growth "
                      "record vanished from the store", epoch);
    }
    return st;
}

static int
sorted_has(const int *m, int n, int r)
{
    for (int i = 0; i < n; i++) {
        if (m[i] == r) {
            return 1;
        }
    }
    return 0;
}

td_status_t
elastic_grow_check(td_store_t *store, int64_t epoch, int me,
                   const int *members, int n, int world, int64_t committed,
                   double wait, int *found, elastic_grow_t *g)
{
    td_status_t st = grow_read(store, epoch, world, found, g);
    elastic_grow_t w = { .step = committed + 1 };
    char key[96], *text = NULL;
    double t0 = td_now_s();

    /* Q10: the admitter is the epoch's lowest member */
    if (st != TD_OK || *found || n < 1 || me != members[0] || n >= world) {
        return st;
    }
    /* Q9: requests for this epoch, from ranks out of it */
    w.ranks = malloc((size_t)(world - n) * sizeof(int));
    if (w.ranks == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "elastic: out of memory");
    }
again:
    w.n = 0;
    for (int r = 0; r < world && st == TD_OK; r++) {
        int asked;
        int64_t v;

        if (sorted_has(members, n, r)) {
            continue;
        }
        snprintf(key, sizeof(key), "td/el/%" PRId64 "/want/%d", epoch, r);
        st = key_read(store, key, &asked, &v);
        if (st == TD_OK && asked) {
            w.ranks[w.n++] = r;
        }
    }
    if (st == TD_OK && w.n < world - n && td_now_s() - t0 < wait) {
        struct timespec ts = { 0, 2000000 };

        /* admit_wait_s: every rank out of the epoch asks, so several
         * replacements join in one record (Q11) */
        nanosleep(&ts, NULL);
        goto again;
    }
    if (st == TD_OK && w.n > 0) {
        st = elastic_grow_encode(&w, &text);                  /* Q7, Q8 */
        if (st == TD_OK) {
            st = grow_write(store, epoch, world, text, g);
            *found = st == TD_OK;
        }
    }
    free(text);
    elastic_grow_free(&w);
    return st;
}

td_status_t
elastic_grow_close(td_store_t *store, int64_t epoch, int world,
                   elastic_grow_t *g)
{
    return grow_write(store, epoch, world, "none", g);         /* Q7 */
}

td_status_t
elastic_candidates(const int *members, int n, const elastic_grow_t *g,
                   int **out_p, int *n_out_p)
{
    int extra = g != NULL && !g->closed ? g->n : 0, k = 0, i = 0, j = 0;
    int *out = malloc((size_t)(n + extra) * sizeof(int));

    if (out == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "elastic: out of memory");
    }
    while (i < n || j < extra) {        /* merge two increasing lists */
        if (j >= extra || (i < n && members[i] < g->ranks[j])) {
            out[k++] = members[i++];
        } else if (i >= n || g->ranks[j] < members[i]) {
            out[k++] = g->ranks[j++];
        } else {
            out[k++] = members[i++];    /* a member listed as a joiner */
            j++;
        }
    }
    *out_p = out;
    *n_out_p = k;
    return TD_OK;
}

td_status_t
elastic_join_admitted(td_store_t *store, int64_t epoch, int me, int world,
                      elastic_grow_t *g)
{
    int found;
    td_status_t st = grow_read(store, epoch, world, &found, g);

    if (st != TD_OK) {
        return st;
    }
    if (found && !g->closed && sorted_has(g->ranks, g->n, me)) {
        return TD_OK;
    }
    if (found) {
        elastic_grow_free(g);
    }
    return td_error(TD_ERR_STATE, "elastic: rank %d is refused for epoch %"
                    PRId64 ": epoch %" PRId64 "'s growth %s (a stale "
                    "request; ask again after epoch %" PRId64 ")", me,
                    epoch + 1, epoch, !found ? "is not decided" :
                    g->closed ? "was closed by a recovery" :
                    "admits other ranks", epoch + 1);
}

/* The members of epoch EPOCH (the world at 0), from its plan. */
static td_status_t
epoch_members(td_store_t *store, int64_t epoch, int world, int **m_p, int *n_p)
{
    elastic_plan_t p = {0};
    int found = 1;
    td_status_t st = TD_OK;

    if (epoch > 0) {
        st = plan_read(store, epoch, &found, &p);
    }
    if (st != TD_OK) {
        return st;
    }
    if (!found) {
        return td_error(TD_ERR_PROTOCOL, "elastic: the plan of epoch %" PRId64
                        " is gone from the store", epoch);
    }
    if (epoch == 0) {
        p.ranks = malloc((size_t)world * sizeof(int));
        if (p.ranks == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "elastic: out of memory");
        }
        for (int r = 0; r < world; r++) {
            p.ranks[r] = r;
        }
        p.n = world;
    }
    *m_p = p.ranks;
    *n_p = p.n;
    return TD_OK;
}

td_status_t
elastic_join_wait(td_store_t *store, int me, int world, double timeout,
                  int64_t *epoch_p, int **old_p, int *n_old_p, int **cands_p,
                  int *n_p)
{
    double t0 = td_now_s();
    int64_t epoch = 0, asked = -1;
    char key[96];
    td_status_t st;

    if (store == NULL || me < 0 || me >= world) {
        return td_error(TD_ERR_INVALID, "elastic: a replacement for rank %d "
                        "of %d", me, world);
    }
    for (;;) {
        int found = 0, *members = NULL, n = 0;
        elastic_grow_t g = {0};

        st = epoch_last(store, &epoch);
        if (st != TD_OK) {
            return st;
        }
        st = epoch_members(store, epoch, world, &members, &n);
        if (st != TD_OK) {
            return st;
        }
        if (!sorted_has(members, n, me) && asked != epoch) {
            snprintf(key, sizeof(key), "td/el/%" PRId64 "/want/%d", epoch,
                     me);
            st = td_store_set(store, key, "1", 1);             /* Q9 */
            asked = epoch;
        }
        if (st == TD_OK && asked == epoch) {
            st = grow_read(store, epoch, world, &found, &g);
            if (st == TD_OK && found && !g.closed &&
                sorted_has(g.ranks, g.n, me)) {
                st = elastic_candidates(members, n, &g, cands_p, n_p);
                elastic_grow_free(&g);
                if (st == TD_OK) {
                    *epoch_p = epoch;
                    *old_p = members;
                    *n_old_p = n;
                } else {
                    free(members);
                }
                return st;
            }
            elastic_grow_free(&g);
        }
        free(members);
        if (st != TD_OK) {
            return st;
        }
        if (td_now_s() - t0 > timeout) {
            return td_error(TD_ERR_TIMEOUT, "elastic: rank %d (a replacement)"
                            " was not admitted within %.3g s (the current "
                            "epoch is %" PRId64 "%s)", me, timeout, epoch,
                            asked == epoch ? "" : "; this rank is still one "
                            "of its members: the others have not dropped "
                            "it");
        }
        if (found || asked != epoch) {
            /* decided without us, or we are still a member: the next
             * plan comes; look again soon */
            struct timespec ts = { 0, 5000000 };

            nanosleep(&ts, NULL);
        } else {
            /* the record, in short slices (a recovery may write the next
             * plan instead) */
            char gk[64];
            const char *keys[1] = { gk };

            snprintf(gk, sizeof(gk), "td/el/%" PRId64 "/grow", epoch);
            st = td_store_wait(store, keys, 1, 0.01);
            if (st == TD_ERR_TIMEOUT) {
                td_error_clear();
            } else if (st != TD_OK) {
                return st;
            }
        }
    }
}

/* A released claim's value (Q12): the rank is vacant again. */
#define CLAIM_RELEASED "-"

/* Set KEY from FROM ("": absent) to TO in one step; *GOT whether it now
 * holds TO. */
static td_status_t
claim_swap(td_store_t *store, const char *key, const char *from,
           const char *to, int *got)
{
    void *val = NULL;
    size_t len = 0;
    td_status_t st;

    st = td_store_compare_set(store, key, from, strlen(from), to, strlen(to),
                              &val, &len);
    *got = st == TD_OK && len == strlen(to) && memcmp(val, to, len) == 0;
    free(val);
    if (st == TD_ERR_NOT_FOUND) {       /* absent, FROM not "": unchanged */
        td_error_clear();
        st = TD_OK;
    }
    return st;
}

static td_status_t
claimer_check(const char *claimer)
{
    size_t len = claimer != NULL ? strlen(claimer) : 0;

    if (len == 0 || len > ELASTIC_CLAIMER_MAX ||
        strcmp(claimer, CLAIM_RELEASED) == 0) {
        return td_error(TD_ERR_INVALID, "elastic: a claimer is named by 1 "
                        "to %d characters, not '%s'", ELASTIC_CLAIMER_MAX,
                        claimer != NULL ? claimer : "(null)");
    }
    return TD_OK;
}

td_status_t
elastic_vacant_release(td_store_t *store, int world, const char *claimer,
                       int *n_released_p)
{
    int64_t epoch = 0;
    int n = 0;
    char key[96];
    td_status_t st;

    *n_released_p = 0;
    if (store == NULL || world < 1 || world > ELASTIC_RANKS_MAX) {
        return td_error(TD_ERR_INVALID, "elastic: releasing the claims of a "
                        "world of %d", world);
    }
    if ((st = claimer_check(claimer)) != TD_OK ||
        (st = epoch_last(store, &epoch)) != TD_OK) {
        return st;
    }
    for (int r = 0; r < world; r++) {
        int got = 0;

        snprintf(key, sizeof(key), "td/el/%" PRId64 "/claim/%d", epoch, r);
        /* only a claim that names CLAIMER changes (absent stays absent) */
        st = claim_swap(store, key, claimer, CLAIM_RELEASED, &got);
        if (st != TD_OK) {
            return st;
        }
        n += got;
    }
    *n_released_p = n;
    return TD_OK;
}

td_status_t
elastic_vacant_claim(td_store_t *store, int world, int first,
                     const char *claimer, int *rank_p, int64_t *epoch_p,
                     int *n_vacant_p)
{
    elastic_grow_t g = {0};
    int64_t epoch = 0;
    int found = 0, *members = NULL, n = 0, *vacant = NULL, nv = 0, lacks = 0;
    char key[96];
    td_status_t st;

    if (store == NULL || world < 1 || world > ELASTIC_RANKS_MAX ||
        first < 0) {
        return td_error(TD_ERR_INVALID, "elastic: a vacancy of a world of %d "
                        "(task %d)", world, first);
    }
    if ((st = claimer_check(claimer)) != TD_OK) {
        return st;
    }
    st = epoch_last(store, &epoch);
    if (st != TD_OK) {
        return st;
    }
    st = epoch_members(store, epoch, world, &members, &n);
    if (st == TD_OK) {
        st = grow_read(store, epoch, world, &found, &g);
    }
    if (st == TD_OK && (vacant = malloc((size_t)world * sizeof(int))) == NULL) {
        st = td_error(TD_ERR_NO_MEMORY, "elastic: out of memory");
    }
    for (int r = 0; st == TD_OK && r < world; r++) {
        void *val = NULL;
        size_t len;

        if (sorted_has(members, n, r)) {
            continue;
        }
        lacks++;
        if (found && !g.closed && sorted_has(g.ranks, g.n, r)) {
            continue;                       /* admitted, joining */
        }
        snprintf(key, sizeof(key), "td/el/%" PRId64 "/want/%d", epoch, r);
        st = td_store_get(store, key, 0, &val, &len);
        free(val);
        if (st == TD_OK) {
            continue;                       /* a replacement asked */
        }
        if (st != TD_ERR_NOT_FOUND) {
            break;
        }
        td_error_clear();
        st = TD_OK;
        vacant[nv++] = r;
    }
    elastic_grow_free(&g);
    free(members);
    *n_vacant_p = nv;
    for (int i = 0; st == TD_OK && i < nv; i++) {
        int r = vacant[(first + i) % nv];
        int got = 0;

        /* Q12: the first to set the absent key, or to replace a released
         * one, holds the rank */
        snprintf(key, sizeof(key), "td/el/%" PRId64 "/claim/%d", epoch, r);
        st = claim_swap(store, key, "", claimer, &got);
        if (st == TD_OK && !got) {
            st = claim_swap(store, key, CLAIM_RELEASED, claimer, &got);
        }
        if (st == TD_OK && got) {
            *rank_p = r;
            *epoch_p = epoch;
            free(vacant);
            return TD_OK;
        }
    }
    if (st == TD_OK) {
        st = td_error(TD_ERR_NOT_FOUND, "elastic: epoch %" PRId64 " of a "
                      "world of %d %s", epoch, world, lacks == 0 ?
                      "lacks no rank: nothing to replace (yet)" :
                      "lacks ranks, but a replacement holds each already");
    }
    free(vacant);
    return st;
}
