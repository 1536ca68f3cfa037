/* todist/elastic.h: in-place recovery. When a rank dies mid-training,
 * the survivors agree on who is alive, shrink the world in this process
 * (no restart) and go on; the step whose all_reduce failed is dropped.
 *
 *     td_elastic_t *el;
 *     td_elastic_create(NULL, &el);          after td_init, every rank
 *     ddp over td_elastic_group(el) ...
 *     for each step:
 *         st = forward, td_ddp_backward, td_ddp_wait;
 *         if (st == TD_OK) {
 *             td_optim_step; td_elastic_commit(el, ++step);
 *             td_elastic_admit(el, &ch, &grew);  every boundary, every member
 *             if (grew) heal, re-shard and move DDP as below
 *         }
 *         else {                             a member died (or timed out)
 *             td_optim_zero_grad;            the step is dropped
 *             td_elastic_recover(el, &ch);   agree, shrink
 *             if (ch.behind) td_checkpoint_broadcast(ck, group, ch.source);
 *             if (ch.self_behind) td_elastic_commit(el, ch.step);
 *             td_distributed_sampler_reshard(&s, ch.new_size, ch.new_rank, &pos);
 *             td_ddp_set_group(ddp, td_elastic_group(el));
 *         }
 *
 * Epochs. Epoch 0 is the world (td_group_world()). td_elastic_recover
 * forms epoch k + 1 through the store (runtime/elastic/quorum.h, Q1-Q6):
 * every member still running joins with its committed step and the ranks
 * its transport lost; once every member of epoch k joined or was
 * declared dead (or after the agreement timeout), one plan is written and
 * all adopt it. The new group holds the plan's ranks in increasing world
 * rank (group ranks 0..n-1); the old group is destroyed. A rank missing
 * from the plan, or from an earlier one (late, cut off, declared dead),
 * is refused with TD_ERR_STATE and must exit: it never rejoins.
 *
 * Commit. A step counts once its all_reduce completed on one survivor
 * (the result then held every rank's gradient): the plan's step is the
 * highest committed among the survivors, its source the rank that holds
 * it, and BEHIND says another survivor committed less (its all_reduce of
 * that step failed); then every member calls td_checkpoint_broadcast
 * from the source so all replicas are equal again, and a rank that was
 * behind (SELF_BEHIND) commits the step once its heal succeeded: until
 * then it claims none, so a heal cut short (the source died: its tensors
 * part-written) never makes it a source; when no survivor holds a whole
 * state the recovery fails (TD_ERR_STATE: resume from a checkpoint). A step that completed
 * nowhere is dropped and redone by the smaller world.
 *
 * Run under `todist-run --no-kill` (or `srun --todist=kill_on_fail=no`),
 * so the launcher keeps the survivors running. Under todist-run --no-kill
 * the launcher serves the store (TODIST_AGENT_STORE=1), so any rank, rank
 * 0 included, may die: the lowest survivor takes rank 0's roles (group
 * rank 0, the admitter). Where rank 0's process serves the store (srun
 * --todist), rank 0 must survive: a recovery without it fails at once
 * (TD_ERR_PEER, naming the store). After a shrink,
 * td_barrier and td_finalize count only the members.
 *
 * Subgroups. Every group made with td_group_new is re-formed with each
 * new epoch (EL10; todist/coll.h, td_group_lost): same handle, the ranks
 * of its creation list that are members, in that order, renumbered;
 * it shrinks with a death and grows back with a replacement (which makes
 * the same td_group_new calls, in the same order, right after
 * td_elastic_join). A group that lost no member is left as it is; one
 * left with no member fails every call naming it. No operation of a
 * subgroup may be in flight across td_elastic_recover/admit. A DDP object
 * over a subgroup that changed takes it again with td_ddp_set_group (same
 * handle); a ZeRO optimizer over one re-shards with td_zero_set_group
 * (same handle; it refuses to step until then, todist/zero.h Z5).
 *
 * Growth. A replacement for a lost rank — a new process with the same
 * world rank, started with TODIST_ELASTIC_JOIN=1 (todist-run --no-kill
 * --replace N does it for a rank that died, or start it yourself with the
 * dead rank's environment) — calls td_init, then td_elastic_join (not
 * td_elastic_create): it asks to join after the current epoch and waits.
 * At the next step boundary the epoch's admitter, its lowest member
 * (world rank 0 while it lives), admits it in td_elastic_admit (Q7, Q8,
 * Q10 of runtime/elastic/quorum.h), and one step later every member's
 * td_elastic_admit forms the next epoch with it (grew = 1); the joiner's
 * td_elastic_join returns in the same epoch. The change says behind
 * (the joiner has no state, self_behind): every member then calls
 * td_checkpoint_broadcast from ch.source (parameters, optimizer state,
 * sampler), the joiner commits ch.step, all re-shard the sampler and move
 * DDP to the new group (the joiner makes its DDP on it). A recovery of
 * the epoch in between takes the admitted joiners along. A request for
 * an epoch that a recovery closed is not carried over: the joiner asks
 * again after the next epoch (td_elastic_join does that itself, up to
 * join_timeout_s). Rank 0 can be replaced only where the launcher serves
 * the store (todist-run --no-kill).
 *
 * ZeRO (todist/zero.h R1-R4): after the heal above, every member calls
 * td_zero_set_group(zero, td_elastic_group(el)) (a joiner makes its
 * optimizer over the group and calls td_zero_join): the shards are re-cut
 * for the new world, the lost shard's state taken from the replica its
 * ring neighbour keeps (td_zero_opts_t.replicate), and the step that did
 * not complete is dropped. td_checkpoint_broadcast skips ZeRO items.
 * Without replicate, or when a shard and its replica were both lost, it
 * fails on every member: free the optimizer, make it again over the
 * group and td_checkpoint_load the last checkpoint.
 *
 * Every membership change is logged once per rank at TODIST_LOG=warn:
 * "elastic: epoch 1 at step 37: world 4 -> 3 (lost rank 2); this rank
 * 1 -> 1; agreement 1.2 ms, rebuild 0.3 ms".
 *
 * Threads: one thread per td_elastic_t, the one that called td_init (it
 * uses the runtime's store client). */
