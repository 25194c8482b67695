#!/usr/bin/env bash
# Gathers what a runtime image needs from a build: the binaries, the shipped corpus, and
# the shared libraries they link. Run in the builder stage of deploy/docker/Dockerfile.*
# (and by //deploy:collect_runtime_test):
#
#   collect_runtime.sh --out=/out --mode=packages|bundle [--provided=REGEX] BINARY... CORPUS
#
# OUT/bin gets the binaries, OUT/data the corpus (the last argument). Libraries:
#   --mode=packages  OUT/runtime-packages.txt lists the distribution packages that hold
#                    them, for a runtime image of the SAME distribution release to install;
#                    a library of no package goes to OUT/lib.
#   --mode=bundle    every library goes to OUT/lib, for a runtime image of another
#                    distribution: the binaries then run with exactly the libraries they
#                    were built against.
# Never collected: the C library's own (libc, libm, ld-linux, ...), libstdc++ and libgcc_s
# (newer ones are backward compatible), and libraries whose file name matches
# --provided (e.g. CUDA's, which the nvidia/cuda runtime image has). A library ldd cannot
# find fails the script.
set -euo pipefail

out=""
mode=""
provided='^$'
files=()
for arg in "$@"; do
  case "$arg" in
    --out=*) out="${arg#--out=}" ;;
    --mode=*) mode="${arg#--mode=}" ;;
    --provided=*) provided="${arg#--provided=}" ;;
    -*) echo "collect_runtime.sh: unknown flag $arg" >&2; exit 2 ;;
    *) files+=("$arg") ;;
  esac
done
if [[ -z "$out" || ( "$mode" != packages && "$mode" != bundle ) || ${#files[@]} -lt 2 ]]; then
  echo "usage: collect_runtime.sh --out=DIR --mode=packages|bundle [--provided=REGEX]" \
       "BINARY... CORPUS" >&2
  exit 2
fi
corpus="${files[-1]}"
binaries=("${files[@]:0:${#files[@]}-1}")

mkdir -p "$out/bin" "$out/lib" "$out/data"
for binary in "${binaries[@]}"; do
  cp -L "$binary" "$out/bin/"
  chmod 0755 "$out/bin/$(basename "$binary")"
done
cp -L "$corpus" "$out/data/"
chmod 0644 "$out/data/$(basename "$corpus")"

if missing=$(ldd "$out"/bin/* | grep "not found"); then
  echo "collect_runtime.sh: unresolved libraries:" >&2
  echo "$missing" >&2
  exit 1
fi

readonly from_base='^(libc|libm|libdl|libpthread|librt|libutil|libresolv|ld-linux[^/]*|linux-vdso|libstdc\+\+|libgcc_s)\.so'
libraries=()
while read -r library; do
  name=$(basename "$library")
  [[ "$name" =~ $from_base ]] && continue
  [[ "$name" =~ $provided ]] && continue
  libraries+=("$library")
done < <(ldd "$out"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u)

# Which package owns each library: one dpkg query for all of them (a query costs about
# 0.1 s, and a build links about a hundred). dpkg knows a file by the path its package
# installed, which may be a symlink's: both paths are asked.
declare -A owner_of=()
if [[ "$mode" == packages && ${#libraries[@]} -gt 0 ]]; then
  queries=()
  for library in "${libraries[@]}"; do
    queries+=("$library" "$(readlink -f "$library")")
  done
  # "package[:arch][, package...]: /path" for each owned path; unowned ones only on stderr.
  while IFS= read -r line; do
    [[ "$line" == *": /"* ]] || continue
    owner_of["${line#*: }"]="${line%%[:,]*}"
  done < <(dpkg -S "${queries[@]}" 2>/dev/null || true)
fi

packages=()
for library in "${libraries[@]}"; do
  owner="${owner_of[$library]:-${owner_of[$(readlink -f "$library")]:-}}"
  if [[ -n "$owner" ]]; then
    packages+=("$owner")
  else
    cp -L "$library" "$out/lib/$(basename "$library")"
  fi
done

package_count=0
if [[ "$mode" == packages ]]; then
  : > "$out/runtime-packages.txt"
  if ((${#packages[@]} > 0)); then
    printf '%s\n' "${packages[@]}" | sort -u > "$out/runtime-packages.txt"
  fi
  package_count=$(wc -l < "$out/runtime-packages.txt")
fi
echo "collected ${#binaries[@]} binaries, $(find "$out/lib" -type f | wc -l) bundled" \
     "libraries, $package_count packages"
