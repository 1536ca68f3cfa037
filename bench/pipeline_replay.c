/* bench/pipeline_replay.c: the bubble a schedule gives at given op times
 * per stage, with messages that take no time: the executor's rules
 * replayed (pipe_schedule_replay_stages, runtime/pipe/schedule.c). Given
 * the F, B and W times bench/pipeline.sh measured on each stage, what the
 * measured bubble has beyond it is message latency and jitter; what it
 * has beyond the theory (equal stages) is also the stages' imbalance.
 *   pipeline_replay SCHED M [msg=T] F0,B0,W0 [F1,B1,W1 ...]
 * one triple per stage (any unit: per step or per micro-batch; B is the
 * whole backward for gpipe and 1f1b, W then 0); msg=T: every message
 * takes T (the same unit per op; 0 by default). Prints
 *   replay 1f1b S=2 M=8: stage 0 0.165 stage 1 0.104 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/pipe/pipe_internal.h"

int
main(int argc, char **argv)
{
    td_pipe_schedule_t sched;
    int S, M = argc > 2 ? atoi(argv[2]) : 0, a = 3;
    double *v, msg = 0;

    if (argc > 3 && strncmp(argv[3], "msg=", 4) == 0) {
        msg = atof(argv[3] + 4);
        a = 4;
    }
    S = argc - a;

    if (S < 1 || td_pipe_schedule_parse(argv[1], &sched) != TD_OK ||
        M < 1 || msg < 0) {
        fprintf(stderr, "usage: pipeline_replay gpipe|1f1b|zb M [msg=T] "
                "F,B,W [F,B,W ...] (one triple per stage)\n");
        return 2;
    }
    v = calloc(4 * (size_t)S, sizeof(double));
    if (v == NULL) {
        return 1;
    }
    for (int s = 0; s < S; s++) {
        if (sscanf(argv[a + s], "%lf,%lf,%lf", &v[s], &v[S + s],
                   &v[2 * S + s]) != 3) {
            fprintf(stderr, "pipeline_replay: stage %d: '%s' is not F,B,W\n",
                    s, argv[a + s]);
            free(v);
            return 2;
        }
    }
    if (pipe_schedule_replay_stages(sched, S, M, v, v + S, v + 2 * S, msg,
                                    v + 3 * S) != 0) {
        free(v);
        return 1;
    }
    printf("replay %s S=%d M=%d", td_pipe_schedule_name(sched), S, M);
    if (msg > 0) {
        printf(" msg=%g", msg);
    }
    printf(":");
    for (int s = 0; s < S; s++) {
        printf(" stage %d %.3f", s, v[3 * S + s]);
    }
    printf("\n");
    free(v);
    return 0;
}
