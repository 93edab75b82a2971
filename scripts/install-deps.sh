#!/usr/bin/env bash
# Installs the system packages Tessera needs on a fresh Debian machine:
# OpenMPI (the `mpi` feature and the mpirun tests), libclang (bindgen, used by the `mpi` crate)
# and dpkg-dev (the real-data fetch script).
# Safe to run again: it does nothing when everything is present.
set -euo pipefail

need=()
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
[ -e /usr/include/x86_64-linux-gnu/openmpi/mpi.h ] || [ -n "$(find /usr/lib -name mpi.h -path '*openmpi*' 2>/dev/null | head -n1)" ] || need+=(libopenmpi-dev)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || need+=(libclang-dev)
# dpkg-source unpacks the suitesparse source package for the real-data tests.
command -v dpkg-source >/dev/null 2>&1 || need+=(dpkg-dev)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${need[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get -o DPkg::Lock::Timeout=300 update -q
$sudo apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends \
  openmpi-bin libopenmpi-dev libclang-dev pkg-config dpkg-dev >&2
