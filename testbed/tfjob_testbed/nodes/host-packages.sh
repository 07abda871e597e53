#!/usr/bin/env bash
# Install the Debian packages the real-node test bed needs, only those missing.
# Idempotent: with everything present it touches neither apt nor the network.
#
#   runc                             the OCI runtime under containerd (built from its Go module)
#   containernetworking-plugins      the CNI bridge and host-local IPAM (/usr/lib/cni)
#   dnsmasq-base                     cluster DNS, fed from Services and Endpoints
#   iptables, conntrack              kube-proxy (iptables mode)
#   debootstrap, podman              the stand-in base image and the image builds
#   gcc, libc6-dev                   the static pause binary for the sandbox image
#   openssl                          the control plane's certificates
set -euo pipefail

PACKAGES=(runc containernetworking-plugins dnsmasq-base iptables conntrack
    debootstrap podman gcc libc6-dev openssl)

missing=()
for p in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [[ $status == installed ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
    echo "[host-packages] present: ${PACKAGES[*]}"
    exit 0
fi
if [[ $(id -u) != 0 ]]; then
    echo "[host-packages] missing ${missing[*]}; run as root (or: sudo apt-get install ${missing[*]})" >&2
    exit 1
fi
echo "[host-packages] apt-get install ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian's packages start their services where systemd runs; the test bed runs its own
# containerd with a private config and socket, and needs none of them.
echo "[host-packages] installed ${missing[*]}"
