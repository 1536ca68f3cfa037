/* test_sampler: DistributedSampler against torch's indices
 * (tests/data/sampler_ref.txt, from tests/data/gen_sampler_ref.py), and its
 * properties: ranks disjoint, their union the dataset (padding aside), a new
 * order per epoch, the same order on every run; bad arguments named. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/random.h"
#include "tests/tap.h"
#include <todist/sampler.h>

static int
check_reference(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[16384];
    int lines = 0, bad = 0;

    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        long long n, seed, epoch;
        int reps, rank, shuffle, drop;
        td_distributed_sampler_t s;
        int64_t *got;
        char *p = strchr(line, ':');
        int64_t want_n = 0, i = 0;

        if (p == NULL || sscanf(line, "%lld %d %d %d %lld %d %lld", &n, &reps,
                                &rank, &shuffle, &seed, &drop, &epoch) != 7) {
            bad++;
            continue;
        }
        if (td_distributed_sampler_init(&s, n, reps, rank, shuffle,
                                        (uint64_t)seed, drop) != TD_OK) {
            bad++;
            continue;
        }
        td_distributed_sampler_set_epoch(&s, epoch);
        got = calloc((size_t)s.num_samples + 1, sizeof(*got));
        td_distributed_sampler_indices(&s, got);
        /* the file holds all indices, or the first 64, -1, the last 64 */
        for (char *tok = strtok(p + 1, " \n"); tok; tok = strtok(NULL, " \n")) {
            long long v = atoll(tok);
            if (v == -1) {
                i = s.num_samples - 64;
                continue;
            }
            if (i >= s.num_samples || got[i] != v) {
                if (bad++ < 3) {
                    diag("len=%lld replicas=%d rank=%d epoch=%lld: index "
                         "%lld is %lld, torch says %lld", n, reps, rank, epoch,
                         (long long)i, i < s.num_samples ?
                         (long long)got[i] : -1LL, v);
                }
            }
            i++;
            want_n++;
        }
        if (s.num_samples <= 256 && want_n != s.num_samples) {
            bad++;
            diag("len=%lld replicas=%d rank=%d: %lld indices, torch has %lld",
                 n, reps, rank, (long long)s.num_samples, (long long)want_n);
        }
        free(got);
        lines++;
    }
    fclose(f);
    ok(lines >= 40, "reference file has %d rank lines", lines);
    return bad;
}

