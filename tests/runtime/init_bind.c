/* td_init applies the placement when TODIST_BIND=closest: print this
 * rank's CPU affinity after td_init, as a list like "0-3,8". */
#include "config.h"

#include <sched.h>
#include <stdio.h>

#include <todist/todist.h>

int
main(void)
{
    cpu_set_t set;
    int first = 1, lo = -1;

    if (td_init(NULL) != TD_OK) {
        fprintf(stderr, "init_bind: %s\n", td_last_error());
        return 1;
    }
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        perror("sched_getaffinity");
        return 1;
    }
    printf("rank=%d cpus=", td_world()->rank);
    for (int c = 0; c <= CPU_SETSIZE; c++) {
        int in = c < CPU_SETSIZE && CPU_ISSET(c, &set);
        if (in && lo < 0) {
            lo = c;
        } else if (!in && lo >= 0) {
            printf(first ? "%d" : ",%d", lo);
            if (c - 1 > lo) {
                printf("-%d", c - 1);
            }
            first = 0;
            lo = -1;
        }
    }
    printf("\n");
    fflush(stdout);
    return td_finalize() == TD_OK ? 0 : 1;
}
