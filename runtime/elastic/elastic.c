/* runtime/elastic/elastic.c: in-place recovery (todist/elastic.h): the
 * epochs' groups over the quorum (quorum.h), the runtime's members, and
 * the dead ranks the transport reports (a runtime module).
 *
 * Invariants (EL1..EL13):
 *  EL1 Epoch E's group has the id COLL_EPOCH_ID_BASE + E (coll/match.h)
 *      and the plan's ranks in increasing world rank; epoch 0 is the
 *      world's group. Every member builds it from the same plan (Q1),
 *      so ids and digests agree without a message, and a stale rank's
 *      messages for an older epoch's group are dropped (C11).
 *  EL2 The old group is destroyed only after the new one is registered
 *      (ids above it stay "not yet made", never "destroyed").
 *  EL3 lost[] (the dead ranks) is written by the progress thread
 *      (peer_failed) and read by the application thread: atomic bytes;
 *      a rank once lost stays lost for this process until a replacement
 *      for it is readmitted (EL7).
 *  EL4 The runtime's members (td__runtime_set_members) follow each plan,
 *      so td_barrier and td_finalize wait for members only.
 *  EL5 A rank entering a recovery first aborts the old group on every
 *      member (coll_group_abort_all): a member blocked in an operation
 *      that did not involve the dead rank (its transport never saw it
 *      die) fails at once and joins the agreement, instead of staying
 *      out until its timeout and being left out as silent.
 *  EL6 A rank behind the plan's step (self_behind) claims no step (-1)
 *      until the program calls td_elastic_commit after its heal: the heal
 *      writes its tensors in place (checkpoint.c CK5), so one cut short
 *      (the source died) must not make it the source of a part-written
 *      state in the next agreement. A plan whose step is -1 (every
 *      survivor part-written) fails the recovery.
 *  EL7 Growth (quorum.h Q7-Q9): a member readmits epoch E's joiners
 *      (td__runtime_readmit: their new address and endpoint; then lost[]
 *      of theirs cleared, once that returned: until the transport's reset
 *      ran, a late report of the old process's death could still come)
 *      before it joins epoch E + 1, once per epoch
 *      (grow_readmitted), so no message of epoch E + 1 goes to the old
 *      process and no member declares a joiner dead for its old process's
 *      death. A joiner starts with no committed step (-1): EL6's behind
 *      rank, healed from the source before its first step.
 *  EL8 td_elastic_admit runs at every step boundary on every member
 *      (quorum.h Q8) and costs nothing while the world is whole (no rank
 *      can ask to join); after a loss, a store read per boundary (the
 *      admitter, Q10: one more per rank out of the world).
 *  EL9 ZeRO (todist/zero.h) re-shards itself over the new epoch's group
 *      (td_zero_set_group, joiners td_zero_join; zero.h R1-R4): a lost
 *      rank's shard comes from the replica its ring neighbour keeps
 *      (opts.replicate), a step whose all-gather completed nowhere is
 *      rolled back; td_checkpoint_broadcast skips ZeRO items
 *      (checkpoint.c CK6). Without a replica, or with a shard and its
 *      replica both lost, the re-shard fails on every member and the
 *      program falls back to the last checkpoint (ckzero.h ZC3): make
 *      the optimizer again over the group and td_checkpoint_load. Until
 *      re-sharded, one whose group changed size refuses to step (Z5).
 * EL10 Every epoch re-forms the groups td_group_new made (coll group.c
 *      G2, G3) from the plan's ranks, right after the runtime's members:
 *      each keeps its creation list's members of the new epoch, in order,
 *      with an id every member derives from the epoch, so the subgroups
 *      shrink with a death and grow back with a replacement.
 *  EL11 Rank 0 is a rank like any other when the launcher serves the
 *       store (runtime.h R3): its loss shrinks the world, the lowest
 *       survivor admits (Q10) and is the heal's source among equals (Q5),
 *       and a replacement for it joins. When rank 0's process serves the
 *       store (srun --todist, todist-run without --no-kill), a recovery
 *       that finds rank 0 lost, or the store gone, fails at once naming
 *       that (TD_ERR_PEER), instead of an I/O error or a wait.
 *  EL12 A rank told by a member that this member dropped it (the transport's
 *       liveness check across hosts, transport.c L12: peer_failed with WHY
 *       TD_ERR_STATE; the transport's fate of that member, read too, is there
 *       before any call fails for it) is the one out, not that member: told[]
 *       records it and lost[] does not (so this rank never declares the
 *       dropper dead, Q2, and EL11 does not take a told rank 0 for lost). Its
 *       td_elastic_recover aborts the old group (EL5: a member that still
 *       hears it joins the agreement) and then fails with TD_ERR_STATE, "rank
 *       R was dropped by rank D (its host): it heard nothing from it for ...
 *       s; this rank leaves the job", without joining the agreement: the
 *       dropper declared it dead (Q2), so the members that still hear each
 *       other agree on the next epoch without it. One refused as stale (Q4)
 *       after a member declared it dead (td/el/<E>/dead/<R> names the
 *       declarer) fails the same way, naming the declarer, told or not yet
 *       told: an abort of a non-dropper can bring it into the agreement before
 *       the dropper's answer does. Before, it took the dropper for lost and
 *       declared it dead: the plan could leave out both (at world 2: no plan),
 *       or, with the dropper slower to the agreement, hold the dropped rank
 *       alone while the dropper was refused as stale. The process leaves; it
 *       never rejoins (Q4): a replacement its launcher starts with
 *       TODIST_ELASTIC_JOIN=1 joins through EL7 (the members' revive forgets
 *       that they dropped the old process, transport.c R1).
 *  EL13 A recovery sees every peer the transport failed as lost, even
 *       before this module's peer_failed ran: it runs after the
 *       collectives' (modules.c's order), and the failure it reports
 *       can end the program's collective first, so a recovery could
 *       begin with lost[] unset. td_elastic_recover first marks lost
 *       each peer the transport records as failed (set before any hook
 *       runs) and that did not drop this rank (its fate, EL12), so EL11
 *       refuses at once naming rank 0 (it said "the store failed", or
 *       "rank 0 was lost", by the race), and this rank declares the dead
 *       in the agreement (Q2) instead of leaving them to its timeout
 *       (Q3). TODIST_TEST_ELASTIC_LATE=R:S (tests only) makes world rank
 *       R's peer_failed record a lost peer S seconds late, holding that
 *       window open. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "todist/elastic.h"
#include "base/clock.h"
#include "base/log.h"
#include "runtime/runtime.h"
#include "runtime/coll/group.h"
#include "runtime/coll/match.h"
#include "runtime/coll/tx.h"
#include "runtime/elastic/module.h"
#include "runtime/elastic/quorum.h"

struct td_elastic {
    td_elastic_opts_t opts;
    int64_t           epoch;
    int64_t           committed;
    td_group_t       *group;      /* the world's at epoch 0 */
    int              *members;    /* world ranks, increasing */
    int               n;
    int               grow_readmitted; /* EL7: this epoch's joiners */
    elastic_grow_t    grow;       /* this epoch's record, once read */
    int               grow_found;
};

