/* runtime/coll/rx.h: the transport channel's receiving side (internal):
 * every message to handler COLL_TRANSPORT_ID is decoded (wire.c W1-W3),
 * checked against its group (C5, C6, C11) and handed to one function per
 * message type. Above every other channel and the receive path.
 *
 * C5 A collective's messages carry (group id, member digest, sequence
 *    number, description); a member that sees a description different
 *    from its own at the same sequence number fails the group and tells
 *    every member (MSG_ABORT), naming both ranks and both calls. The
 *    check is made on arrival, and once more after a message is queued
 *    as unexpected: a call begun meanwhile without coll_lock (step.h
 *    C18, match.h L8) may not have seen it in the queue.
 *
 * Thread safety: the handler runs on the transport's token holder (C1). */
#ifndef TD_RUNTIME_COLL_RX_H
#define TD_RUNTIME_COLL_RX_H

#include "runtime/runtime.h"

/* Receive the collectives' messages on TP (module setup). */
td_status_t coll_rx_start(td_transport_t *tp);

#endif /* TD_RUNTIME_COLL_RX_H */
