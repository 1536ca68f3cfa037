/* todist/pipe.h: pipeline parallelism (torch.distributed.pipelining in C):
 * a model split into S stages, one per rank of a pipeline group, each the
 * user's forward function over its own parameters with local autograd; a
 * mini-batch split into M micro-batches; activations forward and gradients
 * backward over point-to-point messages (td_isend / td_irecv).
 *
 * Ranks. td_pipe_create is called by every rank of the world, which must
 * have exactly S x R ranks: world rank r is stage r % S of replica r / S.
 * Replica k's stages form one pipeline group; stage s's R replicas form a
 * data-parallel group whose gradients are averaged (PipeDream's hybrid).
 *
 * A step (td_pipe_step, once per mini-batch, on every rank):
 *   stage 0 splits INPUT [B, ...] into M micro-batches along dim 0, the
 *   last stage splits TARGET [B, ...] the same way (B % M == 0, so every
 *   micro-batch has one shape); stage s calls FORWARD(arg, x, target, m)
 *   for each micro-batch m: x is stage 0's slice, or the activation stage
 *   s-1 sent (a leaf that requires grad); target is the last stage's slice
 *   (NULL on other stages), where FORWARD returns the micro-batch's loss
 *   (one element). Backward runs from loss / M, so the parameters' .grad
 *   gets (added to it) the gradient of the mini-batch's mean loss, summed
 *   over micro-batches in order 0..M-1 as single-process gradient
 *   accumulation would. With R > 1 it is then averaged over the replicas
 *   (an async all_reduce per parameter, started as soon as the stage's
 *   last backward is done, so it overlaps the other stages' drain).
 *   Zero .grad and step the optimizer around td_pipe_step, once per
 *   mini-batch.
 *
 * Shapes are agreed once: in the first step, stage s sends stage s+1 its
 * output's dtype and shape (one small message); every later activation and
 * gradient travels as bare bytes of that shape. An output of another shape
 * or dtype (in any micro-batch of any later step) fails the step, naming
 * the stage, rank, micro-batch and both shapes. Static shapes: the last
 * mini-batch of an epoch must have the same size (drop it if it is short).
 *
 * Schedules (S stages, stage s, M micro-batches; F forward, B backward of
 * the input gradient, W backward of the weight gradients, BW both):
 *   GPIPE  F0..F(M-1), then BW0..BW(M-1).
 *   1F1B   (PipeDream-flush) min(S-1-s, M) warm-up forwards, then one
 *          forward and one backward in turn, then the remaining backwards.
 *   ZB_H1  (zero bubble, Qi et al. 2024) 1F1B's order of F and B; each W
 *          is deferred as the paper's ZB-H1 defers it: stage s runs W(j)
 *          right after B(j + s) (s W's pending, so S micro-batches in
 *          flight at most; fewer with M < S), the rest after its last B.
 *          Fixed places: a stage never runs a W in place of a wait, so a
 *          message a little late costs its lateness only. The backward is split
 *          by the autograd engine's input mode: B is td_grad to the input
 *          and to the gradient entering every "weight node" (a node with
 *          an edge to a parameter), keeping the graph; W runs each weight
 *          node alone from that gradient to its parameters. Linear and
 *          matmul compute only the half a pass needs, so B + W costs what
 *          BW costs. A parameter reached twice in one stage's graph (a tied
 *          weight) fails W with the engine's "second time" error.
 * Invariants of the schedules (runtime/pipe/schedule.c, pipe.c):
 *   P1 Every stage runs forwards in micro-batch order 0..M-1 and input
 *      backwards (B or BW) in order 0..M-1, so neighbours post and match
 *      their messages in one order: one tag per direction, no metadata.
 *   P2 F(m) before B(m) before W(m) on a stage; W's run in order 0..M-1,
 *      so .grad sums micro-batches in single-process order.
 *   P3 Micro-batches in flight on stage s (forward done, W or BW not yet):
 *      GPIPE at most M, 1F1B at most min(S-s, M), ZB_H1 at most min(S, M)
 *      (1F1B's peak, stage 0's). Each stage runs one fixed op list per
 *      step (runtime/pipe/schedule.c) that keeps P1-P3.
 *   P4 A message is sent only with td_isend and waited for at the end of
 *      the step (or when its buffer is needed again), and each receive is
 *      posted before the op that needs it waits, so no two stages wait on
 *      each other.
 *   P5 The step's outcome is agreed: a stage whose forward, backward or
 *      message fails breaks the pipeline group (and its data-parallel
 *      group), telling every member, so every stage's step fails with an
 *      error naming the failed stage and its rank; a dead rank fails them
 *      too (within about a second, the transport's keepalive). After a
 *      failure the pipe is broken: make a new one.
 *   P6 Receive buffers are kept across steps (one pool per direction, at
 *      most M each): a micro-batch's input and output gradient go back to
 *      the pool once its last backward (BW, or W under ZB_H1, which may
 *      read the gradient) is done, with the input's .grad dropped, and
 *      the next receive reuses them. With TODIST_PIPE_POISON=1 they are
 *      filled with NaN as they go back, so a later read shows at once. So the X given to FORWARD on stage
 *      s > 0 is valid until the micro-batch's backward ends: copy it to
 *      keep it (torch.distributed.pipelining reuses its buffers too).
 *   P7 Each step records its trace (td_pipe_trace): every op, every wait
 *      on a receive and every send, in the order they happened, into a
 *      list made at create for the step's n_ops + 4M events (M waits and
 *      M sends a direction at most, P1), so no event is ever dropped or
 *      allocated for during a step.
 *   P8 A stage waiting for a message drives the transport itself for up
 *      to 50 ms before it sleeps (TODIST_PIPE_SPIN_MS sets it; 0: the
 *      runtime's own 2 ms), but only where every rank of this host has a
 *      core of its own (ranks <= the cores this process could run on
 *      when td_init began, so ranks that TODIST_BIND=closest bound to a
 *      core each still spin):
 *      there the waiting stage has nothing else to run, and a sleeper's
 *      wake-up cost 0.1-2 ms per message; with fewer cores, spinning would
 *      take the core from the very rank it waits for.
 *   P9 Stage 0 computes no gradient of its INPUT (the data needs none):
 *      it cuts the micro-batches from INPUT without autograd, so no op of
 *      its forward keeps an edge to them and no backward (BW, or B and W)
 *      computes an input-gradient product (a linear layer's g W), in
 *      every schedule, even when INPUT requires grad. Only with
 *      opts.input_grad set is it computed, and then in every schedule
 *      (ZB_H1: in B, as stage s > 0 does): INPUT must be a leaf that
 *      requires grad, each micro-batch is then a leaf of its own (a view
 *      of its rows that requires grad, still no edge into INPUT), and
 *      after its backward (BW, or B) its gradient is added into its rows
 *      of INPUT's .grad (made as zeros in the step's first if unset), so
 *      .grad gets the gradient of the mini-batch's mean loss, summed over
 *      the micro-batches in order, at B/M rows a micro-batch (an edge
 *      through the slice would build and add a gradient of INPUT's whole
 *      size every micro-batch, M times the work).
 * Idle time: td_pipe_stats reports per stage the step's wall time, the
 * time spent computing (F, B, W, BW) and the rest (waiting: the bubble).
 *
 * Threads: one thread drives a pipe; different pipes are independent. */
