/* bench/startup: how long td_init takes in each rank (the wire-up: store,
 * transport, address exchange, start-up barrier). One line per rank:
 * "rank=R init_ms=T". Run under srun --todist with and without
 * --mpi=pmix to compare PMIx's fence with the TCP store (see
 * bench/RESULTS.md). */
#include "config.h"

#include <stdio.h>

#include <todist/todist.h>

#include "base/clock.h"

int
main(void)
{
    double t0 = td_now_s(), t1;

    if (td_init(NULL) != TD_OK) {
        fprintf(stderr, "startup: %s\n", td_last_error());
        return 1;
    }
    t1 = td_now_s();
    printf("rank=%d init_ms=%.1f\n", td_world()->rank, (t1 - t0) * 1e3);
    fflush(stdout);
    return td_finalize() == TD_OK ? 0 : 1;
}
