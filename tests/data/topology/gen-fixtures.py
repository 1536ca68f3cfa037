#!/usr/bin/env python3
"""Generate the synthetic hwloc XML node topologies the placement tests use.

hwloc's synthetic topologies have no I/O devices, so these are written as
hwloc 2 XML directly: 2 packages x 2 NUMA nodes (a Group each) x 4 cores x 2
hardware threads, PUs numbered as Linux does (thread 0 of every core first:
core c has PUs c and c+16), and PCI switches below one host bridge per NUMA
node holding NVIDIA GPUs (with an NVML OS device carrying NVIDIAUUID) and
Mellanox NICs (OpenFabrics OS devices mlx5_N).

  2s2n-8gpu-8nic.xml         2 switches per NUMA node, each 1 GPU + 1 NIC;
                             an NVSwitch (a bridge-class NVIDIA device) too
  2s2n-8gpu-4nic.xml         1 switch per NUMA node with 2 GPUs + 1 NIC
  2s-4gpu-onesocket.xml      GPUs (2 per NUMA node) on package 0 only, one
                             NIC on package 1
  2s2n-nogpu.xml             no GPU, one NIC per package
  2s2n-8gpu-8nic-cgroup.xml  the first, allowed set cut to cores 0-5 and
                             their threads (0-5,16-21), NUMA nodes 0-1, as
                             Slurm's cgroup for a 6-core step would
  g4dnmetal-cgroup.xml       ../g4dnmetal.xml (real, see README) allowed
                             only package 1 (PUs 24-47,72-95, NUMA node 1)

Run from this directory: ./gen-fixtures.py (writes the files here). The
expected plans in tests/test_topo.sh come from hwloc's own tools
(hwloc-calc) on these files, and their NICs from the layout above.
"""
import re
import sys

PACKAGES, NUMA_PER_PKG, CORES_PER_NUMA, THREADS = 2, 2, 4, 2
NCORES = PACKAGES * NUMA_PER_PKG * CORES_PER_NUMA


def hexset(bits):
    value = 0
    for b in bits:
        value |= 1 << b
    words = []
    while value or not words:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
    return ",".join("0x%08x" % w for w in reversed(words))


def core_pus(c):
    return [c + t * NCORES for t in range(THREADS)]


