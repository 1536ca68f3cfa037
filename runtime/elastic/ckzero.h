/* runtime/elastic/ckzero.h: ZeRO shards in checkpoints (internal to
 * checkpoint.c): each rank's optimizer shards in a file of its own beside
 * the replicated checkpoint, and their re-cut at another world size.
 *
 * Files. A save with ZeRO items is collective over their group (size W):
 * rank 0 draws a save id (64 random bits) and broadcasts it; every rank r
 * writes PATH.zero-r-of-W.ID (safetensors, atomic as every checkpoint:
 * td_safetensors_save) holding, per item PREFIX, PREFIX.step (int64),
 * PREFIX.lr (float64) and PREFIX.buf.B (float64, the shard's length),
 * with "__metadata__" format "todist.checkpoint.zero.v1", save_id, rank,
 * world_size and PREFIX.offset / .length / .total / .slots; once every
 * rank's shard is on disk, rank 0 writes PATH with zero_save_id and
 * zero_world_size in its metadata, then removes the shard files of older
 * saves of PATH and what killed saves left (their shards' and PATH's
 * .tmp.PID.N files).
 *
 * Invariants:
 *  ZC1 PATH names exactly one complete set of shard files: the ones with
 *      its zero_save_id. PATH is renamed in only after every rank's shard
 *      was renamed in (an all_reduce of the outcomes), and older sets are
 *      removed only after PATH was; a save killed at any point leaves the
 *      old PATH and its complete old set, or the new PATH and its new set.
 *  ZC2 A shard file is used only when its save_id, rank, world_size and
 *      each item's offset, length, total and slots are exactly those PATH
 *      and the saved world's cut (zero.h Z1) imply; anything else is
 *      refused naming the file and the old rank, before any state is
 *      written (checkpoint.c CK2).
 *  ZC3 A load at world size W' gives rank r' the elements of its new
 *      shard [o', o' + l') from every old shard that overlaps it, so the
 *      flat optimizer state is the saved one, whatever W and W'. */
#ifndef TD_RUNTIME_ELASTIC_CKZERO_H
#define TD_RUNTIME_ELASTIC_CKZERO_H

#include <stdint.h>

#include <todist/coll.h>
#include <todist/tensor.h>
#include <todist/zero.h>

typedef struct {
    const char *prefix;
    td_zero_t  *zero;
} ckzero_item_t;

/* What a load read for one item, applied by ckzero_apply. */
typedef struct {
    td_tensor_t *buf[4];        /* float64 [len]: the new shard's state */
    td_tensor_t *rbuf[4];       /* float64 [rlen]: the replica's (zero.h
                                   R1), when the optimizer keeps one */
    int          slots;
    int64_t      step;
    double       lr;
} ckzero_state_t;

/* The save id: drawn by group rank 0, broadcast over G (collective). */
td_status_t ckzero_new_id(td_group_t *g, uint64_t *id_p);
/* Write this rank's shards of IT[N] (one group G) to PATH's shard file. */
td_status_t ckzero_save_shard(const char *path, uint64_t id, td_group_t *g,
                              const ckzero_item_t *it, int n);
/* Every member's ST, agreed over G (collective): TD_OK when all were, else
 * this rank's own error, or one naming the first rank that failed WHAT. */
td_status_t ckzero_agree(td_group_t *g, td_status_t st, const char *what);
/* Remove PATH's shard files of saves other than ID, complete or .tmp, and
 * PATH's own .tmp files (ZC1; best effort; group rank 0, after PATH). */
void        ckzero_clean(const char *path, uint64_t id);
/* Read this rank's new shard of IT and its replica's (ZC2, ZC3) from the shard files of
 * save ID at world size OLD_W into *OUT (changes nothing else). */
td_status_t ckzero_read(const char *path, uint64_t id, int old_w,
                        const ckzero_item_t *it, ckzero_state_t *out);
/* Copy a read state into the item's optimizer and replica, re-take its
 * shard of the parameters (zero.h Z4). */
td_status_t ckzero_apply(const ckzero_item_t *it, const ckzero_state_t *s);
void        ckzero_state_free(ckzero_state_t *s);

#endif /* TD_RUNTIME_ELASTIC_CKZERO_H */