static unsigned char *lost;       /* EL3: world-indexed */
static unsigned char *told;       /* EL12: it dropped this rank (as EL3) */
static int            lost_n;     /* the world's size, from setup */
static int            my_rank;    /* this rank in the world, from setup */
static unsigned       late_s;     /* EL13: TODIST_TEST_ELASTIC_LATE's S */
static char          *hold;       /* TODIST_TEST_ELASTIC_HOLD's PATH (Q13) */

/* TODIST_TEST_ELASTIC_LATE=R:S, tests only (EL13): on world rank R, the
 * seconds peer_failed waits before it records a lost peer. */
static unsigned
late_parse(int rank)
{
    const char *s = getenv("TODIST_TEST_ELASTIC_LATE");
    int r, sec;

    if (s == NULL || sscanf(s, "%d:%d", &r, &sec) != 2 || r != rank ||
        sec < 0 || sec > 60) {
        return 0;
    }
    return (unsigned)sec;
}

/* TODIST_TEST_ELASTIC_HOLD=R:PATH, tests only (quorum.h Q13): on world
 * rank R, the agreement's bound holds until PATH exists; a copy, NULL
 * when unset, for another rank or without memory. */
static char *
hold_parse(int rank)
{
    const char *s = getenv("TODIST_TEST_ELASTIC_HOLD");
    char *end;
    long r;

    if (s == NULL) {
        return NULL;
    }
    r = strtol(s, &end, 10);
    if (end == s || *end != ':' || end[1] == '\0' || r != rank) {
        return NULL;
    }
    return strdup(end + 1);
}

