#!/usr/bin/env bash
# Builds the Dockerfile's three targets with buildah on a machine that cannot pull the
# default base images: it makes stand-ins for them locally and passes them as GO_IMAGE,
# BASE_IMAGE and STATIC_IMAGE, as a mirror or an air-gapped registry would.
#
#   build stage  a Debian 13 root (debootstrap, with gcc, libc6-dev and CA certificates) and
#                this machine's Go, GOPATH=/go, its GOPROXY and its CA certificates
#   BASE_IMAGE   the same Debian 13 root (glibc)
#   STATIC_IMAGE CA certificates and a passwd naming the nonroot user 65532, nothing else
#
# Then it checks each image's entrypoint and user, and runs its binary's --version inside it.
# Needs root, buildah, crun (or runc) and debootstrap; the Debian root is cached in
# $GPUDRA_CACHE/dockerfile/trixie. Usage: hack/verify-dockerfile.sh [VERSION]
set -euo pipefail

cd "$(dirname "$0")/.."
version=${1:-v0.0.0-verify}
cache=${GPUDRA_CACHE:-$HOME/.cache/gpudra}/dockerfile
root=$cache/trixie
prefix=localhost/gpudra-dockerfile

for tool in buildah debootstrap go; do
  command -v "$tool" >/dev/null || { echo "verify-dockerfile: $tool is not installed (apt-get install buildah crun debootstrap)" >&2; exit 2; }
done
if [[ $(id -u) != 0 ]]; then
  echo "verify-dockerfile: run as root (debootstrap and buildah's chroot isolation)" >&2
  exit 2
fi

if [[ ! -f $root/.complete ]]; then
  echo "debootstrap: Debian 13 (trixie) into $root"
  rm -rf "$root"
  mkdir -p "$cache"
  debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates trixie "$root"
  touch "$root/.complete"
fi

echo "base images: $prefix/base, $prefix/go, $prefix/static"
c=$(buildah from scratch)
m=$(buildah mount "$c")
tar -C "$root" --exclude=./.complete -cf - . | tar -C "$m" -xf -
buildah umount "$c" >/dev/null
buildah commit --quiet "$c" "$prefix/base:trixie" >/dev/null
buildah rm "$c" >/dev/null
c=$(buildah from "$prefix/base:trixie")
buildah copy --quiet "$c" "$(go env GOROOT)" /usr/local/go >/dev/null
# The build stage fetches modules through this machine's network: it trusts the same CAs
# (a proxy that inspects TLS has its own).
buildah copy --quiet "$c" /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt >/dev/null
buildah config --env GOPATH=/go --env PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env GOPROXY="$(go env GOPROXY)" --env GOSUMDB="$(go env GOSUMDB)" "$c"
buildah commit --quiet "$c" "$prefix/go:1.26-trixie" >/dev/null
buildah rm "$c" >/dev/null
c=$(buildah from scratch)
m=$(buildah mount "$c")
mkdir -p "$m/etc/ssl/certs" "$m/tmp"
cp "$root/etc/ssl/certs/ca-certificates.crt" "$m/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$m/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$m/etc/group"
buildah umount "$c" >/dev/null
buildah commit --quiet "$c" "$prefix/static:nonroot" >/dev/null
buildah rm "$c" >/dev/null

fail=0
for target in gpudra-kubelet-plugin gpudra-controller gpudra-scheduler; do
  tag=$prefix/$target:$version
  echo "buildah bud --target $target → $tag"
  buildah bud --quiet --layers --isolation chroot --target "$target" \
    --build-arg GO_IMAGE="$prefix/go:1.26-trixie" --build-arg BASE_IMAGE="$prefix/base:trixie" \
    --build-arg STATIC_IMAGE="$prefix/static:nonroot" --build-arg VERSION="$version" \
    --build-arg GIT_COMMIT="$(git rev-parse HEAD 2>/dev/null || true)" -t "$tag" . >/dev/null
  entry=$(buildah inspect --type image --format '{{.OCIv1.Config.Entrypoint}} user {{.OCIv1.Config.User}}' "$tag")
  c=$(buildah from "$tag")
  if out=$(buildah run --isolation chroot "$c" -- "/usr/bin/$target" --version 2>&1) && [[ $out == *"$version"* ]]; then
    echo "  $entry: $out"
  else
    echo "  $entry: --version did not report $version: $out" >&2
    fail=1
  fi
  buildah rm "$c" >/dev/null
done
exit "$fail"
