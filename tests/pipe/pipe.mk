# tests of runtime/pipe: the schedules' op lists (unit), and stages over
# real point-to-point through todist-run (tests/pipe/pipe_peer).
check_PROGRAMS += tests/pipe/test_pipe_schedule
tests_pipe_test_pipe_schedule_LDADD = $(TD_TEST_LDADD)
TESTS += tests/pipe/test_pipe_schedule
check_PROGRAMS += tests/pipe/pipe_peer
tests_pipe_pipe_peer_LDADD = $(TD_TEST_LDADD) -lm
TESTS += tests/pipe/test_pipe.sh
EXTRA_DIST += tests/pipe/test_pipe.sh
check_PROGRAMS += tests/pipe/test_pipe_split
tests_pipe_test_pipe_split_LDADD = $(TD_TEST_LDADD)
TESTS += tests/pipe/test_pipe_split
check_PROGRAMS += tests/pipe/test_pipe_partition
tests_pipe_test_pipe_partition_LDADD = $(TD_TEST_LDADD)
TESTS += tests/pipe/test_pipe_partition
check_PROGRAMS += tests/pipe/test_pipe_spin
tests_pipe_test_pipe_spin_LDADD = $(TD_TEST_LDADD)
TESTS += tests/pipe/test_pipe_spin
