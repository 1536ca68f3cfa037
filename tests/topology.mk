# tests of the placement module and todist-topo.
