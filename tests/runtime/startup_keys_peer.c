/* startup_keys_peer: one rank of tests/runtime/test_startup.sh. After td_init,
 * rank 0 counts the keys the start-up left in the store before anyone
 * does anything else (the others wait for its "t/counted"): each rank's
 * start-up writes a fixed number of keys, so the count is a linear
 * function of the world whose slope is the per-rank store writes.
 * Prints "keys=K world=N addr_bytes=A" (A: the size of rank 0's worker
 * address, a figure docs/startup.md's model uses). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "todist/todist.h"
#include "runtime/runtime.h"

int
main(void)
{
    td_store_t *store;
    int64_t n = -1;
    void *v = NULL;
    size_t len = 0;
    int rc = 0;

    if (td_init(NULL) != TD_OK) {
        printf("FAIL td_init: %s\n", td_last_error());
        return 1;
    }
    store = td__runtime_store();
    if (td_world()->rank == 0) {
        if (td_store_num_keys(store, &n) != TD_OK ||
            td_store_set(store, "t/counted", "1", 1) != TD_OK) {
            printf("FAIL store: %s\n", td_last_error());
            rc = 1;
        }
        if (td_store_get(store, "td/addr/0", 0, &v, &len) != TD_OK) {
            printf("FAIL address: %s\n", td_last_error());
            rc = 1;
        }
        printf("keys=%lld world=%d addr_bytes=%zu\n", (long long)n,
               td_world()->world_size, len);
        free(v);
        v = NULL;
    } else if (td_store_get(store, "t/counted", 60, &v, &len) != TD_OK) {
        printf("FAIL wait: %s\n", td_last_error());
        rc = 1;
    }
    free(v);
    fflush(stdout);
    return td_finalize() == TD_OK ? rc : 1;
}
