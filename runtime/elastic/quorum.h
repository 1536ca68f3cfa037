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
 * Invariants (Q1..Q6):
 *  Q1 An epoch's plan is written once (compare-and-set on an absent key)
 *     and never changed; every rank adopts the plan in the store, never
 *     its own view, so all members of epoch k + 1 hold the same list.
 *  Q2 A rank joins epoch k + 1 from epoch k's members only, and declares
 *     dead only members of epoch k its own transport lost, before it
 *     writes its own in/ key: whoever sees it joined sees what it
 *     declared (else a rank declared dead could see every member decided
 *     without the declaration, and write itself into the plan).
 *  Q3 The plan is written when every member of epoch k joined or was
 *     declared dead, or once the agreement timeout has passed since the
 *     writer joined (the silent count as dead); its members are those
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
 *     and its declarations; the plan by its writer, Q1).
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
 * the ranks this rank's transport lost; COMMITTED this rank's last
 * committed step. Waits at most TIMEOUT seconds for the others (Q3), then
 * fills *PLAN (free with elastic_plan_free). TD_ERR_STATE when this rank
 * is not in the plan (Q4). */
td_status_t elastic_quorum_join(td_store_t *store, int64_t epoch, int me,
                                const int *members, int n,
                                const unsigned char *dead, int64_t committed,
                                double timeout, elastic_plan_t *plan);

/* The plan's text ("v1 EPOCH STEP SOURCE BEHIND N R0 R1 ...") and its
 * decoder, which rejects anything else (a bad count, a rank out of
 * 0..WORLD-1 or out of order, a source not listed). */
td_status_t elastic_plan_encode(const elastic_plan_t *p, char **text_p);
td_status_t elastic_plan_decode(const char *text, size_t len, int world,
                                elastic_plan_t *p);
void        elastic_plan_free(elastic_plan_t *p);

#endif /* TD_RUNTIME_ELASTIC_QUORUM_H */
