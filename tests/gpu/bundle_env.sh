# Sourced with the path of an unpacked GPU bundle (make_gpu_bundle.sh): sets
# LD_LIBRARY_PATH (the bundle's libraries, then the machine's CUDA libraries: /usr/local/cuda
# if present, else the NVIDIA wheels PyTorch installed) and MTRAIN_DATA_DIR, so that the
# bundle's binaries run from any command on the GPU machine.
#
#   source tests/gpu/bundle_env.sh /tmp/gpu_bundle && /tmp/gpu_bundle/bin/train --help
BUNDLE=${1:-/tmp/gpu_bundle}
cuda_libs=""
for dir in /usr/local/cuda/lib64 $(python3 -c "import nvidia, os; print(' '.join(os.path.join(p, d, 'lib') for p in nvidia.__path__ for d in os.listdir(p)))" 2>/dev/null); do
  [[ -d "$dir" ]] && cuda_libs="$cuda_libs:$dir"
done
# The bundle's C++ runtime (GCC 12, Debian 12) needs glibc 2.36; the binaries themselves
# need 2.34 and GLIBCXX_3.4.30 (GCC 12's libstdc++, which Ubuntu 22.04 has).
cxx_libs=""
glibc=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
if [[ "$(printf '%s\n' 2.36 "$glibc" | sort -V | head -1)" == 2.36 ]]; then
  cxx_libs=":$BUNDLE/lib/cxx"
else
  echo "glibc $glibc: using this machine's libstdc++ (the bundle's needs glibc 2.36)"
fi
export LD_LIBRARY_PATH="$BUNDLE/lib$cxx_libs$cuda_libs"
# cuDNN 9 and NVRTC 13 (the fused attention) where the loader still misses them: PyTorch's
# wheels keep them under nvidia/*/lib, found above; otherwise look in the usual places.
for lib in libcudnn.so.9 libnvrtc.so.13; do
  if ldd "$BUNDLE/bin/train" 2>/dev/null | grep -q "$lib => not found"; then
    found=$(find / -xdev -name "$lib" -not -path '*/proc/*' 2>/dev/null | head -1)
    [[ -n "$found" ]] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$found")"
    echo "bundle_env: $lib from ${found:-nowhere (not found)}"
  fi
done
export MTRAIN_DATA_DIR="$BUNDLE/data"
