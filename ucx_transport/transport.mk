# ucx_transport: messages between ranks over UCP active messages.
libtodist_core_la_SOURCES += ucx_transport/transport.c
libtodist_core_la_SOURCES += ucx_transport/transport.h
# the staging engine: device bodies through pinned host buffers
libtodist_core_la_SOURCES += ucx_transport/staging.c ucx_transport/staging.h
