/* test_quorum: the survivors' agreement on a new epoch (runtime/elastic/
 * quorum.h, Q1-Q6) in one process: a store server and one client per
 * "rank", each rank a thread joining concurrently.
 *   1. the plan's text round-trips; malformed plans are rejected;
 *   2. one death declared by one survivor: all three survivors adopt the
 *      same plan; the dead rank, alive after all (late), is refused;
 *   3. two deaths declared by different survivors, with different
 *      committed steps: the source is the lowest rank at the highest step,
 *      and the plan says some are behind;
 *   4. a death during the recovery: epoch 2 from epoch 1's members;
 *   5. a silent rank (neither joined nor declared): the plan closes after
 *      the timeout without it; it is refused when it comes;
 *   6. a rank declared dead that joins anyway (cut off, not dead): the
 *      others' plan leaves it out and it is refused;
 *   7. growth (Q7-Q9): the growth record round-trips, malformed ones are
 *      rejected; a replacement for rank 2 asks after epoch 1 ({0, 1, 3}),
 *      rank 0's boundary check admits it (step 6 = committed 5 + 1), the
 *      others read the same record, and epoch 2 is {0, 1, 2, 3} from
 *      rank 0 at step 6, behind (the joiner brings -1);
 *   8. a recovery closes the record first: rank 0's check then admits
 *      nobody, and the joiner is refused for the next epoch;
 *   9. a request from a stale epoch (asked after epoch 3, read at epoch
 *      4) is not carried over: no record, and the joiner is refused;
 *  10. Q13 at world 2: rank 1 silent (cut off from the store, not dead):
 *      rank 0 forms no epoch alone; it fails after 2 x timeout + 1 s,
 *      naming rank 1 and Q13, and leaves no plan; rank 1, back, declares
 *      it dead and forms the epoch alone;
 *  11. Q13's late declaration: rank 0 waits on a silent rank 1 that its
 *      transport loses after it joined: it declares it then, and the plan
 *      is {0};
 *  12. Q13's test hold (TODIST_TEST_ELASTIC_HOLD): rank 0, its hold file
 *      absent, waits past its bound (2 x 0.05 + 1 s; the test waits that
 *      out) and then takes the plan rank 1, back, writes (refused: it is
 *      not in it); with the file there, it fails at the bound as in 10;
 *  13. Q2's read order: rank 1 declares rank 0 dead and joins just as
 *      rank 0, which waits for it, has read rank 0's dead/ key (the
 *      test's td_store_get, linked with --wrap, writes rank 1's keys
 *      then): rank 0 must not see rank 1 joined without its declaration
 *      and write itself into the plan: it writes no plan (it fails at its
 *      bound, "no plan"). Before, reading each member's in/ and dead/
 *      keys in turn, it wrote {0, 1}. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "runtime/elastic/quorum.h"
#include "tests/tap.h"
#include <todist/todist.h>

#define TOKEN "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define MAXR 8

static uint16_t port;

/* Check 13: td_store_get, wrapped (elastic.mk: -Wl,--wrap), runs
 * race_cb once, after the read of race_key (a non-blocking get) */
static const char *volatile race_key;
static void (*volatile race_cb)(void);

td_status_t __real_td_store_get(td_store_t *store, const char *key,
                                double timeout, void **value_p,
                                size_t *len_p);
td_status_t __wrap_td_store_get(td_store_t *store, const char *key,
                                double timeout, void **value_p,
                                size_t *len_p);

td_status_t
__wrap_td_store_get(td_store_t *store, const char *key, double timeout,
                    void **value_p, size_t *len_p)
{
    td_status_t st = __real_td_store_get(store, key, timeout, value_p, len_p);
    const char *k = race_key;

    if (k != NULL && strcmp(key, k) == 0 &&
        __atomic_exchange_n(&race_key, NULL, __ATOMIC_ACQ_REL) != NULL) {
        race_cb();
    }
    return st;
}

