/* todist/checkpoint.h: training checkpoints that resume exactly.
 *
 * A checkpoint object lists what training state is, once: parameters and
 * other tensors, optimizers (step counts, momentum, Adam moments, lr),
 * DDP's bucket order, the sampler's epoch and position, integers (the step
 * number) and byte blobs (a caller's random generator state), plus string
 * metadata. td_checkpoint_save writes all of it to one safetensors file
 * (readable by Python's safetensors; the metadata is its "__metadata__",
 * with "format": "todist.checkpoint.v1"), atomically and durably (see
 * td_safetensors_save: PATH holds the old file or the whole new one,
 * whatever kills the writer). td_checkpoint_load fills the same objects
 * back in place: a file that is truncated, not a safetensors file, not a
 * todist checkpoint, or that lacks an entry or holds one of another shape
 * is rejected with an error naming it, and then nothing is changed.
 *
 * Replicated state (plain DDP) is saved by rank 0 and loaded by every
 * rank. A sampler saved at another world size (num_replicas) is refused,
 * unless td_checkpoint_allow_reshard: its position is then re-sharded.
 *
 * ZeRO (todist/zero.h, td_checkpoint_add_zero): each rank's optimizer
 * shard is saved by its owner, to PATH.zero-R-of-W.ID beside PATH
 * (safetensors too, atomic too; its metadata holds the shard's element
 * range, the total, the world size W it was cut for and the save id ID
 * that PATH's metadata names). A checkpoint with a ZeRO item is saved by
 * EVERY member of the ZeRO group (a collective: rank 0 writes PATH once
 * every shard is on disk, then removes older saves' shard files), and
 * loaded by every member; a load at another world size re-cuts the
 * shards: each rank reads the elements of its new shard from whichever
 * old files hold them. A shard file that is missing, from another save,
 * or cut for another layout is refused naming the file and its rank, and
 * nothing is changed. Shared storage: every rank must see every file.
 *
 *     td_checkpoint_create(&ck);
 *     td_checkpoint_add_tensors(ck, "model", params, n);
 *     td_checkpoint_add_optim(ck, "optim", opt);
 *     td_checkpoint_add_ddp(ck, "ddp", ddp);
 *     td_checkpoint_add_sampler(ck, "sampler", &sampler, &position);
 *     td_checkpoint_add_int64(ck, "step", &step, 1);
 *     if (resume) td_checkpoint_load(ck, path);      every rank
 *     ... train; every K steps: if (rank == 0) td_checkpoint_save(ck, path);
 *
 * Entry names: NAME for a tensor, NAME.I for td_checkpoint_add_tensors,
 * PREFIX.I.step / PREFIX.I.buf.B / PREFIX.lr for an optimizer,
 * PREFIX.bucket_order for DDP (rebuilt flag then the parameter indices),
 * PREFIX.state for a sampler (epoch, position, dataset_len, num_replicas,
 * shuffle, drop_last, seed); in a ZeRO shard file PREFIX.step, PREFIX.lr
 * and PREFIX.buf.B (B < the optimizer's state buffers, float64 over the
 * shard). Not thread-safe: one thread per object, and
 * not while the objects it lists are in use. */
#ifndef TODIST_CHECKPOINT_H
#define TODIST_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include <todist/ddp.h>
#include <todist/optim.h>
#include <todist/sampler.h>
#include <todist/tensor.h>
#include <todist/zero.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_checkpoint td_checkpoint_t;

td_status_t td_checkpoint_create(td_checkpoint_t **out);
void        td_checkpoint_free(td_checkpoint_t *ck);

/* Tensor T (contiguous, CPU; retained) under NAME; loaded in place. */
td_status_t td_checkpoint_add_tensor(td_checkpoint_t *ck, const char *name,
                                     td_tensor_t *t);