#ifndef TODIST_ELASTIC_H
#define TODIST_ELASTIC_H

#include <stdint.h>

#include <todist/coll.h>
#include <todist/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_elastic td_elastic_t;

typedef struct {
    double timeout_s;   /* agreement: how long to wait for every member of
                           the old epoch to join or be declared dead
                           (default 30, env TODIST_ELASTIC_TIMEOUT) */
    int    min_size;    /* fewer survivors fail the recovery (default 1) */
    double join_timeout_s; /* td_elastic_join: how long a replacement waits
                              to be admitted (default 300, env
                              TODIST_ELASTIC_JOIN_TIMEOUT) */
    double admit_wait_s;   /* the admitter's td_elastic_admit (the lowest
                              member), while the world is
                              smaller than at start, waits up to this long
                              at a boundary for every missing rank's
                              replacement to ask, then admits all that did
                              together (default 0: it does not wait, and
                              admits those that asked; env
                              TODIST_ELASTIC_ADMIT_WAIT): the world then
                              grows at a known step (tests, short runs);
                              the others wait meanwhile in the next step's
                              collective: keep it below TODIST_COLL_TIMEOUT */
} td_elastic_opts_t;

#define TD_ELASTIC_LOST_MAX 16

/* What a recovery did (td_elastic_recover). */
typedef struct {
    int64_t epoch;              /* the new epoch */
    int64_t step;               /* the plan's committed step (the source's) */
    int     source;             /* group rank, in the new group, holding it */
    int     behind;             /* some member committed less: heal it */
    int     self_behind;        /* this rank is one of them: after the
                                   heal, td_elastic_commit(el, step) */
    int     old_size, new_size;
    int     old_rank, new_rank; /* this rank's group rank before / after */
    int     n_lost;             /* old members not in the new epoch */
    int     lost[TD_ELASTIC_LOST_MAX]; /* their world ranks (the first 16) */
    double  agree_s;            /* entering td_elastic_recover to the plan */
    double  rebuild_s;          /* the plan to the new group in place */
    int     n_joined;           /* new members (replacements) */
    int     joined[TD_ELASTIC_LOST_MAX]; /* their world ranks (first 16) */
} td_elastic_change_t;

td_elastic_opts_t td_elastic_defaults(void);

/* Start at epoch 0 (the world). After td_init; OPTS may be NULL. */
td_status_t td_elastic_create(const td_elastic_opts_t *opts,
                              td_elastic_t **el_p);
/* The current epoch's group (borrowed; replaced by td_elastic_recover). */
td_group_t *td_elastic_group(const td_elastic_t *el);
int64_t     td_elastic_epoch(const td_elastic_t *el);
/* This rank applied step STEP (its all_reduce completed, the optimizer
 * stepped): the committed step a recovery reports. */
void        td_elastic_commit(td_elastic_t *el, int64_t step);
int64_t     td_elastic_committed(const td_elastic_t *el);
/* After an operation of the current group failed: agree on the survivors
 * (epoch + 1), shrink the group and the runtime's members in place, fill
 * *CHANGE (may be NULL). TD_ERR_STATE when this rank is stale (not in the
 * new epoch: exit); TD_ERR_RANGE below min_size; TD_ERR_PEER when rank
 * 0's process serves the store and rank 0 is lost or the store gone. Called again after a failure of the new group
 * (a death during the recovery), it forms the next epoch. */
td_status_t td_elastic_recover(td_elastic_t *el, td_elastic_change_t *change);
/* At a step boundary (after td_elastic_commit), on every member, every
 * step: admits the replacements waiting (the lowest member decides, at the next
 * boundary all grow together). *GREW_P 1 when the world grew here: the
 * group is the new epoch's and *CHANGE (may be NULL) says what changed,
 * as td_elastic_recover's (heal from change->source). Free while no rank
 * is lost; a store read per step after a loss. */
td_status_t td_elastic_admit(td_elastic_t *el, td_elastic_change_t *change,
                             int *grew_p);
/* In a replacement (TODIST_ELASTIC_JOIN=1), after td_init, instead of
 * td_elastic_create: wait until admitted, then enter the new epoch with
 * the members (*CHANGE: the epoch, the source to heal from, self_behind).
 * TD_ERR_TIMEOUT after opts->join_timeout_s; TD_ERR_STATE in a process
 * that started with the world. */
td_status_t td_elastic_join(const td_elastic_opts_t *opts,
                            td_elastic_t **el_p, td_elastic_change_t *change);
/* 1 when this process started as a replacement (TODIST_ELASTIC_JOIN=1). */
int         td_elastic_replacement(void);
/* Destroys the current group (unless the world's): free EL after what
 * uses the group (DDP), before td_finalize. NULL is a no-op. */
void        td_elastic_free(td_elastic_t *el);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_ELASTIC_H */