typedef struct {
    int64_t        epoch;
    int            me;
    const int     *members;
    int            n;
    unsigned char  dead[MAXR];
    int64_t        committed;
    double         timeout;
    const char    *hold;      /* Q13's test hold, NULL: none */
    td_status_t    st;
    char           err[512];
    elastic_plan_t plan;
} joiner_t;

static void *
join_thread(void *arg)
{
    joiner_t *j = arg;
    td_store_t *c;

    j->st = td_store_connect("127.0.0.1", port, TOKEN, 10, &c);
    if (j->st == TD_OK) {
        j->st = elastic_quorum_join(c, j->epoch, j->me, j->members, j->n,
                                    j->dead, j->committed, j->timeout,
                                    j->hold, &j->plan);
        td_store_close(c);
    }
    snprintf(j->err, sizeof(j->err), "%s", j->st != TD_OK ? td_last_error()
                                                           : "");
    return NULL;
}

/* Run the N joiners at once. */
static void
run(joiner_t *j, int n)
{
    pthread_t t[MAXR];

    for (int i = 0; i < n; i++) {
        pthread_create(&t[i], NULL, join_thread, &j[i]);
    }
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
    }
}

static void
ranks_text(const elastic_plan_t *p, char *buf, size_t len)
{
    size_t off = 0;

    buf[0] = '\0';
    for (int i = 0; i < p->n && off < len; i++) {
        off += (size_t)snprintf(buf + off, len - off, "%s%d", i ? " " : "",
                                p->ranks[i]);
    }
}

static void
check_plan(joiner_t *j, const char *want_ranks, int64_t step, int source,
           int behind, const char *what)
{
    char got[64];

    if (!ok(j->st == TD_OK, "%s: rank %d joins (%s)", what, j->me, j->err)) {
        return;
    }
    ranks_text(&j->plan, got, sizeof(got));
    is_str(got, want_ranks, "%s: rank %d adopts members %s", what, j->me,
           want_ranks);
    ok(j->plan.step == step && j->plan.source == source &&
       j->plan.behind == behind, "%s: rank %d: step %lld source %d behind %d "
       "(want %lld %d %d)", what, j->me, (long long)j->plan.step,
       j->plan.source, j->plan.behind, (long long)step, source, behind);
}

static joiner_t
joiner(int64_t epoch, int me, const int *members, int n, int64_t committed,
       double timeout)
{
    joiner_t j;

    memset(&j, 0, sizeof(j));
    j.epoch = epoch;
    j.me = me;
    j.members = members;
    j.n = n;
    j.committed = committed;
    j.timeout = timeout;
    return j;
}

static void
codec(void)
{
    int r[3] = {0, 2, 5};
    elastic_plan_t p = { .epoch = 3, .step = 41, .source = 2, .behind = 1,
                         .n = 3, .ranks = r }, q;
    char *text = NULL;
    static const char *bad[] = {
        "v2 1 5 0 0 1 0",            /* another version */
        "v1 1 5 0 0 2 1 0",          /* ranks not increasing */
        "v1 1 5 3 0 2 0 1",          /* the source is not a member */
        "v1 1 5 0 0 2 0 1 ",         /* trailing bytes */
        "v1 1 5 0 0 3 0 1",          /* fewer ranks than the count */
        "v1 1 5 0 0 1 9",            /* a rank past the world (8) */
        "v1 1 x 0 0 1 0",            /* not a number */
        "v1 1 5 0 2 1 0",            /* behind is 0 or 1 */
    };

    is_int(elastic_plan_encode(&p, &text), TD_OK, "a plan encodes");
    is_str(text, "v1 3 41 2 1 3 0 2 5", "its text");
    if (is_int(elastic_plan_decode(text, strlen(text), MAXR, &q), TD_OK,
               "and decodes")) {
        ok(q.epoch == 3 && q.step == 41 && q.source == 2 && q.behind == 1 &&
           q.n == 3 && q.ranks[0] == 0 && q.ranks[1] == 2 && q.ranks[2] == 5,
           "to the same plan");
        elastic_plan_free(&q);
    }
    free(text);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        is_int(elastic_plan_decode(bad[i], strlen(bad[i]), MAXR, &q),
               TD_ERR_PROTOCOL, "rejected: '%s'", bad[i]);
    }
}

