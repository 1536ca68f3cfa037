/* runtime/elastic/quorum.h: the survivors' agreement on the members of a
 * new membership epoch, through the store (internal; todist/elastic.h is
 * the API built on it).
 *
 * Epoch 0 is the world. When a collective of epoch k fails, every member
 * still running joins epoch k + 1: it writes its committed step under
 * "td/el/<k+1>/in/<rank>" and, for each member of epoch k its transport
 * lost, "td/el/<k+1>/dead/<rank>"; then it waits for the plan
 * "td/el/<k+1>/plan", or writes it once every member of epoch k is
 * decided (joined or declared dead).
 *
 * Invariants (Q1..Q6; growth Q7..Q12 below; silence Q13 after them):
 *  Q1 An epoch's plan is written once (compare-and-set on an absent key)
 *     and never changed; every rank adopts the plan in the store, never
 *     its own view, so all members of epoch k + 1 hold the same list.
 *  Q2 A rank joins epoch k + 1 from epoch k's members only, and declares
 *     dead only members of epoch k its own transport lost, before it
 *     writes its own in/ key: whoever sees it joined sees what it
 *     declared (else a rank declared dead could see every member decided
 *     without the declaration, and write itself into the plan), since a
 *     reader reads every member's in/ key before any dead/ key. One its
 *     transport loses while it waits it declares then (Q13); a plan
 *     written before that stands (Q1), and the next collective with the
 *     lost rank fails into another recovery.
 *  Q3 The plan is written when every member of epoch k joined or was
 *     declared dead, or once the agreement timeout has passed since the
 *     writer joined (the silent count as dead, within Q13's bound); its
 *     members are those
 *     that joined and that nobody declared dead, in increasing world
 *     rank; its writer is one of them.
 *  Q4 A rank missing from the plan of the epoch it joins is refused
 *     (TD_ERR_STATE, "stale"), and so is one that joins an epoch whose
 *     previous plan does not hold it: a late or cut-off rank never
 *     rejoins an old world, nor a newer one, in this process.
 *  Q5 The plan's source is the member with the highest committed step
 *     (the lowest world rank among equals); the plan's step is its step,
 *     and BEHIND says some member committed less (it must be healed from
 *     the source before the next step: a step counts once it completed
 *     on one survivor, since its all_reduce then held every gradient).
 *  Q6 Each key under td/el/<epoch>/ is written by one rank (its own in/
 *     and its declarations; the plan by its writer, Q1; want/<r> by the
 *     replacement r; grow by the admitter or, closing it, any member,
 *     Q7).
 *
 * Growth: a replacement for a lost rank (another process, same world
 * rank) asks to join after epoch k with "td/el/<k>/want/<r>"; at a step
 * boundary epoch k's admitter (Q10) admits those waiting by
 * writing epoch k's growth record "td/el/<k>/grow" = "v1 STEP N R..."
 * (the joiners; STEP its committed step + 1); every member reads it at
 * each boundary and, once it committed STEP, joins epoch k + 1 with the
 * joiners as further candidates (the joiners with step -1, so the source
 * is an old member and the plan says behind: they are healed).
 *  Q7 Epoch k's growth record is written once (compare-and-set), by the
 *     admitter when it admits, or as "none" by the first member that
 *     enters a recovery of epoch k (closing it); every participant of
 *     epoch k + 1 reads the same record, so all pass the same candidates:
 *     the members of epoch k and the joiners it lists. Growth is only
 *     ever decided by the admitter at a boundary, so a record written
 *     after a recovery began says "none".
 *  Q8 Every member calls the growth check at every step boundary; the
 *     admitter writes STEP = its committed step + 1 before it starts that
 *     step, and a member ends step STEP only once the admitter
 *     contributed to it, so every member reads the record at boundary
 *     STEP or before: all grow at the same boundary, none is past it.
 *  Q9 A request names its epoch: one for epoch j is read only by the
 *     growth of epoch j (never carried to a later one), and a joiner
 *     that epoch k's record does not list (closed, "none", or another
 *     joiner's) is refused for epoch k + 1 (TD_ERR_STATE): it asks again
 *     after epoch k + 1. A replacement never joins an epoch its process
 *     was a member of before (Q4).
 *  Q10 Epoch k's admitter is its lowest member (the plan's first rank;
 *     world rank 0 while it lives): every member holds the same plan
 *     (Q1), so all name the same admitter without a message, and the
 *     role moves to the lowest survivor when rank 0 is lost (possible
 *     only when the launcher serves the store, runtime.h R3); a joiner
 *     may be any rank the epoch lacks, rank 0 included.
 *  Q12 A vacancy (a rank the current epoch lacks) is claimed by one
 *     claimer at a time per epoch (td/el/<k>/claim/<r> set from absent, or
 *     from released "-", to the claimer's name, compare-and-set) by
 *     whoever starts a replacement without a rank (the SPANK plugin's
 *     join); a rank with a held claim, a want/ or a place in the growth
 *     record is not vacant. A claim is released ("-", compare-and-set from
 *     the claimer's name) only once its claimer ended (the plugin's
 *     slurmstepd, at the task's exit): a replacement that died before it
 *     asked (want/) no longer holds its rank for the epoch; one that
 *     asked holds it by want/ whatever its claim.
 *  Q11 With WAIT > 0 the admitter waits, up to WAIT, until every rank out
 *     of the epoch asked, then admits all that did in one record: several
 *     replacements started together join at one boundary. With WAIT 0 it
 *     admits whoever asked by then (the others at a later boundary).
 *  Q13 A plan leaves silent members out (Q3's timeout) only when its
 *     members are a strict majority of epoch k's members that nobody
 *     declared dead; short of that the writer writes nothing and waits
 *     on, declaring whom its transport loses meanwhile (Q2), until a
 *     plan is there (its own, once decided, or another's: then Q4) or
 *     2 x timeout + 1 s since it joined, when it fails (TD_ERR_TIMEOUT,
 *     naming the silent ranks and Q13). Silence in the store is not
 *     death: the silent may be members that still hear each other but
 *     not the store, which dropped the writer (transport.c L12) and will
 *     declare it dead once they reach the store. Before, a rank cut off
 *     from them but beside the store formed the epoch alone on silence,
 *     and they, the ones alive together, were all refused as stale. A
 *     partition's two sides cannot both be such majorities, and the side
 *     without the store writes nothing, so at most one side forms epoch
 *     k + 1 on silence, and never a side that is a minority of the
 *     undeclared. (At world 2, silence alone never removes the other
 *     rank: its death must be declared, by this rank's transport, within
 *     the bound: keep TODIST_ELASTIC_TIMEOUT above 1.5 x TODIST_LIVENESS.)
 *     Tests only: TODIST_TEST_ELASTIC_HOLD=R:PATH (elastic.c passes it
 *     as HOLD) keeps world rank R from failing at that bound until the
 *     file PATH exists (60 s more at most), so a test can bring the
 *     silent back while the writer still waits, whatever the machine's
 *     load; only the failure waits, the plan is taken as before.
 *
 * Thread safety: one call at a time per store client (the client is not
 * thread-safe); different clients may join concurrently. */