static td_status_t
module_setup(void *arg, td_transport_t *tp, const td_world_t *w)
{
    (void)arg;
    (void)tp;
    free(lost);
    free(told);
    lost = calloc((size_t)w->world_size, 1);
    told = calloc((size_t)w->world_size, 1);
    if (lost == NULL || told == NULL) {
        free(lost);
        free(told);
        lost = told = NULL;
        lost_n = 0;
        return td_error(TD_ERR_NO_MEMORY, "elastic: out of memory");
    }
    lost_n = w->world_size;
    my_rank = w->rank;
    late_s = late_parse(w->rank);
    free(hold);
    hold = hold_parse(w->rank);
    return TD_OK;
}

static void
module_peer_failed(void *arg, int rank, td_status_t why)
{
    (void)arg;
    if (late_s > 0 && why != TD_ERR_STATE) {
        td_log_info("elastic: TODIST_TEST_ELASTIC_LATE: rank %d's loss "
                    "recorded in %u s", rank, late_s);
        sleep(late_s);                      /* EL13, tests only */
    }
    if (lost != NULL && rank >= 0 && rank < lost_n) {
        /* EL12: TD_ERR_STATE, it dropped this rank and lives on */
        __atomic_store_n(why == TD_ERR_STATE ? &told[rank] : &lost[rank], 1,
                         __ATOMIC_RELEASE);
    }
}

static void
module_shutdown(void *arg)
{
    (void)arg;
    free(lost);
    free(told);
    free(hold);
    lost = NULL;
    told = NULL;
    hold = NULL;
    lost_n = 0;
}

const td_runtime_module_t td_elastic_module = {
    .name = "elastic",
    .setup = module_setup,
    .peer_failed = module_peer_failed,
    .shutdown = module_shutdown,
    .arg = NULL,
};

/* EL11: the store was served by rank 0's process, and rank 0 is gone. */
static td_status_t
store_gone(const char *what, const char *detail)
{
    char why[512];

    snprintf(why, sizeof(why), "%s", detail != NULL ? detail : "");
    return td_error(TD_ERR_PEER, "elastic: rank %d cannot recover: rank 0's "
                    "process serves the store, and %s%s%s%s; in-place "
                    "recovery outlives rank 0 only where the launcher serves "
                    "the store (todist-run --no-kill, srun "
                    "--todist=kill_on_fail=no)", my_rank, what,
                    why[0] ? " (" : "", why, why[0] ? ")" : "");
}

td_elastic_opts_t
td_elastic_defaults(void)
{
    td_elastic_opts_t o = { .timeout_s = 30, .min_size = 1,
                            .join_timeout_s = 300, .admit_wait_s = 0 };
    const char *t = getenv("TODIST_ELASTIC_TIMEOUT");

    if (t != NULL && atof(t) > 0) {
        o.timeout_s = atof(t);
    }
    t = getenv("TODIST_ELASTIC_JOIN_TIMEOUT");
    if (t != NULL && atof(t) > 0) {
        o.join_timeout_s = atof(t);
    }
    t = getenv("TODIST_ELASTIC_ADMIT_WAIT");
    if (t != NULL && atof(t) > 0) {
        o.admit_wait_s = atof(t);
    }
    return o;
}

