fi=$(command -v fi_info || ls /opt/amazon/efa/bin/fi_info 2>/dev/null)
if [ -z "$fi" ]; then
  echo "gpufleet-efa-check: FAIL: fi_info is not in the image: it needs libfabric and aws-ofi-nccl" \
    "(AWS: efa_installer.sh --skip-kmod --skip-limit-conf --no-verify in the image;" \
    "for an NGC image add --enable-ngc, efa-installer >= 1.49)"
  exit 1
fi
plugin=
for d in /opt/amazon/efa/lib /opt/amazon/openmpi/lib /opt/amazon/ofi-nccl/lib64 /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu /opt/amazon/ofi-nccl/lib/aarch64-linux-gnu /opt/amazon/ofi-nccl/lib /opt/aws-ofi-nccl/lib; do ls "$d"/libnccl-net*.so >/dev/null 2>&1 && plugin="$d"; done
if [ -z "$plugin" ] && ldconfig -p 2>/dev/null | grep -q libnccl-net; then plugin=ldconfig; fi
if [ -z "$plugin" ]; then
  echo "gpufleet-efa-check: FAIL: aws-ofi-nccl (libnccl-net*.so) is not in the image: NCCL would use TCP" \
    "sockets (for an NGC image: efa_installer.sh --enable-ngc, efa-installer >= 1.49)"
  exit 1
fi
n=$("$fi" -p efa -t FI_EP_RDM 2>/dev/null | awk '$1 == "domain:" {print $2}' | sort -u | wc -l)
if [ "$n" -lt 32 ]; then
  echo "gpufleet-efa-check: FAIL: fi_info -p efa sees $n EFA interfaces in the container," \
    "the instance type has 32: are its /dev/infiniband/uverbs* devices passed in?"
  exit 1
fi
echo "gpufleet-efa-check: ok: $n EFA interfaces (need 32), aws-ofi-nccl in $plugin"
