# bench/dist_backward: forward + distributed backward of the my_add graph
# beside torch.distributed.autograd (a program, not a test; built by make
# check so it keeps compiling). Run: bench/dist_backward.sh build
check_PROGRAMS += bench/dist_backward
bench_dist_backward_LDADD = $(TD_LDADD)
EXTRA_DIST += bench/dist_backward.sh bench/dist_backward_torch.py