class Gen:
    def __init__(self):
        self.gp = 0
        self.lines = []
        self.nic = 0
        self.gpu = 0

    def gpi(self):
        self.gp += 1
        return self.gp

    def emit(self, depth, text):
        self.lines.append("  " * depth + text)

    def sets(self, pus, nodes):
        return ('cpuset="%s" complete_cpuset="%s" nodeset="%s" '
                'complete_nodeset="%s"' % (hexset(pus), hexset(pus),
                                           hexset(nodes), hexset(nodes)))

    def endpoint(self, d, kind, bus):
        busid = "0000:%02x:00.0" % bus
        if kind == "gpu":
            self.emit(d, '<object type="PCIDev" gp_index="%d" pci_busid="%s" '
                      'pci_type="0302 [10de:20b0] [10de:134f] a1" '
                      'pci_link_speed="31.507692">' % (self.gpi(), busid))
            self.emit(d + 1, '<object type="OSDev" gp_index="%d" name="nvml%d" '
                      'osdev_type="1">' % (self.gpi(), self.gpu))
            self.emit(d + 2, '<info name="Backend" value="NVML"/>')
            self.emit(d + 2, '<info name="NVIDIAUUID" value="GPU-%08x-1111-'
                      '2222-3333-%012x"/>' % (0xA0 + self.gpu, bus))
            self.emit(d + 1, '</object>')
            self.gpu += 1
        elif kind == "nic":
            self.emit(d, '<object type="PCIDev" gp_index="%d" pci_busid="%s" '
                      'pci_type="0207 [15b3:101b] [15b3:0007] 00" '
                      'pci_link_speed="31.507692">' % (self.gpi(), busid))
            self.emit(d + 1, '<object type="OSDev" gp_index="%d" name="mlx5_%d" '
                      'osdev_type="3"/>' % (self.gpi(), self.nic))
            self.nic += 1
        elif kind == "nvswitch":
            self.emit(d, '<object type="PCIDev" gp_index="%d" pci_busid="%s" '
                      'pci_type="0680 [10de:1af1] [10de:1712] a1" '
                      'pci_link_speed="0.000000">' % (self.gpi(), busid))
        self.emit(d, '</object>')

    def switch(self, d, bus, devices):
        """A PCIe switch: upstream port on BUS, one downstream port and one
        endpoint bus per device."""
        last = bus + 2 * len(devices)
        self.emit(d, '<object type="Bridge" gp_index="%d" bridge_type="1-1" '
                  'depth="1" bridge_pci="0000:[%02x-%02x]" pci_busid="0000:%02x:'
                  '00.0" pci_type="0604 [10b5:8747] [0000:0000] ca" '
                  'pci_link_speed="15.753846">' % (self.gpi(), bus + 1, last, bus))
        for k, kind in enumerate(devices):
            sec = bus + 2 + 2 * k
            self.emit(d + 1, '<object type="Bridge" gp_index="%d" '
                      'bridge_type="1-1" depth="2" bridge_pci="0000:[%02x-%02x]" '
                      'pci_busid="0000:%02x:%02x.0" pci_type="0604 [10b5:8747] '
                      '[0000:0000] ca" pci_link_speed="15.753846">'
                      % (self.gpi(), sec, sec, bus + 1, 8 + k))
            self.endpoint(d + 2, kind, sec)
            self.emit(d + 1, '</object>')
        self.emit(d, '</object>')

    def topology(self, io, allowed_pus=None, allowed_nodes=None):
        """IO maps a NUMA node number to a list of switches, each a list of
        device kinds."""
        all_pus = [p for c in range(NCORES) for p in core_pus(c)]
        nodes = list(range(PACKAGES * NUMA_PER_PKG))
        self.emit(0, '<?xml version="1.0" encoding="UTF-8"?>')
        self.emit(0, '<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
        self.emit(0, '<topology version="2.0">')
        self.emit(1, '<object type="Machine" os_index="0" %s allowed_cpuset="%s" '
                  'allowed_nodeset="%s" gp_index="%d">'
                  % (self.sets(all_pus, nodes),
                     hexset(allowed_pus if allowed_pus is not None else all_pus),
                     hexset(allowed_nodes if allowed_nodes is not None else nodes),
                     self.gpi()))
        self.emit(2, '<info name="Backend" value="Linux"/>')
        self.emit(2, '<info name="Architecture" value="x86_64"/>')
        self.emit(2, '<info name="HostName" value="todist-fixture"/>')
        for p in range(PACKAGES):
            pnodes = [p * NUMA_PER_PKG + k for k in range(NUMA_PER_PKG)]
            pcores = [c for n in pnodes for c in
                      range(n * CORES_PER_NUMA, (n + 1) * CORES_PER_NUMA)]
            ppus = [x for c in pcores for x in core_pus(c)]
            self.emit(2, '<object type="Package" os_index="%d" %s gp_index="%d">'
                      % (p, self.sets(ppus, pnodes), self.gpi()))
            for n in pnodes:
                cores = list(range(n * CORES_PER_NUMA, (n + 1) * CORES_PER_NUMA))
                npus = [x for c in cores for x in core_pus(c)]
                self.emit(3, '<object type="Group" %s kind="1000" subkind="0" '
                          'gp_index="%d">' % (self.sets(npus, [n]), self.gpi()))
                self.emit(4, '<object type="NUMANode" os_index="%d" %s '
                          'local_memory="68719476736" gp_index="%d">'
                          % (n, self.sets(npus, [n]), self.gpi()))
                self.emit(5, '<page_type size="4096" count="16777216"/>')
                self.emit(4, '</object>')
                for c in cores:
                    self.emit(4, '<object type="Core" os_index="%d" %s '
                              'gp_index="%d">' % (c, self.sets(core_pus(c), [n]),
                                                  self.gpi()))
                    for pu in core_pus(c):
                        self.emit(5, '<object type="PU" os_index="%d" %s '
                                  'gp_index="%d"/>' % (pu, self.sets([pu], [n]),
                                                       self.gpi()))
                    self.emit(4, '</object>')
                switches = io.get(n, [])
                if switches:
                    base = 0x20 + 0x30 * n
                    self.emit(4, '<object type="Bridge" gp_index="%d" '
                              'bridge_type="0-1" depth="0" bridge_pci="0000:'
                              '[%02x-%02x]">' % (self.gpi(), base, base + 0x2f))
                    # Listed last switch first: tree order is not bus order.
                    for s in reversed(range(len(switches))):
                        self.switch(5, base + 0x10 * s, switches[s])
                    self.emit(4, '</object>')
                self.emit(3, '</object>')
            self.emit(2, '</object>')
        self.emit(1, '</object>')
        self.emit(1, '<support name="discovery.pu"/>')
        self.emit(0, '</topology>')
        return "\n".join(self.lines) + "\n"


def write(name, text):
    with open(name, "w") as f:
        f.write(text)


def main():
    pair = [["gpu", "nic"], ["gpu", "nic"]]
    write("2s2n-8gpu-8nic.xml", Gen().topology(
        {0: pair, 1: pair, 2: pair, 3: [["gpu", "nic"], ["gpu", "nic", "nvswitch"]]}))
    cg_pus = [x for c in range(6) for x in core_pus(c)]
    write("2s2n-8gpu-8nic-cgroup.xml", Gen().topology(
        {0: pair, 1: pair, 2: pair, 3: [["gpu", "nic"], ["gpu", "nic", "nvswitch"]]},
        allowed_pus=cg_pus, allowed_nodes=[0, 1]))
    shared = [["gpu", "gpu", "nic"]]
    write("2s2n-8gpu-4nic.xml", Gen().topology(
        {0: shared, 1: shared, 2: shared, 3: shared}))
    write("2s-4gpu-onesocket.xml", Gen().topology(
        {0: [["gpu", "gpu"]], 1: [["gpu", "gpu"]], 2: [["nic"]]}))
    write("2s2n-nogpu.xml", Gen().topology({1: [["nic"]], 3: [["nic"]]}))

    # A real node as a Slurm cgroup would show it: package 1 only.
    with open("g4dnmetal.xml") as f:
        real = f.read()
    pkg1 = list(range(24, 48)) + list(range(72, 96))
    real, n = re.subn(r'(<object type="Machine"[^>]*?) allowed_cpuset="[^"]*"'
                      r'([^>]*?) allowed_nodeset="[^"]*"',
                      r'\1 allowed_cpuset="%s"\2 allowed_nodeset="%s"'
                      % (hexset(pkg1), hexset([1])), real, count=1)
    if n != 1:
        sys.exit("gen-fixtures: no Machine allowed sets in g4dnmetal.xml")
    write("g4dnmetal-cgroup.xml", real)


if __name__ == "__main__":
    main()