#ifndef TODIST_PIPE_H
#define TODIST_PIPE_H

#include <stddef.h>
#include <todist/status.h>
#include <todist/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_pipe td_pipe_t;

typedef enum {
    TD_PIPE_GPIPE = 0,
    TD_PIPE_1F1B  = 1,
    TD_PIPE_ZB_H1 = 2
} td_pipe_schedule_t;

/* "gpipe", "1f1b", "zb" ("?" outside the table). */
const char *td_pipe_schedule_name(td_pipe_schedule_t s);
/* "gpipe", "1f1b", "zb" (or "zb-h1") -> *S; TD_ERR_INVALID naming NAME. */
td_status_t td_pipe_schedule_parse(const char *name, td_pipe_schedule_t *s);

/* One stage's forward for micro-batch MICRO (see above): *OUT_P gets a new
 * reference (the loss on the last stage). An error fails every stage's
 * step (P5). */
typedef td_status_t (*td_pipe_forward_fn)(void *arg, td_tensor_t *x,
                                          td_tensor_t *target, int micro,
                                          td_tensor_t **out_p);

typedef struct {
    int                n_stages;     /* S >= 1 */
    int                n_replicas;   /* R >= 1 (0 means 1) */
    int                n_micro;      /* M >= 1 */
    td_pipe_schedule_t schedule;
    td_pipe_forward_fn forward;
    void              *arg;
    /* This stage's parameters (leaves that require grad, contiguous);
     * retained by the pipe. */
    td_tensor_t *const *params;
    int                 n_params;
    /* Stage 0 only (P9): 0, the default, computes no gradient of INPUT
     * (the data needs none; even an INPUT that requires grad gets none);
     * 1 adds the gradient of the mean loss into INPUT's .grad in every
     * schedule (a pipeline fed by another model: pass a detached leaf,
     * then carry its .grad on with td_backward). INPUT must then be a
     * leaf that requires grad, or the step fails with TD_ERR_INVALID. */
    int                 input_grad;
} td_pipe_opts_t;

/* Collective over the world (every rank, same S, R, M and schedule; each
 * its own stage's forward and parameters). Makes R pipeline groups and,
 * with R > 1, S data-parallel groups. */
td_status_t td_pipe_create(const td_pipe_opts_t *opts, td_pipe_t **pipe_p);
/* This rank's stage and replica. */
int         td_pipe_stage(const td_pipe_t *p);
int         td_pipe_replica(const td_pipe_t *p);
/* One mini-batch (see above). INPUT on stage 0, TARGET on the last stage
 * (NULL elsewhere; on a one-stage pipe both). *LOSS_P (may be NULL): the
 * mean of the micro-batch losses on the last stage, NAN elsewhere. */
