# benchmarks of the transport (programs, not tests).
