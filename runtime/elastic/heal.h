/* runtime/elastic/heal.h: the tensors of a heal (td_checkpoint_broadcast)
 * from a group's root to every other member, as a pipelined chain of
 * point-to-point messages (internal; checkpoint.c's CK5 uses it).
 *
 * Why: a heal moves the whole model (MiB to GiB) in many tensors. One
 * td_broadcast per tensor pays each call's start-up in turn, and on one
 * host a broadcast goes through the group's shared segment (two copies);
 * a point-to-point message of a large piece is read in place from the
 * sender (one copy). Between two ranks the chain is the transport's
 * send/recv; with more, each further member adds one piece's time, not
 * the state's (the pieces are pipelined along the chain).
 *
 * Invariants (H1..H5):
 *  H1 The chain is group ranks root, root + 1, ... (mod n): each member
 *     receives every piece from its predecessor and forwards it, once
 *     received, to its successor; the root only sends, the last member
 *     only receives.
 *  H2 Pieces: the tensors in list order, each cut, in groups of more
 *     than two, into views of at most HEAL_PIECE bytes of its storage
 *     (a checkpoint's tensors are contiguous CPU ones; with two members
 *     every tensor is one piece); every member cuts the same shapes, so
 *     the pieces match one to one.
 *  H3 Blocking: a member receives piece k, then sends it on, then
 *     receives k + 1: one piece in each direction at a time, bounded, and
 *     the successor forwards k meanwhile. (td_isend/td_irecv with several
 *     pieces in flight measured slower here: 26-61% of one send/recv of
 *     64 MiB against 93-100% blocking, same runs, loaded.)
 *  H4 Piece k travels with tag HEAL_TAG + k % HEAL_TAG_SPAN, and messages
 *     of one sender to one receiver keep their order (coll's M2): no user
 *     point-to-point message may be outstanding on GROUP meanwhile (a
 *     heal runs at a step boundary, right after the group is made).
 *  H5 After a failure nothing more is sent or received and the first
 *     error is returned: the receivers' tensors may be part-written
 *     (elastic.c EL6); a blocking operation has ended when it returns, so
 *     no buffer is written after.
 *
 * Thread safety: as the group's operations (todist/coll.h). */
#ifndef TD_RUNTIME_ELASTIC_HEAL_H
#define TD_RUNTIME_ELASTIC_HEAL_H

#include <todist/coll.h>
#include <todist/status.h>
#include <todist/tensor.h>

#define HEAL_PIECE    (8u << 20)
#define HEAL_TAG      0x7eea0000
#define HEAL_TAG_SPAN 0x10000

/* Send TS[N] (the root's) or receive into them (the others'): contiguous
 * CPU tensors, every member with the same shapes and dtypes, along the
 * chain of H1. */
td_status_t elastic_heal_tensors(td_group_t *g, int root,
                                 td_tensor_t *const *ts, int n);

#endif /* TD_RUNTIME_ELASTIC_HEAL_H */
