#!/bin/sh
# Install everything todist builds, tests and benchmarks with on Debian 12.
# Needs root (or sudo). Safe to run again: apt-get skips what is present.
set -e
pkgs="autoconf automake libtool pkg-config make gcc
  libucx-dev ucx-utils libhwloc-dev hwloc libopenblas-dev zlib1g-dev libssl-dev
  dataset-fashion-mnist
  libslurm-dev slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins
  libpmix-dev
  valgrind procps iproute2 ca-certificates
  valgrind procps iproute2 ca-certificates gnuplot-nox
  lmod
  python3 python3-torch python3-numpy"
# PyTorch (python3-torch, 1.13) runs the c10d backend's tests
# (tests/torch/) and gives reference values and benchmark baselines; the
# tests skip cleanly without it. TODIST_WITH_TORCH is kept for old callers.
  valgrind procps iproute2 ca-certificates gnuplot-nox strace
  lmod"
# PyTorch gives reference values and benchmark baselines; tests pass without.
[ "${TODIST_WITH_TORCH:-0}" = 1 ] && pkgs="$pkgs python3-torch python3-numpy"
# Open MPI and gloo (torch) are the baselines of bench/collectives.sh.
[ "${TODIST_WITH_BASELINES:-0}" = 1 ] && pkgs="$pkgs openmpi-bin libopenmpi-dev python3-torch python3-numpy"

missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "install-deps: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing
