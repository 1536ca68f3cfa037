/* runtime/coll/late.h: who is late, and who is in another call
 * (internal). When a collective call
 * times out, the rank that waited may have been waiting for a member that
 * is itself waiting (recursive doubling's partner, the shared segment's
 * handshake through rank 0): naming the peer it waited for would blame
 * the wrong rank. So at the deadline it asks every member whether it has
 * begun the call (MSG_ASK, answered by the member's receive handler even
 * while its program is busy elsewhere: MSG_TELL) and names those that
 * have not. Above the matching and tx.c; rx.c hands it both messages.
 *
 * Invariants (K1..K3):
 *  K1 A group's `begun` is the last call begun here, its seq + 1, set
 *     when the call begins (atomically, match.h L8): a call SEQ is begun
 *     here iff
 *     (int32_t)(begun - (SEQ + 1)) >= 0. A group not made here, destroyed
 *     here, or of which the asker is no member answers 0 (not begun).
 *  K2 One ask per group at a time (the thread running the group's call
 *     asks, L7); its answers (g->ask, ask_seq) are under coll_lock, and
 *     ask_left counts those still due, so the asker's wait reads it
 *     without the lock. An answer to another seq or a second answer from
 *     one member is ignored.
 *  K3 The asker waits for the answers at most COLL_LATE_ASK_S (a dead
 *     member never answers: it is named, as it is late too), and a
 *     member that cannot be reached is named at once.
 *  K4 Members that chose different algorithms for one call may each wait
 *     for a message the other never sends (the shared segment's
 *     handshake against a forced transport algorithm; a broadcast whose
 *     non-root forced another tree): no step message carries a
 *     description to compare (C5). So a collective's wait that has lasted
 *     COLL_PROBE_S, then twice as long, and so on, sends every other
 *     member a probe with its call's seq and description (MSG_PROBE, no
 *     answer). A member in that same call with another description fails
 *     the group as a mismatch naming both calls, and tells every member
 *     (C5, C6); a member not (or no longer) in it ignores the probe. The
 *     probe is sent by the thread running the call (L7), its seq and
 *     description read as match.h L8 says.
 *
 * Thread safety: coll_late_ranks from the thread running G's call;
 * the *_locked handlers from the transport's token holder (C1). */
#ifndef TD_RUNTIME_COLL_LATE_H
#define TD_RUNTIME_COLL_LATE_H

#include <stddef.h>

#include "runtime/coll/match.h"
#include "runtime/coll/wire.h"

#define COLL_LATE_ASK_S 1.0
#define COLL_PROBE_S    0.5           /* K4: the first probe of a wait */

/* Ask every member of G whether it has begun call SEQ (K3) and write the
 * world ranks of those that have not (or did not answer) into WHO as
 * "2, 3"; how many. 0: every member has begun it (WHO is then ""). */
int  coll_late_ranks(td_group_t *g, uint32_t seq, char *who, size_t len);

/* K4: tell every other member of G that this rank waits in its current
 * call (seq and description). Sends only; nothing is waited for. */
void coll_late_probe(td_group_t *g);

/* The receive handler's part, called with coll_lock held and releasing
 * it (L4: the answer is sent after the unlock): MSG_ASK M from SRC is
 * answered; MSG_TELL M from SRC is taken (K2). */
void coll_late_on_ask_locked(int src, const coll_wire_t *m);
void coll_late_on_tell_locked(int src, const coll_wire_t *m);
/* MSG_PROBE M from SRC for G (admitted by rx.c; NULL: not made here
 * yet): compared with G's current call (K4); a mismatch fails G and
 * tells every member. */
void coll_late_on_probe_locked(int src, const coll_wire_t *m, td_group_t *g);

#endif /* TD_RUNTIME_COLL_LATE_H */
