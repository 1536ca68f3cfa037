/* bench/startup: one rank's start-up and shutdown (bench/startup.sh runs
 * it at 16, 64 and 256 ranks; srun --todist with and without --mpi=pmix
 * compares PMIx's fence with the TCP store). One line per rank:
 * "rank=R init_ms=T fin_ms=F rss_kb=K vsz_kb=V": how long td_init and
 * td_finalize took, and the resident and virtual size right after td_init
 * (VmRSS, VmSize of /proc/self/status). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <todist/todist.h>

#include "base/clock.h"

/* KEY's value in kB from /proc/self/status (-1 if absent). */
static long
status_kb(const char *key)
{
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    FILE *f = fopen("/proc/self/status", "r");

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            sscanf(line + n + 1, "%ld", &v);
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return v;
}

int
main(void)
{
    double t0 = td_now_s(), t1, t2;
    long rss, vsz;
    int rank;

    if (td_init(NULL) != TD_OK) {
        fprintf(stderr, "startup: %s\n", td_last_error());
        return 1;
    }
    t1 = td_now_s();
    rss = status_kb("VmRSS");
    vsz = status_kb("VmSize");
    rank = td_world()->rank;
    if (td_finalize() != TD_OK) {
        fprintf(stderr, "startup: rank %d: %s\n", rank, td_last_error());
        return 1;
    }
    t2 = td_now_s();
    printf("rank=%d init_ms=%.1f fin_ms=%.1f rss_kb=%ld vsz_kb=%ld\n", rank,
           (t1 - t0) * 1e3, (t2 - t1) * 1e3, rss, vsz);
    return fflush(stdout) == 0 ? 0 : 1;
}