static void
grow_codec(void)
{
    int r[2] = {2, 5};
    elastic_grow_t g = { .step = 6, .n = 2, .ranks = r }, q;
    char *text = NULL;
    static const char *bad[] = {
        "v1 6 2 5 2",                /* not increasing */
        "v1 6 1 8",                  /* past the world (8) */
        "v1 6 2 2",                  /* fewer ranks than the count */
        "v1 6 1 2 ",                 /* trailing bytes */
        "nonex",                     /* not the closed record */
        "v2 6 1 2",                  /* another version */
    };

    is_int(elastic_grow_encode(&g, &text), TD_OK, "a growth record encodes");
    is_str(text, "v1 6 2 2 5", "its text");
    if (is_int(elastic_grow_decode(text, strlen(text), MAXR, &q), TD_OK,
               "and decodes")) {
        ok(!q.closed && q.step == 6 && q.n == 2 && q.ranks[0] == 2 &&
           q.ranks[1] == 5, "to the same record");
        elastic_grow_free(&q);
    }
    free(text);
    ok(elastic_grow_decode("none", 4, MAXR, &q) == TD_OK && q.closed,
       "'none' is the closed record");
    /* Q10: rank 0 may be a joiner (the launcher serves the store) */
    if (is_int(elastic_grow_decode("v1 6 1 0", 8, MAXR, &q), TD_OK,
               "a record admitting rank 0 decodes")) {
        elastic_grow_free(&q);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        is_int(elastic_grow_decode(bad[i], strlen(bad[i]), MAXR, &q),
               TD_ERR_PROTOCOL, "growth record rejected: '%s'", bad[i]);
    }
}

typedef struct {
    int         me;          /* the replacement's world rank */
    td_status_t st;
    int64_t     epoch;
    int        *old, n_old, *cands, n_cands;
} waiter_t;

static void *
wait_thread(void *arg)
{
    waiter_t *w = arg;
    td_store_t *c;

    w->st = td_store_connect("127.0.0.1", port, TOKEN, 10, &c);
    if (w->st == TD_OK) {
        w->st = elastic_join_wait(c, w->me, 4, 30, &w->epoch, &w->old,
                                  &w->n_old, &w->cands, &w->n_cands);
        td_store_close(c);
    }
    return NULL;
}

static void
list_text(const int *r, int n, char *buf, size_t len)
{
    elastic_plan_t p = { .n = n, .ranks = (int *)r };

    ranks_text(&p, buf, len);
}