int
td_elastic_replacement(void)
{
    return td__runtime_joining();
}

/* A handle with room for the world's members and OPTS (or the defaults)
 * checked: the part td_elastic_create and td_elastic_join share. */
static td_status_t
elastic_alloc(const td_elastic_opts_t *opts, td_elastic_t **el_p)
{
    td_elastic_t *el = calloc(1, sizeof(*el));

    if (el == NULL || (el->members = malloc(sizeof(int) *
                                            (size_t)lost_n)) == NULL) {
        free(el);
        return td_error(TD_ERR_NO_MEMORY, "elastic: out of memory");
    }
    el->opts = opts != NULL ? *opts : td_elastic_defaults();
    if (!(el->opts.timeout_s > 0) || el->opts.min_size < 1 ||
        !(el->opts.join_timeout_s > 0)) {
        td_status_t st = td_error(TD_ERR_INVALID, "elastic: timeout_s=%g "
                                  "min_size=%d join_timeout_s=%g (positive "
                                  "times, at least one rank)",
                                  el->opts.timeout_s, el->opts.min_size,
                                  el->opts.join_timeout_s);
        free(el->members);
        free(el);
        return st;
    }
    *el_p = el;
    return TD_OK;
}

td_status_t
td_elastic_create(const td_elastic_opts_t *opts, td_elastic_t **el_p)
{
    td_elastic_t *el;
    td_status_t st;

    if (lost == NULL || td_group_world() == NULL) {
        return td_error(TD_ERR_STATE, "elastic: td_elastic_create before "
                        "td_init");
    }
    if (el_p == NULL) {
        return td_error(TD_ERR_INVALID, "elastic: el_p is NULL");
    }
    if (td__runtime_joining()) {
        return td_error(TD_ERR_STATE, "elastic: this process replaces rank %d"
                        " (TODIST_ELASTIC_JOIN=1): call td_elastic_join, not "
                        "td_elastic_create", my_rank);
    }
    st = elastic_alloc(opts, &el);
    if (st != TD_OK) {
        return st;
    }
    for (int r = 0; r < lost_n; r++) {
        el->members[r] = r;
    }
    el->n = lost_n;
    el->group = td_group_world();
    el->committed = 0;
    *el_p = el;
    return TD_OK;
}

td_group_t *
td_elastic_group(const td_elastic_t *el)
{
    return el != NULL ? el->group : NULL;
}

int64_t
td_elastic_epoch(const td_elastic_t *el)
{
    return el != NULL ? el->epoch : -1;
}

void
td_elastic_commit(td_elastic_t *el, int64_t step)
{
    if (el != NULL) {
        el->committed = step;
    }
}

int64_t
td_elastic_committed(const td_elastic_t *el)
{
    return el != NULL ? el->committed : -1;
}

/* EL7: readmit the joiners of G (epoch EL->epoch's record) once. */
static td_status_t
readmit_joiners(td_elastic_t *el, const elastic_grow_t *g)
{
    td_status_t st = TD_OK;

    if (el->grow_readmitted || g->closed) {
        return TD_OK;
    }
    for (int i = 0; st == TD_OK && i < g->n; i++) {
        if (g->ranks[i] != my_rank) {
            st = td__runtime_readmit(g->ranks[i], el->opts.timeout_s);
            /* after: until the transport's reset (R1) ran, its liveness
             * check or UCX may still report the old process's death
             * (seen under ASan at load 20, and once in a loaded make
             * check: the joiner was declared dead and left out of the
             * epoch it was admitted to) */
            if (st == TD_OK) {
                __atomic_store_n(&lost[g->ranks[i]], 0, __ATOMIC_RELEASE);
                __atomic_store_n(&told[g->ranks[i]], 0, __ATOMIC_RELEASE);
            }
        }
    }
    el->grow_readmitted = st == TD_OK;
    return st;
}

/* Join epoch EL->epoch + 1 from CANDS[N] with COMMITTED; adopt its plan:
 * the new group and members, *CH filled (T0: when the change began). */