#ifndef TD_RUNTIME_ELASTIC_QUORUM_H
#define TD_RUNTIME_ELASTIC_QUORUM_H

#include <stdint.h>

#include <todist/status.h>
#include <todist/store.h>

#define ELASTIC_RANKS_MAX (1 << 20)

typedef struct {
    int64_t epoch;
    int64_t step;      /* the source's committed step (Q5) */
    int     source;    /* world rank */
    int     behind;    /* some member committed less than STEP */
    int     n;
    int    *ranks;     /* n world ranks, increasing (malloc'ed) */
} elastic_plan_t;

/* Join epoch EPOCH (>= 1) as world rank ME, from epoch EPOCH - 1 whose
 * members are MEMBERS[N]; DEAD[r] != 0 (world-indexed; NULL: none) for
 * the ranks this rank's transport lost (read again while it waits: Q13);
 * COMMITTED this rank's last committed step. Waits at most TIMEOUT
 * seconds for the others (Q3), or up to 2 x TIMEOUT + 1 s while too many
 * are silent (Q13: then TD_ERR_TIMEOUT), then fills *PLAN (free with
 * elastic_plan_free). HOLD (tests only; NULL: none) is a file whose
 * absence holds that bound (Q13). TD_ERR_STATE when this rank is not in
 * the plan (Q4). */
td_status_t elastic_quorum_join(td_store_t *store, int64_t epoch, int me,
                                const int *members, int n,
                                const unsigned char *dead, int64_t committed,
                                double timeout, const char *hold,
                                elastic_plan_t *plan);

/* The plan's text ("v1 EPOCH STEP SOURCE BEHIND N R0 R1 ...") and its
 * decoder, which rejects anything else (a bad count, a rank out of
 * 0..WORLD-1 or out of order, a source not listed). */
td_status_t elastic_plan_encode(const elastic_plan_t *p, char **text_p);
td_status_t elastic_plan_decode(const char *text, size_t len, int world,
                                elastic_plan_t *p);