static void
growth(void)
{
    static const int m3[3] = {0, 1, 3};
    const char *plan1 = "v1 1 5 0 0 3 0 1 3";
    td_store_t *c;
    waiter_t w = { .me = 2 };
    pthread_t t;
    elastic_grow_t g = {0}, g1 = {0};
    joiner_t j[4];
    char txt[64];
    const char *keys[1] = { "td/el/1/want/2" };
    int found = 0;

    if (td_store_connect("127.0.0.1", port, TOKEN, 10, &c) != TD_OK) {
        diag("store: %s", td_last_error());
        return;
    }
    /* 7: epoch 1 is {0, 1, 3}; the replacement for 2 asks, rank 0 admits */
    td_store_set(c, "td/el/1/plan", plan1, strlen(plan1));
    pthread_create(&t, NULL, wait_thread, &w);
    is_int(td_store_wait(c, keys, 1, 30), TD_OK,
           "the replacement asks to join after epoch 1 (want/2)");
    is_int(elastic_grow_check(c, 1, 1, m3, 3, 4, 5, 0, &found, &g), TD_OK,
           "rank 1's boundary check");
    is_int(found, 0, "rank 1 does not admit (only rank 0 decides, Q7)");
    is_int(elastic_grow_check(c, 1, 0, m3, 3, 4, 5, 0, &found, &g), TD_OK,
           "rank 0's boundary check");
    ok(found && !g.closed && g.step == 6 && g.n == 1 && g.ranks[0] == 2,
       "rank 0 admits rank 2 at step 6 (its committed 5 + 1, Q8)");
    ok(elastic_grow_check(c, 1, 1, m3, 3, 4, 5, 0, &found, &g1) == TD_OK &&
       found && g1.step == 6 && g1.n == 1, "rank 1 reads the same record");
    elastic_grow_free(&g);
    elastic_grow_free(&g1);
    pthread_join(t, NULL);
    is_int(w.st, TD_OK, "the replacement is admitted");
    list_text(w.cands, w.n_cands, txt, sizeof(txt));
    ok(w.epoch == 1 && strcmp(txt, "0 1 2 3") == 0 && w.n_old == 3,
       "after epoch 1 (of 3 members), candidates %s", txt);
    j[0] = joiner(2, 0, w.cands, w.n_cands, 6, 30);
    j[1] = joiner(2, 1, w.cands, w.n_cands, 6, 30);
    j[2] = joiner(2, 3, w.cands, w.n_cands, 6, 30);
    j[3] = joiner(2, 2, w.cands, w.n_cands, -1, 30);
    run(j, 4);
    for (int i = 0; i < 4; i++) {
        check_plan(&j[i], "0 1 2 3", 6, 0, 1, "growth");
        elastic_plan_free(&j[i].plan);
    }
    free(w.old);
    free(w.cands);

    /* 8: epoch 3 = {0, 1, 3} again; a recovery closes its record before
     * rank 0's check sees the request */
    {
        const char *p3 = "v1 3 9 0 0 3 0 1 3";

        td_store_set(c, "td/el/3/plan", p3, strlen(p3));
    }
    ok(elastic_grow_close(c, 3, 4, &g) == TD_OK && g.closed,
       "a recovery closes epoch 3's growth ('none')");
    td_store_set(c, "td/el/3/want/2", "1", 1);
    ok(elastic_grow_check(c, 3, 0, m3, 3, 4, 9, 0, &found, &g) == TD_OK &&
       found && g.closed, "rank 0's check then admits nobody (Q7)");
    is_int(elastic_join_admitted(c, 3, 2, 4, &g), TD_ERR_STATE,
           "the joiner is refused for epoch 4");
    like(td_last_error(), "rank 2 is refused for epoch 4: epoch 3's growth "
         "was closed by a recovery", "naming the closed record");

    /* 9: epoch 4 = {0, 1, 3}; the request of epoch 3 is stale there */
    {
        const char *p4 = "v1 4 9 0 0 3 0 1 3";

        td_store_set(c, "td/el/4/plan", p4, strlen(p4));
    }
    ok(elastic_grow_check(c, 4, 0, m3, 3, 4, 9, 0.05, &found, &g) == TD_OK &&
       !found, "a request of epoch 3 is not read at epoch 4 (Q9)");
    is_int(elastic_join_admitted(c, 4, 2, 4, &g), TD_ERR_STATE,
           "the stale joiner is refused for epoch 5");
    like(td_last_error(), "epoch 4's growth is not decided \\(a stale "
         "request", "as a stale request");

    /* 10: epoch 5 = {1, 2, 3}: rank 0 was lost (the launcher serves the
     * store); its replacement asks, the lowest member admits it (Q10) */
    {
        static const int m5[3] = {1, 2, 3};
        const char *p5 = "v1 5 9 1 0 3 1 2 3";
        const char *k5[1] = { "td/el/5/want/0" };
        waiter_t w0 = { .me = 0 };

        td_store_set(c, "td/el/5/plan", p5, strlen(p5));
        pthread_create(&t, NULL, wait_thread, &w0);
        is_int(td_store_wait(c, k5, 1, 30), TD_OK,
               "a replacement for rank 0 asks to join after epoch 5");
        ok(elastic_grow_check(c, 5, 2, m5, 3, 4, 9, 0, &found, &g) ==
           TD_OK && !found, "rank 2 does not admit (not the lowest member)");
        ok(elastic_grow_check(c, 5, 1, m5, 3, 4, 9, 0, &found, &g) ==
           TD_OK && found && g.step == 10 && g.n == 1 && g.ranks[0] == 0,
           "rank 1, the lowest, admits rank 0 at step 10 (Q10)");
        elastic_grow_free(&g);
        pthread_join(t, NULL);
        list_text(w0.cands, w0.n_cands, txt, sizeof(txt));
        ok(w0.st == TD_OK && w0.epoch == 5 && strcmp(txt, "0 1 2 3") == 0,
           "rank 0's replacement is admitted after epoch 5: candidates %s",
           txt);
        free(w0.old);
        free(w0.cands);
    }
    td_store_close(c);
}