static td_status_t
form_epoch(td_elastic_t *el, const int *cands, int n, int64_t committed,
           double t0, td_elastic_change_t *ch)
{
    td_store_t *store = td__runtime_store();
    elastic_plan_t plan;
    td_group_t *g;
    double t1;
    char lost_txt[128] = "", join_txt[128] = "";
    size_t off = 0, joff = 0;
    td_status_t st;

    st = elastic_quorum_join(store, el->epoch + 1, my_rank, cands, n, lost,
                             committed, el->opts.timeout_s, hold, &plan);
    if (st != TD_OK) {
        return st;
    }
    t1 = td_now_s();
    if (plan.step < 0) {
        elastic_plan_free(&plan);
        return td_error(TD_ERR_STATE, "elastic: epoch %" PRId64 ": no "
                        "survivor holds a whole state (every one's heal was "
                        "cut short): resume from a checkpoint", plan.epoch);
    }
    if (plan.n < el->opts.min_size) {
        st = td_error(TD_ERR_RANGE, "elastic: epoch %" PRId64 " has %d "
                      "rank(s), fewer than min_size %d", plan.epoch, plan.n,
                      el->opts.min_size);
        elastic_plan_free(&plan);
        return st;
    }
    st = coll_group_new_id(COLL_EPOCH_ID_BASE + (uint32_t)plan.epoch,
                           plan.ranks, plan.n, &g);           /* EL1 */
    if (st == TD_OK) {
        st = td__runtime_set_members(plan.ranks, plan.n,
                                     (unsigned)plan.epoch);    /* EL4 */
        if (st == TD_OK) {
            st = coll_groups_reform((uint32_t)plan.epoch, plan.ranks,
                                    plan.n);                   /* EL10 */
        }
        if (st != TD_OK) {
            td_group_destroy(g);
        }
    }
    if (st != TD_OK) {
        elastic_plan_free(&plan);
        return st;
    }
    /* the old members not in the plan, and the plan's ranks not old */
    for (int i = 0, j = 0; i < el->n; i++) {
        while (j < plan.n && plan.ranks[j] < el->members[i]) {
            j++;
        }
        if (j < plan.n && plan.ranks[j] == el->members[i]) {
            continue;
        }
        if (ch->n_lost < TD_ELASTIC_LOST_MAX) {
            ch->lost[ch->n_lost] = el->members[i];
            if (off < sizeof(lost_txt)) {
                off += (size_t)snprintf(lost_txt + off, sizeof(lost_txt) - off,
                                        "%s%d", ch->n_lost ? " " : "",
                                        el->members[i]);
            }
        }
        ch->n_lost++;
    }
    for (int j = 0, i = 0; j < plan.n; j++) {
        while (i < el->n && el->members[i] < plan.ranks[j]) {
            i++;
        }
        if (i < el->n && el->members[i] == plan.ranks[j]) {
            continue;
        }
        if (ch->n_joined < TD_ELASTIC_LOST_MAX) {
            ch->joined[ch->n_joined] = plan.ranks[j];
            if (joff < sizeof(join_txt)) {
                joff += (size_t)snprintf(join_txt + joff,
                                         sizeof(join_txt) - joff, "%s%d",
                                         ch->n_joined ? " " : "",
                                         plan.ranks[j]);
            }
        }
        ch->n_joined++;
    }
    if (el->group != NULL && el->group != td_group_world()) {
        td_group_destroy(el->group);                         /* EL2 */
    }
    el->group = g;
    memcpy(el->members, plan.ranks, sizeof(int) * (size_t)plan.n);
    el->n = plan.n;
    el->epoch = plan.epoch;
    elastic_grow_free(&el->grow);
    el->grow_found = 0;
    el->grow_readmitted = 0;
    /* EL6: a rank behind claims the plan's step only once healed, and
     * no step while its heal may leave it part-written */
    ch->self_behind = committed < plan.step;
    el->committed = ch->self_behind ? -1 : committed;
    ch->epoch = plan.epoch;
    ch->step = plan.step;
    ch->behind = plan.behind;
    ch->new_size = plan.n;
    ch->new_rank = td_group_rank(g);
    for (int i = 0; i < plan.n; i++) {
        if (plan.ranks[i] == plan.source) {
            ch->source = i;
        }
    }
    elastic_plan_free(&plan);
    ch->agree_s = t1 - t0;
    ch->rebuild_s = td_now_s() - t1;
    td_log_warn("elastic: epoch %" PRId64 " at step %" PRId64 ": world %d -> "
                "%d (%s%s%s%s%s%s%s%s); this rank %d -> %d; agreement "
                "%.1f ms, rebuild %.1f ms%s", ch->epoch, ch->step,
                ch->old_size, ch->new_size,
                ch->n_lost || !ch->n_joined ? "lost rank" : "",
                !ch->n_lost && ch->n_joined ? "" :
                ch->n_lost == 1 ? " " : "s ",
                ch->n_lost ? lost_txt : ch->n_joined ? "" : "none",
                ch->n_lost > TD_ELASTIC_LOST_MAX ? " ..." : "",
                ch->n_lost && ch->n_joined ? "; " : "",
                ch->n_joined ? (ch->n_joined == 1 ? "joined rank " :
                                "joined ranks ") : "", join_txt,
                ch->n_joined > TD_ELASTIC_LOST_MAX ? " ..." : "",
                ch->old_rank, ch->new_rank, ch->agree_s * 1e3,
                ch->rebuild_s * 1e3,
                ch->behind ? "; healing from the most advanced" : "");
    return TD_OK;
}

