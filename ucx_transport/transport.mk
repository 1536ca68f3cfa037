# ucx_transport: messages between ranks over UCP active messages.
libtodist_core_la_SOURCES += ucx_transport/transport.c
libtodist_core_la_SOURCES += ucx_transport/transport.h
