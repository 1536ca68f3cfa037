/* tests/peer_die.h: how a test worker that recovers in place kills one of
 * its ranks (inplace_worker, subgroup_worker, zero_el_worker): SIGKILL
 * raised while the calling thread holds the transport's progress token
 * (td__transport_drive calls DONE holding it once it got it), so no
 * thread of the process is inside a UCX call as it dies.
 *
 * Why: UCX 1.13's shared-memory transport (mm) gives each process one
 * receive FIFO that every sender of its host writes: an element is
 * reserved by a compare-and-swap of the head, then written, then
 * published. A rank killed between the two, inside a send to a rank of
 * its host (its own message, or its progress thread answering a peer's
 * wire-up), leaves that rank's FIFO with an element never published:
 * that rank then takes nothing more from it, from any sender, its
 * wire-ups never complete, and the survivors' next collective that needs
 * it waits for TODIST_COLL_TIMEOUT (test_inplace 19 hung once in CI so;
 * docs/elastic.md, "A rank killed inside a UCX send"). Every UCX call of
 * todist is made holding the token (ucx_transport/transport.h), so the
 * holder dying leaves every FIFO whole.
 *
 * Only for deaths after which survivors of the same host go on talking
 * (in-place recovery, --no-kill). Deaths that tests mean to happen in the
 * middle of a transfer (transport_peer kill, staging_peer, the "kill"
 * modes whose survivors only check their failures) stay plain raises.
 * Needs the internal library (TD_TEST_LDADD). */
#ifndef TD_TESTS_PEER_DIE_H
#define TD_TESTS_PEER_DIE_H

#include <signal.h>
#include <stdbool.h>

#include "runtime/runtime.h"
#include "ucx_transport/transport.h"

static int
peer_die_now(void *tp)
{
    if (td__transport_on_progress_thread(tp)) {
        raise(SIGKILL);
    }
    return 0;
}

static void peer_die(void) __attribute__((unused));

static void
peer_die(void)
{
    td_transport_t *tp = td__runtime_transport();

    /* (a callback on the holder already holds it: drive refuses, and the
     * raise below is as safe) */
    if (tp != NULL) {
        (void)td__transport_drive(tp, peer_die_now, tp, -1);
    }
    raise(SIGKILL);     /* holding it already, no transport, or it stopped */
}

#endif
