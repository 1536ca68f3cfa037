/* test_ddp_opts: td_ddp_defaults reads TODIST_DDP_BUCKET_CAP_MB: a size in
 * MiB (fractions too) sets bucket_cap_bytes; unset, empty, zero, negative,
 * too large or not a number keep 25 MiB; the first bucket stays 1 MiB. */
#include "config.h"

#include <stdlib.h>

#include "tests/tap.h"
#include <todist/todist.h>

#define MIB (1024.0 * 1024.0)

static double
cap(const char *v)
{
    if (v == NULL) {
        unsetenv("TODIST_DDP_BUCKET_CAP_MB");
    } else {
        setenv("TODIST_DDP_BUCKET_CAP_MB", v, 1);
    }
    return (double)td_ddp_defaults().bucket_cap_bytes / MIB;
}

int
main(void)
{
    plan(10);
    is_double(cap(NULL), 25, 0, "unset: 25 MiB");
    is_double(cap("2"), 2, 0, "TODIST_DDP_BUCKET_CAP_MB=2: 2 MiB");
    is_double(cap("0.5"), 0.5, 0, "=0.5: half a MiB");
    is_double(cap("65536"), 65536, 0, "=65536: the largest");
    is_double(cap(""), 25, 0, "empty: 25 MiB");
    is_double(cap("0"), 25, 0, "=0: refused, 25 MiB");
    is_double(cap("-3"), 25, 0, "=-3: refused, 25 MiB");
    is_double(cap("70000"), 25, 0, "=70000: refused, 25 MiB");
    is_double(cap("4MB"), 25, 0, "=4MB: not a number, 25 MiB");
    setenv("TODIST_DDP_BUCKET_CAP_MB", "8", 1);
    is_double((double)td_ddp_defaults().first_bucket_bytes / MIB, 1, 0,
              "the first bucket stays 1 MiB");
    return exit_status();
}
