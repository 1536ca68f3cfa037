/* test_pipe_spin.c: how long a waiting stage drives the transport before
 * it sleeps (P8, pipe_spin_choose): 50 ms only where every rank of the
 * host has a core, TODIST_PIPE_SPIN_MS over it, malformed values off. */
#include "config.h"

#include "runtime/pipe/pipe_internal.h"
#include "tests/tap.h"

int
main(void)
{
    plan(10);
    is_double(pipe_spin_choose(NULL, 2, 2), 0.05, 1e-12,
              "2 ranks on 2 cores: 50 ms");
    is_double(pipe_spin_choose(NULL, 1, 8), 0.05, 1e-12,
              "1 rank on 8 cores: 50 ms");
    is_double(pipe_spin_choose(NULL, 4, 2), 0, 0,
              "4 ranks on 2 cores: the runtime's own (no spin)");
    is_double(pipe_spin_choose("", 3, 2), 0, 0,
              "empty is unset: 3 ranks on 2 cores, no spin");
    is_double(pipe_spin_choose(NULL, 0, 2), 0, 0,
              "outside td_init (0 local ranks): no spin");
    is_double(pipe_spin_choose("7.5", 4, 2), 0.0075, 1e-12,
              "TODIST_PIPE_SPIN_MS=7.5 wins over the cores rule");
    is_double(pipe_spin_choose("0", 2, 2), 0, 0,
              "TODIST_PIPE_SPIN_MS=0: off");
    is_double(pipe_spin_choose("-3", 2, 2), 0, 0, "negative: off");
    is_double(pipe_spin_choose("5ms", 2, 2), 0, 0, "trailing junk: off");
    is_double(pipe_spin_choose("60001", 2, 2), 0, 0,
              "above 60 s: off");
    return exit_status();
}
