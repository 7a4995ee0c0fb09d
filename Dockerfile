# gpudra's images, for a machine with a container engine and a network: one target per
# binary, the same images `make release` writes offline (internal/release; a test keeps the
# two in agreement: binary, user, entrypoint). See docs/release.md.
#
#   docker build --target gpudra-kubelet-plugin --build-arg VERSION=v1.2.3 -t ghcr.io/gpudra/gpudra-kubelet-plugin:1.2.3 .
#
# VERSION, GIT_COMMIT and BUILD_DATE are what the binaries report (--version, the
# gpudra_build_info metric); `make release` and `make build` take them from git.

# The base images, for a mirror or an air-gapped registry: the build stage's Go (Debian 13,
# with gcc for cgo, GOPATH=/go as in the golang image), the plugin's glibc base and the
# static base of the other two.
ARG GO_IMAGE=golang:1.26-trixie
ARG BASE_IMAGE=gcr.io/distroless/base-debian13
ARG STATIC_IMAGE=gcr.io/distroless/static-debian13:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=v0.0.0-dev
ARG GIT_COMMIT=
ARG BUILD_DATE=
ENV GOTOOLCHAIN=local \
    LDFLAGS_VERSION="-s -w -X k8s.io/component-base/version.gitVersion=${VERSION} -X k8s.io/component-base/version.gitCommit=${GIT_COMMIT} -X k8s.io/component-base/version.buildDate=${BUILD_DATE}"
# The kubelet plugin links go-nvml's C bindings (libnvidia-ml.so is loaded from the host's
# driver at run time); the controller and the scheduler are static.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 CGO_CFLAGS=-Wno-deprecated-declarations \
      go build -trimpath -ldflags "${LDFLAGS_VERSION}" -o /out/gpudra-kubelet-plugin ./cmd/gpudra-kubelet-plugin && \
    CGO_ENABLED=0 go build -trimpath -ldflags "${LDFLAGS_VERSION}" -o /out/ ./cmd/gpudra-controller ./cmd/gpudra-scheduler

# glibc (libc, libm, libdl, libpthread, librt: what the plugin and libnvidia-ml.so load), CA
# certificates; Debian 13 as the build stage, so that the glibc matches.
FROM ${BASE_IMAGE} AS gpudra-kubelet-plugin
COPY --from=build /out/gpudra-kubelet-plugin /usr/bin/gpudra-kubelet-plugin
USER 0:0
ENTRYPOINT ["/usr/bin/gpudra-kubelet-plugin"]

# CA certificates and the nonroot user (65532), no libc.
FROM ${STATIC_IMAGE} AS gpudra-controller
COPY --from=build /out/gpudra-controller /usr/bin/gpudra-controller
USER 65532:65532
ENTRYPOINT ["/usr/bin/gpudra-controller"]

FROM ${STATIC_IMAGE} AS gpudra-scheduler
COPY --from=build /out/gpudra-scheduler /usr/bin/gpudra-scheduler
USER 65532:65532
ENTRYPOINT ["/usr/bin/gpudra-scheduler"]