/* EL12: the first member of EL's epoch that dropped this rank and said
 * so; -1 when none did. The transport's fate of it too: it is kept before
 * any call fails for it, while this module's peer_failed runs after the
 * collectives' (modules.c's order), so a recovery begun on the failure
 * may come first (seen: 1 run in 4, the told rank joined the agreement). */
static int
told_by(const td_elastic_t *el)
{
    td_transport_t *tp = td__runtime_transport();
    char fate[8];

    for (int i = 0; i < el->n; i++) {
        int r = el->members[i];

        if (r != my_rank &&
            (__atomic_load_n(&told[r], __ATOMIC_ACQUIRE) ||
             td__transport_peer_fate(tp, r, fate, sizeof(fate)))) {
            return r;
        }
    }
    return -1;
}

/* EL13: lost[] gets every peer the transport failed that did not drop
 * this rank (EL12): the transport records a failure before any module
 * hears of it, and this module hears last. */
static void
lost_sync(void)
{
    td_transport_t *tp = td__runtime_transport();
    char fate[8];

    for (int r = 0; tp != NULL && r < lost_n; r++) {
        if (r == my_rank || __atomic_load_n(&lost[r], __ATOMIC_ACQUIRE) ||
            td__transport_peer_alive(tp, r)) {
            continue;
        }
        /* the fate is written before the failure (transport.c L12) */
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (!td__transport_peer_fate(tp, r, fate, sizeof(fate))) {
            __atomic_store_n(&lost[r], 1, __ATOMIC_RELEASE);
        }
    }
}

/* EL12: this rank was dropped by member BY, which said so (DECLARED 0)
 * or declared it dead in the agreement of epoch EPOCH: this rank leaves. */
static td_status_t
dropped_error(int by, int64_t epoch, int declared)
{
    char where[256], fate[160];
    const char *f = fate;
    const char *pre = "dropped this rank: ";

    td__runtime_host_text(by, where, sizeof(where));
    if (!declared) {
        td__runtime_peer_fate(by, fate, sizeof(fate));
        if (strncmp(fate, pre, strlen(pre)) == 0) {
            f += strlen(pre);
        }
    } else {
        snprintf(fate, sizeof(fate), "it declared this rank lost, and "
                 "epoch %" PRId64 " was formed without it", epoch);
    }
    return td_error(TD_ERR_STATE, "elastic: rank %d was dropped by rank %d"
                    "%s%s%s: %s; this rank leaves the job (the others go on "
                    "without it)", my_rank, by, where[0] ? " (" : "", where,
                    where[0] ? ")" : "", f);
}

