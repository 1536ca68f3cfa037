/* bench/pipeline_replay.c: the bubble a schedule gives at given op times
 * per stage, with messages that take no time: the executor's rules
 * replayed (pipe_schedule_replay_stages, runtime/pipe/schedule.c). Given
 * the F, B and W times bench/pipeline.sh measured on each stage, what the
 * measured bubble has beyond it is message latency and jitter; what it
 * has beyond the theory (equal stages) is also the stages' imbalance.
 *   pipeline_replay SCHED M F0,B0,W0 [F1,B1,W1 ...]
 * one triple per stage (any unit: per step or per micro-batch; B is the
 * whole backward for gpipe and 1f1b, W then 0). Prints
 *   replay 1f1b S=2 M=8: stage 0 0.165 stage 1 0.104 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "runtime/pipe/pipe_internal.h"

int
main(int argc, char **argv)
{
    td_pipe_schedule_t sched;
    int S = argc - 3, M = argc > 2 ? atoi(argv[2]) : 0;
    double *v;

    if (argc < 4 || td_pipe_schedule_parse(argv[1], &sched) != TD_OK ||
        M < 1) {
        fprintf(stderr, "usage: pipeline_replay gpipe|1f1b|zb M F,B,W "
                "[F,B,W ...] (one triple per stage)\n");
        return 2;
    }
    v = calloc(4 * (size_t)S, sizeof(double));
    if (v == NULL) {
        return 1;
    }
    for (int s = 0; s < S; s++) {
        if (sscanf(argv[3 + s], "%lf,%lf,%lf", &v[s], &v[S + s],
                   &v[2 * S + s]) != 3) {
            fprintf(stderr, "pipeline_replay: stage %d: '%s' is not F,B,W\n",
                    s, argv[3 + s]);
            free(v);
            return 2;
        }
    }
    if (pipe_schedule_replay_stages(sched, S, M, v, v + S, v + 2 * S,
                                    v + 3 * S) != 0) {
        free(v);
        return 1;
    }
    printf("replay %s S=%d M=%d:", td_pipe_schedule_name(sched), S, M);
    for (int s = 0; s < S; s++) {
        printf(" stage %d %.3f", s, v[3 * S + s]);
    }
    printf("\n");
    free(v);
    return 0;
}
