#!/usr/bin/env bash
# Installs what PRISM needs on Debian 12 (idempotent: only missing packages are fetched).
# Usage: scripts/setup.sh            (as root, or with sudo available)
set -euo pipefail
PKGS=(
  build-essential meson ninja-build pkg-config
  libdpdk-dev dpdk dpdk-dev libyaml-cpp-dev libpcap-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-pytest python3-numpy python3-scapy python3-yaml
  tshark gnuplot-nox clang libclang-rt-14-dev valgrind
  iproute2 iputils-ping nftables ethtool
  librte-net-af-xdp23 libxdp1 libbpf1
  openmpi-bin libopenmpi-dev gfortran   # gfortran: libprism-mpi's Fortran test program (tests/mpi)
  # python3-torch (about 800 MB with its dependencies): the prism_torch backend and DDP hook
  # (python/prism_torch, examples/torch) and Gloo's allreduce in tools/bench_coll.py --compare
  python3-torch
  python3-dev pybind11-dev libxxhash-dev   # the `prism` Python package (python/prism: pybind11, XXH3 digests)
  python3-xxhash   # tests/py/test_torch.py: an independent XXH3 to check the digests
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # tshark asks whether non-root users may capture; answer no without a prompt.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
else
  echo "setup: all packages present"
fi
