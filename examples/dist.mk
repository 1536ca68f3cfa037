# examples of distributed autograd: my_add (PyTorch's design-note example).
check_PROGRAMS += examples/my_add
examples_my_add_LDADD = $(TD_LDADD)