int
main(void)
{
    const char *srcdir = getenv("top_srcdir");
    char path[1024];
    td_distributed_sampler_t s;
    td_mt19937_t g;
    int64_t perm[10], idx[2][20];

    plan(29);

    /* MT19937's reference output (seed 5489: 10000th output 4123659995) */
    td__mt19937_seed(&g, 5489);
    uint32_t v = 0;
    for (int i = 0; i < 10000; i++) {
        v = td__mt19937_next(&g);
    }
    is_int(v, 4123659995u, "mt19937: 10000th output for seed 5489");
    td__mt19937_seed(&g, 0);
    td__mt19937_randperm(&g, 10, perm);
    is_int(perm[0] * 10 + perm[1], 41, "randperm(10) under seed 0 starts "
           "4, 1 as torch's does");

    snprintf(path, sizeof(path), "%s/tests/data/sampler_ref.txt",
             srcdir ? srcdir : ".");
    is_int(check_reference(path), 0, "indices equal torch's for every "
           "configuration and rank");

    /* properties over 4 replicas of 37 items */
    {
        int seen[37] = {0}, dup = 0, total = 0;
        for (int r = 0; r < 4; r++) {
            int64_t out[10];
            td_distributed_sampler_init(&s, 37, 4, r, 1, 7, 0);
            td_distributed_sampler_set_epoch(&s, 3);
            td_distributed_sampler_indices(&s, out);
            for (int i = 0; i < s.num_samples; i++) {
                if (seen[out[i]]++) {
                    dup++;
                }
                total++;
            }
        }
        int covered = 0;
        for (int i = 0; i < 37; i++) {
            covered += seen[i] > 0;
        }
        is_int(total, 40, "4 x 10 indices for 37 items (3 padded)");
        is_int(covered, 37, "the union of the ranks is the dataset");
        is_int(dup, 3, "only the 3 padding indices repeat");
    }
    td_distributed_sampler_init(&s, 20, 1, 0, 1, 0, 0);
    td_distributed_sampler_indices(&s, idx[0]);
    td_distributed_sampler_set_epoch(&s, 1);
    td_distributed_sampler_indices(&s, idx[1]);
    ok(memcmp(idx[0], idx[1], sizeof(idx[0])) != 0,
       "epoch 1 gives another order than epoch 0");
    td_distributed_sampler_set_epoch(&s, 0);
    td_distributed_sampler_indices(&s, idx[1]);
    ok(memcmp(idx[0], idx[1], sizeof(idx[0])) == 0,
       "epoch 0 again gives the same order (reproducible)");
    td_distributed_sampler_init(&s, 20, 1, 0, 0, 0, 0);
    td_distributed_sampler_indices(&s, idx[0]);
    is_int(idx[0][0] * 100 + idx[0][19], 19, "no shuffle: 0..19 in order");

    /* counts */
    td_distributed_sampler_init(&s, 10, 3, 0, 0, 0, 1);
    is_int(s.num_samples, 3, "drop_last: 10 over 3 gives 3 each");
    is_int(s.total_size, 9, "drop_last: total 9");
    td_distributed_sampler_init(&s, 10, 3, 0, 0, 0, 0);
    is_int(s.num_samples, 4, "padding: 10 over 3 gives 4 each");
    td_distributed_sampler_init(&s, 12, 3, 0, 0, 0, 1);
    is_int(s.num_samples, 4, "drop_last with an even split drops nothing");
    td_distributed_sampler_init(&s, 0, 2, 1, 1, 0, 0);
    is_int(s.num_samples, 0, "an empty dataset gives no indices");
    is_int(td_distributed_sampler_indices(&s, idx[0]), TD_OK,
           "and asking for them is fine");

    /* bad arguments */
    is_int(td_distributed_sampler_init(&s, 10, 4, 4, 1, 0, 0), TD_ERR_INVALID,
           "rank 4 of 4 is rejected");
    like(td_last_error(), "invalid rank 4.*\\[0, 3\\]", "the message names "
         "the rank and the interval");
    is_int(td_distributed_sampler_init(&s, 10, 0, 0, 1, 0, 0), TD_ERR_INVALID,
           "0 replicas is rejected");
    like(td_last_error(), "num_replicas=0", "the message names num_replicas");
    is_int(td_distributed_sampler_init(&s, -1, 2, 0, 1, 0, 0), TD_ERR_INVALID,
           "a negative length is rejected");
    like(td_last_error(), "length -1", "the message names the length");

    /* reshard: 2000 indices at 4 ranks (500 each), 352 consumed per rank
     * (1408 of the order), then 3 ranks: ceil(1408 / 3) = 470 each; the
     * epoch and the rest of the settings stay */
    {
        int64_t pos = 352;

        td_distributed_sampler_init(&s, 2000, 4, 2, 1, 7, 0);
        td_distributed_sampler_set_epoch(&s, 3);
        is_int(td_distributed_sampler_reshard(&s, 3, 1, &pos), TD_OK,
               "a sampler moves from 4 ranks to 3");
        is_int(pos, 470, "the position is re-sharded: ceil(352 * 4 / 3)");
        ok(s.num_replicas == 3 && s.rank == 1 && s.num_samples == 667 &&
           s.epoch == 3 && s.seed == 7 && s.shuffle == 1,
           "3 replicas, rank 1, 667 samples, the epoch and seed kept");
        pos = 300;
        td_distributed_sampler_reshard(&s, 1, 0, &pos);
        is_int(pos, 900, "at one rank: 300 * 3");
        /* 10 indices at 3 ranks are padded to 12: at one rank, at most 10 */
        td_distributed_sampler_init(&s, 10, 3, 0, 1, 7, 0);
        pos = 4;
        td_distributed_sampler_reshard(&s, 1, 0, &pos);
        is_int(pos, 10, "at most the epoch's end (10 at 1 rank, not 12)");
        pos = 11;
        is_int(td_distributed_sampler_reshard(&s, 2, 0, &pos), TD_ERR_INVALID,
               "a position past the epoch is rejected");
        ok(s.num_replicas == 1 && pos == 11, "and changes nothing");
    }
    return exit_status();
}