void        elastic_plan_free(elastic_plan_t *p);

/* Epoch EPOCH's growth record (Q7): STEP and the joiners, or closed. */
typedef struct {
    int     closed;     /* "none": no growth of this epoch */
    int64_t step;       /* grow once this step is committed */
    int     n;
    int    *ranks;      /* n world ranks, increasing (malloc'ed) */
} elastic_grow_t;

td_status_t elastic_grow_encode(const elastic_grow_t *g, char **text_p);
td_status_t elastic_grow_decode(const char *text, size_t len, int world,
                                elastic_grow_t *g);
void        elastic_grow_free(elastic_grow_t *g);

/* At a step boundary of epoch EPOCH (members MEMBERS[N] of a world of
 * WORLD, committed step COMMITTED), the admitter (ME == MEMBERS[0], Q10):
 * if no record is there yet
 * and a non-member asked (want/), write the record admitting them
 * (Q7, Q8); with WAIT > 0, wait up to WAIT s for every non-member to ask
 * first (Q11). Then
 * (every member) read it: *FOUND 0 when absent. */
td_status_t elastic_grow_check(td_store_t *store, int64_t epoch, int me,
                               const int *members, int n, int world,
                               int64_t committed, double wait, int *found,
                               elastic_grow_t *g);
/* A member entering a recovery of epoch EPOCH: close the record ("none")
 * unless written; *G is the record then in the store (Q7). */
td_status_t elastic_grow_close(td_store_t *store, int64_t epoch, int world,
                               elastic_grow_t *g);
/* The candidates of epoch EPOCH + 1: MEMBERS[N] and G's joiners (G may be
 * NULL or closed), increasing, into *OUT_P (malloc'ed), *N_OUT_P. */
td_status_t elastic_candidates(const int *members, int n,
                               const elastic_grow_t *g, int **out_p,
                               int *n_out_p);

/* A replacement for world rank ME (a world of WORLD): find the current
 * epoch k (the last plan in the store; 0 when none), ask to join after it
 * (want/), and wait (at most TIMEOUT s in all) for its growth record: one
 * that lists ME gives *EPOCH_P = k, its members (*OLD_P, malloc'ed,
 * *N_OLD_P) and the candidates of epoch k + 1
 * (*CANDS_P, malloc'ed, *N_P) for elastic_quorum_join with step -1; a
 * record that does not (Q9), or a recovery that closed it, makes it ask
 * again after the next epoch. TD_ERR_STATE when ME is a member of the
 * current epoch (the survivors have not yet dropped it: not replaceable
 * yet, ask again later) only after TIMEOUT. */
td_status_t elastic_join_wait(td_store_t *store, int me, int world,
                              double timeout, int64_t *epoch_p, int **old_p,
                              int *n_old_p, int **cands_p, int *n_p);
/* The refusal of Q9, alone: TD_ERR_STATE unless epoch EPOCH's growth
 * record is written and lists ME. */
td_status_t elastic_join_admitted(td_store_t *store, int64_t epoch, int me,
                                  int world, elastic_grow_t *g);

/* A replacement started without a rank (srun --todist=join, spank/): the
 * world ranks of a world of WORLD that the current epoch k (the last plan;
 * 0: the world) lacks and that no replacement holds yet (neither listed in
 * epoch k's growth record, nor asked for with want/), in increasing order;
 * take the FIRST-th of them (cyclically, so the tasks of one step started
 * together take different ones) by setting "td/el/<k>/claim/<r>" to
 * CLAIMER (1 to ELASTIC_CLAIMER_MAX characters naming the process, e.g.
 * "PID@HOST") when absent or released (Q12: one claimer at a time per rank
 * and epoch; the next vacancy when another holds it). *RANK_P the rank,
 * *EPOCH_P k, *N_VACANT_P how many were vacant before the claim.
 * TD_ERR_NOT_FOUND when none is (the message says whether the epoch lacks
 * none or every lost rank is held). */
#define ELASTIC_CLAIMER_MAX 300
td_status_t elastic_vacant_claim(td_store_t *store, int world, int first,
                                 const char *claimer, int *rank_p,
                                 int64_t *epoch_p, int *n_vacant_p);
/* CLAIMER ended: release its claims of the current epoch (Q12), so each
 * rank it claimed and did not ask for (want/) is vacant again.
 * *N_RELEASED_P how many. */
td_status_t elastic_vacant_release(td_store_t *store, int world,
                                   const char *claimer, int *n_released_p);

#endif /* TD_RUNTIME_ELASTIC_QUORUM_H */