/* EL12: this rank was refused as stale (ST, Q4) from epoch EPOCH: if a
 * member declared it dead there (td/el/EPOCH/dead/<me> holds the
 * declarer), it was dropped by that member; else ST, its text kept. */
static td_status_t
declared_or(td_store_t *store, int64_t epoch, td_status_t st)
{
    char key[96], text[512], buf[16];
    void *val = NULL;
    size_t len;
    int by = -1;

    snprintf(text, sizeof(text), "%s", td_last_error());
    snprintf(key, sizeof(key), "td/el/%" PRId64 "/dead/%d", epoch, my_rank);
    if (td_store_get(store, key, 0, &val, &len) == TD_OK) {
        snprintf(buf, sizeof(buf), "%.*s", (int)(len < 15 ? len : 15),
                 (const char *)val);
        by = atoi(buf);
    }
    free(val);
    if (by < 0 || by >= lost_n || by == my_rank) {
        return td_error(st, "%s", text);
    }
    return dropped_error(by, epoch, 1);
}

td_status_t
td_elastic_recover(td_elastic_t *el, td_elastic_change_t *change)
{
    td_store_t *store = td__runtime_store();
    td_elastic_change_t ch;
    elastic_grow_t g = {0};
    int *cands = NULL, n_cands = 0;
    double t0 = td_now_s();
    char why[128];
    td_status_t st;
    int by;

    if (el == NULL || lost == NULL || store == NULL) {
        return td_error(TD_ERR_STATE, "elastic: td_elastic_recover %s",
                        el == NULL ? "on NULL" : "after td_finalize");
    }
    /* EL5: no member stays blocked in the old group until its timeout */
    snprintf(why, sizeof(why), "elastic: rank %d left epoch %" PRId64
             " to recover", my_rank, el->epoch);
    if ((by = told_by(el)) >= 0) {
        coll_group_abort_all(el->group, TD_ERR_PEER, why);
        return dropped_error(by, el->epoch + 1, 0);          /* EL12 */
    }
    lost_sync();                                             /* EL13 */
    if (!td__runtime_agent_store() &&
        __atomic_load_n(&lost[0], __ATOMIC_ACQUIRE)) {
        return store_gone("rank 0 was lost", NULL);             /* EL11 */
    }
    memset(&ch, 0, sizeof(ch));
    ch.old_size = el->n;
    ch.old_rank = td_group_rank(el->group);
    coll_group_abort_all(el->group, TD_ERR_PEER, why);
    /* Q7: no growth decided from now on; joiners already admitted are
     * candidates (EL7) */
    st = elastic_grow_close(store, el->epoch, lost_n, &g);
    if (st == TD_OK) {
        st = readmit_joiners(el, &g);
    }
    if (st == TD_OK) {
        st = elastic_candidates(el->members, el->n, &g, &cands, &n_cands);
    }
    elastic_grow_free(&g);
    if (st == TD_OK) {
        st = form_epoch(el, cands, n_cands, el->committed, t0, &ch);
    }
    free(cands);
    if (st == TD_ERR_STATE) {
        /* EL12: stale (Q4) after a member dropped this rank: told by
         * now, or declared dead by it */
        if ((by = told_by(el)) >= 0) {
            return dropped_error(by, el->epoch + 1, 0);
        }
        return declared_or(store, el->epoch + 1, st);
    }
    if ((st == TD_ERR_IO || st == TD_ERR_PROTOCOL) &&
        !td__runtime_agent_store()) {
        return store_gone("the store failed", td_last_error());  /* EL11 */
    }
    if (st == TD_OK && change != NULL) {
        *change = ch;
    }
    return st;
}