/* 11 (Q12): vacancies for a replacement started without a rank (srun
 * --todist=join): none in epoch 0; after epoch 1 = {0, 2} of 4, ranks 1
 * and 3; two claimers of one step take different ones; a rank asked for
 * (want/) or in the growth record is not vacant; none left is refused. */
static void
vacancies(void)
{
    const char *p1 = "v1 1 7 0 0 2 0 2";
    td_store_t *c;
    int r = -1, r2 = -1, nv = -1;
    int64_t e = -1;

    if (td_store_connect("127.0.0.1", port, TOKEN, 10, &c) != TD_OK) {
        diag("store: %s", td_last_error());
        return;
    }
    is_int(elastic_vacant_claim(c, 4, 0, "100@a", &r, &e, &nv),
           TD_ERR_NOT_FOUND, "epoch 0 (the whole world): no vacancy");
    like(td_last_error(), "epoch 0 of a world of 4 lacks no rank: nothing "
         "to replace", "the refusal says the epoch lacks none");
    td_store_set(c, "td/el/1/plan", p1, strlen(p1));
    ok(elastic_vacant_claim(c, 4, 0, "100@a", &r, &e, &nv) == TD_OK &&
       r == 1 && e == 1 && nv == 2, "epoch 1 = {0, 2}: task 0 takes rank 1 "
       "(of 2 vacancies)");
    ok(elastic_vacant_claim(c, 4, 0, "101@b", &r2, &e, &nv) == TD_OK &&
       r2 == 3, "a second claimer starting at the same place takes rank 3 "
       "(Q12)");
    is_int(elastic_vacant_claim(c, 4, 1, "102@a", &r, &e, &nv),
           TD_ERR_NOT_FOUND, "a third finds none left");
    like(td_last_error(), "epoch 1 of a world of 4 lacks ranks, but a "
         "replacement holds each already", "naming why");
    {
        /* The claim names its claimer; once the claimer ended, its claims
         * are released and the ranks are vacant again (Q12). */
        void *v = NULL;
        size_t len = 0;
        int n = -1;

        ok(td_store_get(c, "td/el/1/claim/1", 0, &v, &len) == TD_OK &&
           len == 5 && memcmp(v, "100@a", 5) == 0,
           "a claim names its claimer");
        free(v);
        ok(elastic_vacant_release(c, 4, "999@a", &n) == TD_OK && n == 0 &&
           elastic_vacant_claim(c, 4, 0, "102@a", &r, &e, &nv) ==
           TD_ERR_NOT_FOUND, "another claimer's release frees nothing");
        ok(elastic_vacant_release(c, 4, "100@a", &n) == TD_OK && n == 1,
           "the claimer ended (died before it asked): its claim is released");
        ok(elastic_vacant_claim(c, 4, 1, "102@a", &r, &e, &nv) == TD_OK &&
           r == 1 && e == 1 && nv == 2,
           "and a new claimer takes that rank (rank 3 still held)");
        is_int(elastic_vacant_claim(c, 4, 0, "", &r, &e, &nv),
               TD_ERR_INVALID, "a claimer without a name is refused");
    }
    {
        /* epoch 2 = {0}: 1 asked (want/), 2 is in the growth record */
        const char *p2 = "v1 2 9 0 0 1 0", *g2 = "v1 10 1 2";
        int n = -1;

        td_store_set(c, "td/el/2/plan", p2, strlen(p2));
        td_store_set(c, "td/el/2/claim/1", "103@a", 5);
        td_store_set(c, "td/el/2/want/1", "1", 1);
        td_store_set(c, "td/el/2/grow", g2, strlen(g2));
        ok(elastic_vacant_release(c, 4, "103@a", &n) == TD_OK && n == 1,
           "epoch 2: rank 1's claimer asked (want/), then ended: released");
    }
    ok(elastic_vacant_claim(c, 4, 0, "104@a", &r, &e, &nv) == TD_OK &&
       r == 3 && e == 2 && nv == 1, "epoch 2 = {0}, 1 asked (its claim "
       "released), 2 admitted: only rank 3 is vacant");
    td_store_close(c);
}

