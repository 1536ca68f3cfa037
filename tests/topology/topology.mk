# tests of the placement module and todist-topo: real node topologies
# (tests/data/topology, see its README) and generated ones.
TESTS += tests/topology/test_topo.sh
td_topo_fixtures = tests/data/topology/README.md \
	tests/data/topology/gen-fixtures.py \
	tests/data/topology/g4dnmetal.xml \
	tests/data/topology/coral-lassen.xml \
	tests/data/topology/32em64t-2n8c2t-pci-wholeio.xml \
	tests/data/topology/cts1-pascal.xml \
	tests/data/topology/nvidiaDGX2.xml \
	tests/data/topology/2s2n-8gpu-8nic.xml \
	tests/data/topology/2s2n-8gpu-8nic-cgroup.xml \
	tests/data/topology/2s2n-8gpu-4nic.xml \
	tests/data/topology/2s-4gpu-onesocket.xml \
	tests/data/topology/2s2n-nogpu.xml \
	tests/data/topology/g4dnmetal-cgroup.xml
EXTRA_DIST += tests/topology/test_topo.sh $(td_topo_fixtures)
check_PROGRAMS += tests/topology/test_topology
tests_topology_test_topology_CFLAGS = $(AM_CFLAGS) $(HWLOC_CFLAGS)
tests_topology_test_topology_LDADD = $(TD_TEST_LDADD) $(HWLOC_LIBS)
TESTS += tests/topology/test_topology
