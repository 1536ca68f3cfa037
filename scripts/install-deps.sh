#!/bin/sh
# Install everything todist builds, tests and benchmarks with on Debian 12.
# Needs root (or sudo). Safe to run again: apt-get skips what is present.
set -e
# PyTorch (python3-torch, 1.13) runs the c10d backend's tests
# (tests/torch/) and gives reference values and benchmark baselines; the
# tests skip cleanly without it. TODIST_WITH_TORCH is kept for old callers.
torch="python3-torch python3-numpy"
pkgs="autoconf automake libtool pkg-config make gcc
  libucx-dev ucx-utils libhwloc-dev hwloc libopenblas-dev zlib1g-dev libssl-dev
  dataset-fashion-mnist
  libslurm-dev slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins
  libpmix-dev
  valgrind procps iproute2 ca-certificates gnuplot-nox man-db strace
  lmod
  python3 python3-pip $torch"
[ "${TODIST_WITH_TORCH:-0}" = 1 ] && pkgs="$pkgs $torch"
# Open MPI and gloo (torch) are the baselines of bench/collectives.sh.
[ "${TODIST_WITH_BASELINES:-0}" = 1 ] && pkgs="$pkgs openmpi-bin libopenmpi-dev $torch"
# Each package once (both options may be given).
pkgs=$(printf '%s\n' $pkgs | awk '!seen[$0]++')
# TODIST_DEPS_LIST=1: print the list and install nothing (tests/tree/test_install_deps.sh).
if [ "${TODIST_DEPS_LIST:-0}" = 1 ]; then
    printf '%s\n' $pkgs
    exit 0
fi

missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing="$missing $p"
done
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
if [ -n "$missing" ]; then
    echo "install-deps: installing$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
    $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing
fi
# The safetensors package (PyPI; not in Debian 12) is the format's own
# reader, for test_resume's check that a user can read a checkpoint. Best
# effort: without PyPI that one check skips, nothing else needs it.
if ! /usr/bin/python3 -c 'import safetensors.numpy' 2>/dev/null; then
    $SUDO /usr/bin/python3 -m pip install -q --break-system-packages \
        --disable-pip-version-check safetensors >/dev/null 2>&1 ||
        echo "install-deps: the safetensors package (PyPI) could not be" \
             "installed: test_resume's reader check will skip" >&2
fi
exit 0