/* 10, 11: quorum.h Q13, a silent member at world 2 */
static void
silence(void)
{
    static const int m2[2] = {0, 1};
    joiner_t j[2];
    pthread_t t;
    td_store_t *c;
    void *v = NULL;
    size_t len = 0;
    int found = 0;

    /* 10: rank 1 never comes while rank 0 waits */
    j[0] = joiner(11, 0, m2, 2, 3, 0.3);
    run(j, 1);
    is_int(j[0].st, TD_ERR_TIMEOUT, "Q13: rank 0 alone forms no epoch on "
           "silence (%s)", j[0].err);
    like(j[0].err, "rank 0 formed no epoch 11: rank\\(s\\) 1 neither joined "
         "nor were declared dead within 1.6 s, and 1 of the 2 members not "
         "declared dead is no majority \\(quorum.h Q13\\)",
         "Q13: the error names the silent rank and the rule");
    if (td_store_connect("127.0.0.1", port, TOKEN, 10, &c) != TD_OK) {
        ok(0, "store: %s", td_last_error());
        return;
    }
    ok(td_store_get(c, "td/el/11/plan", 0, &v, &len) == TD_ERR_NOT_FOUND,
       "Q13: no plan was written");
    free(v);
    td_error_clear();
    /* rank 1 comes back: it lost rank 0, declares it, forms {1} */
    j[1] = joiner(11, 1, m2, 2, 3, 0.3);
    j[1].dead[0] = 1;
    run(&j[1], 1);
    check_plan(&j[1], "1", 3, 1, 0, "Q13: the dropper back");
    elastic_plan_free(&j[1].plan);

    /* 11: rank 0's transport loses rank 1 once rank 0 joined (a long
     * timeout: the declaration, not the clock, closes the plan) */
    j[0] = joiner(13, 0, m2, 2, 3, 30);
    pthread_create(&t, NULL, join_thread, &j[0]);
    for (int i = 0; i < 30000 && !found; i++) {
        v = NULL;
        found = td_store_get(c, "td/el/13/in/0", 0, &v, &len) == TD_OK;
        free(v);
        if (!found) {
            td_error_clear();
            usleep(1000);
        }
    }
    ok(found, "Q13: rank 0 joined epoch 13");
    __atomic_store_n(&j[0].dead[1], 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    check_plan(&j[0], "0", 3, 0, 0, "Q13: a loss while waiting");
    elastic_plan_free(&j[0].plan);
    v = NULL;
    ok(td_store_get(c, "td/el/13/dead/1", 0, &v, &len) == TD_OK && len == 1 &&
       memcmp(v, "0", 1) == 0, "Q13: rank 0 declared rank 1 dead late");
    free(v);

    /* 12: the hold; rank 1 comes only once rank 0's bound (1.1 s) passed
     * (a rank 0 slower to get there only waits less: no false failure) */
    j[0] = joiner(15, 0, m2, 2, 3, 0.05);
    j[0].hold = "/nonexistent/todist-test-hold";
    pthread_create(&t, NULL, join_thread, &j[0]);
    found = 0;
    for (int i = 0; i < 30000 && !found; i++) {
        v = NULL;
        found = td_store_get(c, "td/el/15/in/0", 0, &v, &len) == TD_OK;
        free(v);
        if (!found) {
            td_error_clear();
            usleep(1000);
        }
    }
    ok(found, "hold: rank 0 joined epoch 15");
    usleep(1600000);
    j[1] = joiner(15, 1, m2, 2, 3, 0.05);
    j[1].dead[0] = 1;
    run(&j[1], 1);
    check_plan(&j[1], "1", 3, 1, 0, "hold: the dropper back after the bound");
    elastic_plan_free(&j[1].plan);
    pthread_join(t, NULL);
    is_int(j[0].st, TD_ERR_STATE, "hold: rank 0, held past its bound, takes "
           "the dropper's plan and is refused (%s)", j[0].err);
    elastic_plan_free(&j[0].plan);
    j[0] = joiner(17, 0, m2, 2, 3, 0.05);
    j[0].hold = "/";
    run(j, 1);
    is_int(j[0].st, TD_ERR_TIMEOUT, "hold: with its file there, rank 0 "
           "fails at the bound (%s)", j[0].err);
    td_store_close(c);
}

/* 13: rank 1's keys, as its join writes them: its declaration, then its
 * in/ (Q2) */
static td_store_t *race_store;
static int race_done;

static void
race_rank1(void)
{
    race_done = td_store_set(race_store, "td/el/19/dead/0", "1", 1) == TD_OK &&
                td_store_set(race_store, "td/el/19/in/1", "3", 1) == TD_OK;
}

static void
read_order(void)
{
    static const int m2[2] = {0, 1};
    joiner_t j;
    void *v = NULL;
    size_t len = 0;

    if (td_store_connect("127.0.0.1", port, TOKEN, 10, &race_store) !=
        TD_OK) {
        ok(0, "store: %s", td_last_error());
        return;
    }
    race_cb = race_rank1;
    race_key = "td/el/19/dead/0";
    j = joiner(19, 0, m2, 2, 3, 0.05);
    run(&j, 1);
    ok(race_done, "Q2 order: rank 1 declared rank 0 dead and joined while "
       "rank 0 read the keys");
    is_int(j.st, TD_ERR_TIMEOUT, "Q2 order: rank 0 writes no plan with "
           "itself, declared dead, in it (%s)", j.err);
    elastic_plan_free(&j.plan);
    ok(td_store_get(race_store, "td/el/19/plan", 0, &v, &len) ==
       TD_ERR_NOT_FOUND, "Q2 order: no plan was written");
    free(v);
    td_error_clear();
    race_key = NULL;
    td_store_close(race_store);
}

int
main(void)
{
    static const int m4[4] = {0, 1, 2, 3}, m3[3] = {0, 1, 3},
                     m6[6] = {0, 1, 2, 3, 4, 5}, m3b[3] = {0, 1, 2};
    td_store_server_t *srv;
    joiner_t j[MAXR];
    double t0;

    plan(134);
    codec();
    grow_codec();
    if (td_store_server_start("127.0.0.1", 0, TOKEN, &srv) != TD_OK) {
        diag("store: %s", td_last_error());
        return 1;
    }
    port = td_store_server_port(srv);

    /* 2: rank 2 died; only rank 1's transport saw it */
    j[0] = joiner(1, 0, m4, 4, 5, 30);
    j[1] = joiner(1, 1, m4, 4, 5, 30);
    j[2] = joiner(1, 3, m4, 4, 5, 30);
    j[1].dead[2] = 1;
    run(j, 3);
    for (int i = 0; i < 3; i++) {
        check_plan(&j[i], "0 1 3", 5, 0, 0, "one death");
        elastic_plan_free(&j[i].plan);
    }
    j[3] = joiner(1, 2, m4, 4, 5, 30);
    run(&j[3], 1);
    is_int(j[3].st, TD_ERR_STATE, "the dead rank, late, is refused");
    like(j[3].err, "rank 2 is stale: epoch 1 was formed without it",
         "naming it and the epoch");
    ok(strstr(j[3].err, "cannot rejoin") != NULL, "and that it cannot rejoin");

    /* 4: epoch 2 from epoch 1's {0, 1, 3}: 3 died during the recovery */
    j[0] = joiner(2, 0, m3, 3, 5, 30);
    j[1] = joiner(2, 1, m3, 3, 5, 30);
    j[0].dead[3] = 1;
    run(j, 2);
    for (int i = 0; i < 2; i++) {
        check_plan(&j[i], "0 1", 5, 0, 0, "a death during the recovery");
        elastic_plan_free(&j[i].plan);
    }

    /* 3: ranks 2 and 4 died, declared by different survivors; 1 and 3
     * completed step 8, 0 and 5 did not */
    j[0] = joiner(5, 0, m6, 6, 7, 30);
    j[1] = joiner(5, 1, m6, 6, 8, 30);
    j[2] = joiner(5, 3, m6, 6, 8, 30);
    j[3] = joiner(5, 5, m6, 6, 7, 30);
    j[0].dead[2] = 1;
    j[3].dead[4] = 1;
    run(j, 4);
    for (int i = 0; i < 4; i++) {
        check_plan(&j[i], "0 1 3 5", 8, 1, 1, "two deaths");
        elastic_plan_free(&j[i].plan);
    }

    /* 5: rank 2 is silent (not joined, not declared): the timeout */
    t0 = td_now_s();
    j[0] = joiner(7, 0, m3b, 3, 2, 0.3);
    j[1] = joiner(7, 1, m3b, 3, 2, 0.3);
    run(j, 2);
    for (int i = 0; i < 2; i++) {
        check_plan(&j[i], "0 1", 2, 0, 0, "a silent rank");
        elastic_plan_free(&j[i].plan);
    }
    ok(td_now_s() - t0 >= 0.3, "the plan waited for the timeout (%.3f s)",
       td_now_s() - t0);
    j[2] = joiner(7, 2, m3b, 3, 2, 0.3);
    run(&j[2], 1);
    is_int(j[2].st, TD_ERR_STATE, "the silent rank, late, is refused");

    /* 6: rank 2 is declared dead by rank 0 but joins (cut off) */
    j[0] = joiner(9, 0, m3b, 3, 4, 30);
    j[1] = joiner(9, 1, m3b, 3, 4, 30);
    j[2] = joiner(9, 2, m3b, 3, 4, 30);
    j[0].dead[2] = 1;
    run(j, 3);
    for (int i = 0; i < 2; i++) {
        check_plan(&j[i], "0 1", 4, 0, 0, "declared dead, alive");
        elastic_plan_free(&j[i].plan);
    }
    is_int(j[2].st, TD_ERR_STATE, "a rank declared dead is refused");
    like(j[2].err, "declared dead by a peer", "the reason lists it");

    silence();
    read_order();
    td_store_server_stop(srv);

    /* 7-9 on a store of their own (the replacement walks the plans) */
    if (td_store_server_start("127.0.0.1", 0, TOKEN, &srv) != TD_OK) {
        diag("store: %s", td_last_error());
        return 1;
    }
    port = td_store_server_port(srv);
    growth();
    td_store_server_stop(srv);

    if (td_store_server_start("127.0.0.1", 0, TOKEN, &srv) != TD_OK) {
        diag("store: %s", td_last_error());
        return 1;
    }
    port = td_store_server_port(srv);
    vacancies();
    td_store_server_stop(srv);
    return exit_status();
}