td_status_t
td_elastic_admit(td_elastic_t *el, td_elastic_change_t *change, int *grew_p)
{
    td_store_t *store = td__runtime_store();
    td_elastic_change_t ch;
    int *cands = NULL, n_cands = 0;
    double t0 = td_now_s();
    td_status_t st;

    if (grew_p != NULL) {
        *grew_p = 0;
    }
    if (el == NULL || lost == NULL || store == NULL) {
        return td_error(TD_ERR_STATE, "elastic: td_elastic_admit %s",
                        el == NULL ? "on NULL" : "after td_finalize");
    }
    if (el->n == lost_n) {
        return TD_OK;                       /* EL8: nobody can ask */
    }
    if (!el->grow_found) {
        st = elastic_grow_check(store, el->epoch, my_rank, el->members, el->n,
                                lost_n, el->committed, el->opts.admit_wait_s,
                                &el->grow_found, &el->grow);
        if (st != TD_OK) {
            return st;
        }
    }
    if (!el->grow_found || el->grow.closed ||
        el->committed < el->grow.step) {
        return TD_OK;                       /* Q8: not yet */
    }
    memset(&ch, 0, sizeof(ch));
    ch.old_size = el->n;
    ch.old_rank = td_group_rank(el->group);
    st = readmit_joiners(el, &el->grow);                         /* EL7 */
    if (st == TD_OK) {
        st = elastic_candidates(el->members, el->n, &el->grow, &cands,
                                &n_cands);
    }
    if (st == TD_OK) {
        st = form_epoch(el, cands, n_cands, el->committed, t0, &ch);
    }
    free(cands);
    if (st != TD_OK) {
        return st;
    }
    if (change != NULL) {
        *change = ch;
    }
    if (grew_p != NULL) {
        *grew_p = 1;
    }
    return TD_OK;
}

td_status_t
td_elastic_join(const td_elastic_opts_t *opts, td_elastic_t **el_p,
                td_elastic_change_t *change)
{
    td_store_t *store = td__runtime_store();
    td_elastic_change_t ch;
    td_elastic_t *el;
    int *cands = NULL, n_cands = 0, *old = NULL, n_old = 0;
    int64_t epoch;
    double t0 = td_now_s();
    td_status_t st;

    if (lost == NULL || store == NULL || td_group_world() == NULL) {
        return td_error(TD_ERR_STATE, "elastic: td_elastic_join before "
                        "td_init");
    }
    if (el_p == NULL) {
        return td_error(TD_ERR_INVALID, "elastic: el_p is NULL");
    }
    if (!td__runtime_joining()) {
        return td_error(TD_ERR_STATE, "elastic: td_elastic_join in rank %d, "
                        "which started with the world (a replacement starts "
                        "with TODIST_ELASTIC_JOIN=1): call "
                        "td_elastic_create", my_rank);
    }
    st = elastic_alloc(opts, &el);
    if (st != TD_OK) {
        return st;
    }
    el->committed = -1;             /* EL7: behind until healed */
    st = elastic_join_wait(store, my_rank, lost_n, el->opts.join_timeout_s,
                           &epoch, &old, &n_old, &cands, &n_cands);
    if (st != TD_OK) {
        goto fail;
    }
    /* the epoch we join from (this process was none of its members, Q9) */
    memcpy(el->members, old, sizeof(int) * (size_t)n_old);
    free(old);
    old = NULL;
    el->n = n_old;
    el->epoch = epoch;
    el->group = NULL;
    el->grow_readmitted = 1;        /* nothing to readmit: all are new */
    memset(&ch, 0, sizeof(ch));
    ch.old_size = n_old;
    ch.old_rank = -1;
    st = form_epoch(el, cands, n_cands, -1, t0, &ch);
    if (st != TD_OK) {
        goto fail;
    }
    free(cands);
    if (change != NULL) {
        *change = ch;
    }
    *el_p = el;
    return TD_OK;
fail:
    free(old);
    free(cands);
    free(el->members);
    free(el);
    return st;
}

void
td_elastic_free(td_elastic_t *el)
{
    if (el == NULL) {
        return;
    }
    if (el->group != NULL && el->group != td_group_world()) {
        td_group_destroy(el->group);
    }
    elastic_grow_free(&el->grow);
    free(el->members);
    free(el);
}
