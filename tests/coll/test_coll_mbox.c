/* test_coll_mbox: the mailboxes' bounds and switches (mbox.c M8), which
 * no multi-process test reaches: a world above MBOX_WORLD_MAX ranks, no
 * boot id, TODIST_COLL_P2P_SHM=0 keep every message on the transport (no
 * inbox offered, nothing local); a world at the bound offers an inbox,
 * once per sender, with the fields a sender checks. (Refusing an offer
 * from another host is tested across processes, test_coll.sh.) */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/coll/mbox.h"
#include "base/byteorder.h"
#include "tests/tap.h"

static const char *boot = "11111111-2222-4333-8444-555555555555";

int
main(void)
{
    uint8_t offer[MBOX_OFFER_BYTES], o2[MBOX_OFFER_BYTES];

    plan(11);

    setenv("TODIST_COLL_P2P_SHM", "1", 1);
    is_int(coll_mbox_setup(0, 4097, boot), TD_OK, "a world of 4097 ranks");
    coll_mbox_inbox_ensure();
    is_int((int)coll_mbox_offer(1, offer), 0,
           "above MBOX_WORLD_MAX: no inbox offered (M8)");
    ok(!coll_mbox_local(1) && !coll_mbox_active(), "and nothing local");

    is_int(coll_mbox_setup(0, 4, ""), TD_OK, "no boot id");
    coll_mbox_inbox_ensure();
    is_int((int)coll_mbox_offer(1, offer), 0,
           "without a boot id to tell hosts apart: no inbox");

    setenv("TODIST_COLL_P2P_SHM", "0", 1);
    is_int(coll_mbox_setup(0, 4, boot), TD_OK, "TODIST_COLL_P2P_SHM=0");
    coll_mbox_inbox_ensure();
    is_int((int)coll_mbox_offer(1, offer), 0, "switched off: no inbox");

    setenv("TODIST_COLL_P2P_SHM", "1", 1);
    is_int(coll_mbox_setup(0, 4096, boot), TD_OK,
           "a world of MBOX_WORLD_MAX ranks");
    coll_mbox_inbox_ensure();
    is_int((int)coll_mbox_offer(1, offer), MBOX_OFFER_BYTES,
           "at the bound: an inbox offered to a sender");
    ok(td_get_be32(offer) == (uint32_t)getpid() &&
       td_get_be64(offer + 24) > 4096u * 4096u, "naming this process and a "
       "mailbox of whole pages per rank");
    is_int((int)coll_mbox_offer(1, o2), 0, "offered once per sender");

    coll_mbox_shutdown();
    return exit_status();
}
