#!/usr/bin/env bash
# Install ns-3.37's development files (Debian's libns3-dev, with pkg-config and g++), which
# the ns-3 reference scenario (rlbm_jax/ns3/scenario) is built against: a no-op when they are
# there already.  Part of the README's test command; needs apt-get, as root or through sudo.
set -euo pipefail

modules=(ns3-core ns3-network ns3-internet ns3-point-to-point ns3-applications ns3-traffic-control)

have_ns3() {
    command -v pkg-config >/dev/null 2>&1 && pkg-config --exists "${modules[@]}" && command -v g++ >/dev/null 2>&1
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    else
        sudo "$@"
    fi
}

if have_ns3; then
    echo "install_ns3.sh: ns-3 $(pkg-config --modversion ns3-core) is installed" >&2
    exit 0
fi
command -v apt-get >/dev/null 2>&1 || {
    echo "install_ns3.sh: no apt-get here; install ns-3.37's development files and pkg-config by hand" >&2
    exit 1
}
if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
    echo "install_ns3.sh: installing libns3-dev needs root or sudo" >&2
    exit 1
fi
echo "install_ns3.sh: installing libns3-dev" >&2
install() { as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q libns3-dev pkg-config g++ >&2; }
# the package lists may already be there; refresh them only if the install fails
install || { as_root apt-get update -q >&2 && install; }
have_ns3 || { echo "install_ns3.sh: libns3-dev installed, but pkg-config does not find ns-3" >&2; exit 1; }