/* T[N] under PREFIX.0 .. PREFIX.N-1. */
td_status_t td_checkpoint_add_tensors(td_checkpoint_t *ck, const char *prefix,
                                      td_tensor_t *const *t, int n);
/* OPT's per-parameter step counts and state buffers, and its lr. */
td_status_t td_checkpoint_add_optim(td_checkpoint_t *ck, const char *prefix,
                                    td_optim_t *opt);
/* DDP's bucket order; a load rebuilds the buckets in it (every rank loads,
 * before its first backward). */
td_status_t td_checkpoint_add_ddp(td_checkpoint_t *ck, const char *prefix,
                                  td_ddp_t *ddp);
/* The sampler's epoch (a load calls td_distributed_sampler_set_epoch) and
 * *POSITION (the caller's count of this epoch's indices, or batches,
 * already consumed); a load checks the saved dataset_len, num_replicas,
 * shuffle, drop_last and seed against S's. */
td_status_t td_checkpoint_add_sampler(td_checkpoint_t *ck, const char *prefix,
                                      td_distributed_sampler_t *s,
                                      int64_t *position);
/* ZERO's shard of optimizer state (step count, lr, state buffers), in
 * this rank's shard file (above); one ZeRO group per checkpoint. Its
 * parameters are not part of it: add them as tensors (replicated, rank
 * 0's file). A load re-takes the shard's copy of the loaded parameters.
 * td_checkpoint_broadcast skips it (a shard lives on its owner only):
 * after a heal, td_zero_set_group re-shards it (todist/zero.h R4). */
td_status_t td_checkpoint_add_zero(td_checkpoint_t *ck, const char *prefix,
                                   td_zero_t *zero);
/* V[N] (borrowed, must outlive CK) as an int64 tensor: the step number. */
td_status_t td_checkpoint_add_int64(td_checkpoint_t *ck, const char *name,
                                    int64_t *v, int n);
/* P[SIZE] (borrowed) as a uint8 tensor: a random generator's state. */
td_status_t td_checkpoint_add_bytes(td_checkpoint_t *ck, const char *name,
                                    void *p, size_t size);
/* String metadata saved with the next saves (printable, no quotes or
 * backslashes; "format" is reserved). Read one back with
 * td_safetensors_metadata(path, key, ...). */
td_status_t td_checkpoint_set_meta(td_checkpoint_t *ck, const char *key,
                                   const char *value);

/* Let a load take a sampler saved at another world size W (a restart
 * after a node was lost or joined): the epoch goes on at position
 * ceil(saved position * W / this world size) (at most the epoch's end),
 * in whatever unit the position counts (indices or batches of this
 * epoch): no index is seen twice in that epoch, and fewer than one unit
 * per rank is skipped. The parameters, optimizer and DDP state are
 * replicated, so they load as they are. ALLOW 0 refuses again. */
void td_checkpoint_allow_reshard(td_checkpoint_t *ck, int allow);

td_status_t td_checkpoint_save(td_checkpoint_t *ck, const char *path);
td_status_t td_checkpoint_load(td_checkpoint_t *ck, const char *path);

/* Copy group rank ROOT's state to every member of GROUP, over the
 * transport (no file): every member calls it with the same list (a
 * collective: one td_broadcast per entry, the small entries first, then
 * the tensors); the others check the small entries as td_checkpoint_load
 * checks a file before any tensor is written, then receive the tensors
 * straight into theirs (a failure from then on leaves them part-written:
 * heal again), the root changes nothing. A member that refuses an entry
 * still takes part in every broadcast (into scratch, so nobody is left
 * waiting), changes nothing and returns the refusal. The in-place recovery's heal
 * (todist/elastic.h): a survivor behind the most advanced one catches up.
 * A sampler arrives as the root saved it (its num_replicas must be the
 * members' own, or td_checkpoint_allow_reshard). */
td_status_t td_checkpoint_broadcast(td_checkpoint_t *ck, td_group_t *group,
                                    int root);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_CHECKPOINT_H */
