# tests of runtime/elastic/: checkpoints (unit, one process), and the
# example's exact resume under todist-run (2 ranks).
check_PROGRAMS += tests/elastic/test_checkpoint
tests_elastic_test_checkpoint_LDADD = $(TD_TEST_LDADD)
TESTS += tests/elastic/test_checkpoint tests/elastic/test_resume.sh
EXTRA_DIST += tests/elastic/test_resume.sh
# todist-run's restart rounds across two emulated hosts (tests/hosts.sh):
# a rank killed, a host killed; the worker counts every step's world.
check_PROGRAMS += tests/elastic/elastic_worker
tests_elastic_elastic_worker_LDADD = $(TD_LDADD)
TESTS += tests/elastic/test_rounds.sh
EXTRA_DIST += tests/elastic/test_rounds.sh
# the example's --elastic: a rank killed mid-training, and a resume at
# another world size (re-sharded sampler).
TESTS += tests/elastic/test_elastic.sh
EXTRA_DIST += tests/elastic/test_elastic.sh
# in-place recovery (todist/elastic.h): the quorum in one process (plans,
# deaths, late and stale ranks), then 4 ranks under todist-run --no-kill:
# a worker that heals a survivor behind, a late rank refused, and the
# example's --in-place against a checkpoint resumed at the smaller world.
check_PROGRAMS += tests/elastic/test_quorum tests/elastic/inplace_worker
tests_elastic_test_quorum_LDADD = $(TD_TEST_LDADD)
# the test sees quorum.c's store reads (check 13: a declaration lands
# between two of them)
tests_elastic_test_quorum_LDFLAGS = -Wl,--wrap=td_store_get
tests_elastic_inplace_worker_LDADD = $(TD_TEST_LDADD)
TESTS += tests/elastic/test_quorum tests/elastic/test_inplace.sh
EXTRA_DIST += tests/elastic/test_inplace.sh
# ZeRO shards in checkpoints (td_checkpoint_add_zero): same world bit for
# bit, re-cut at other world sizes, a missing shard, a shard of another save.
check_PROGRAMS += tests/elastic/zero_ck_peer
tests_elastic_zero_ck_peer_LDADD = $(TD_LDADD) -lm
TESTS += tests/elastic/test_zero_ckpt.sh
EXTRA_DIST += tests/elastic/test_zero_ckpt.sh
# subgroups shrink and grow with the world (EL10): tests/elastic/subgroup_worker
# (the internal library, as zero_el_worker and inplace_worker: their ranks
# die holding the progress token, tests/peer_die.h)
check_PROGRAMS += tests/elastic/subgroup_worker
tests_elastic_subgroup_worker_LDADD = $(TD_TEST_LDADD)
TESTS += tests/elastic/test_subgroups.sh
EXTRA_DIST += tests/elastic/test_subgroups.sh
# ZeRO in an in-place recovery (todist/zero.h R1-R4): a rank killed
# before or inside a step, the shards re-cut with the lost one's state
# from its replica, a joiner healed with its shard, against a reference
# Adam in every worker.
check_PROGRAMS += tests/elastic/zero_el_worker
tests_elastic_zero_el_worker_LDADD = $(TD_TEST_LDADD)
TESTS += tests/elastic/test_zero_elastic.sh
EXTRA_DIST += tests/elastic/test_zero_elastic.sh
