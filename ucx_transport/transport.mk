# ucx_transport: messages between ranks over UCP active messages.
libtodist_core_la_SOURCES += ucx_transport/transport.c
libtodist_core_la_SOURCES += ucx_transport/transport.h
# TODIST_FAULT (tests only), called from one hook in transport.c
libtodist_core_la_SOURCES += ucx_transport/fault.c ucx_transport/fault.h
# one-copy reads from another process of this host (process_vm_readv):
# the transport's bodies in place and the collectives' in-place reads
libtodist_core_la_SOURCES += ucx_transport/cma.c ucx_transport/cma.h
# mailboxes in shared memory between ranks of one host: the ring under
# the collectives' point-to-point channel and RPC's small messages
libtodist_core_la_SOURCES += ucx_transport/shm_mbox.c ucx_transport/shm_mbox.h
# the one staging module of device memory: the engine (device bodies
# through pinned host buffers), its copy functions, host copies
libtodist_core_la_SOURCES += ucx_transport/staging.c ucx_transport/staging.h \
	ucx_transport/staging_device.c