td_status_t td_pipe_step(td_pipe_t *p, td_tensor_t *input,
                         td_tensor_t *target, double *loss_p);

typedef struct {
    double step_s;         /* wall time of the last step */
    double busy_s;         /* of which computing F, B, W, BW */
    double bubble;         /* (step_s - busy_s) / step_s */
    double theory;         /* the schedule's bubble with equal stage times,
                              F = B = W and messages taking no time:
                              (S-1)/(M+S-1); ZB_H1 (S-1)/(3M+S-1) (M >= S) */
    double model;          /* the same schedule replayed with every stage
                              taking this stage's mean F, B, W of the step
                              (messages still free): what the schedule can
                              give at these op times (NAN for a pipe of
                              S*S*M > 1e5) */
    int    peak_in_flight; /* micro-batches holding activations (P3) */
    size_t peak_act_bytes; /* heap growth at the peak over the step's start
                              (glibc mallinfo2: the process, every thread;
                              freed tensor storage kept for reuse is not
                              counted as in use) */
    double allreduce_s;    /* waiting for the replicas' all_reduce (R > 1) */
    /* Where the step went (busy_s = fwd_s + bwd_s + wgt_s): */
    double fwd_s;          /* forwards */
    double bwd_s;          /* input backwards (B) or whole ones (BW) */
    double wgt_s;          /* weight backwards (W, ZB_H1) */
    double wait_s;         /* blocked on a receive: the bubble proper */
    double send_s;         /* posting sends, and waiting for them at the end */
    double post_s;         /* taking buffers for and posting receives */
    int    recv_allocs;    /* receive buffers allocated in the step: 0 once
                              the pipe keeps enough (P6) */
} td_pipe_stats_t;

/* Split a chain of N_LAYERS layers, layer l costing COST[l] (>= 0: its
 * measured forward + backward time, say), into N_STAGES contiguous
 * stages so that the costliest stage costs least (GPipe's and
 * PipeDream's partitioner for a chain; exact, O(N_STAGES x N_LAYERS^2)):
 * stage s gets layers FIRST[s] .. FIRST[s+1]-1, FIRST[N_STAGES] =
 * N_LAYERS (FIRST has N_STAGES + 1 entries). Every stage gets a layer.
 * Deterministic: the same costs give the same split on every rank
 * (measure on one rank and broadcast, or agree on computed costs).
 * TD_ERR_INVALID for fewer layers than stages or a cost that is negative,
 * NaN or infinite, naming it. */
td_status_t td_pipe_partition(const double *cost, int n_layers, int n_stages,
                              int *first);

/* Figures of this rank's last step. */
td_status_t td_pipe_stats(const td_pipe_t *p, td_pipe_stats_t *stats);

/* The last step's trace: what this stage did and when, in the order it
 * happened (every step records it: a clock read per event, as the stats
 * already take). Times are td_now_s's clock (CLOCK_MONOTONIC), so the
 * traces of ranks on one host line up: the time from a SEND's T0 on one
 * stage to the end of the matching WAIT on its neighbour is the message's
 * latency as the waiting stage saw it (bench/pipeline_trace.py). */
typedef enum {
    TD_PIPE_EV_F         = 0,   /* forward, T0..T1 */
    TD_PIPE_EV_BW        = 1,   /* whole backward (GPIPE, 1F1B) */
    TD_PIPE_EV_B         = 2,   /* input-gradient backward (ZB_H1) */
    TD_PIPE_EV_W         = 3,   /* weight-gradient backward (ZB_H1) */
    TD_PIPE_EV_WAIT_ACT  = 4,   /* blocked on the activation from s-1 */
    TD_PIPE_EV_WAIT_GRAD = 5,   /* blocked on the gradient from s+1 */
    TD_PIPE_EV_SEND_ACT  = 6,   /* T0 the activation was ready, T1 its
                                   td_isend returned */
    TD_PIPE_EV_SEND_GRAD = 7    /* the same for the gradient to s-1 */
} td_pipe_event_kind_t;

typedef struct {
    td_pipe_event_kind_t kind;
    int                  micro;
    double               t0, t1;
} td_pipe_event_t;

/* "F", "BW", "B", "W", "wait_act", "wait_grad", "send_act", "send_grad"
 * ("?" outside the table). */
const char *td_pipe_event_name(td_pipe_event_kind_t kind);
/* *EVENTS_P: the last step's events (at most 3M + 4M; owned by P, valid
 * until its next step or destroy), *N_P their number. A failed step's
 * trace ends where it failed. */
td_status_t td_pipe_trace(const td_pipe_t *p,
                          const td_pipe_event_t **events_p, int *n_p);
/* Frees P and its groups (waits for nothing: call after a step ended).
 * NULL is a no-op. */
void        td_pipe_destroy(td_pipe_t *p);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_PIPE_H */
