#!/usr/bin/env bash
# Builds the lab's real Kubernetes components from the Go module proxy and caches them.
#
#   lab/toolchain.sh [component...]   components: k8s etcd kwok kueue (default: all), node, cdihook, jobset,
#                                     trainingoperator, trainer, fluid
#   lab/toolchain.sh --status         say what is cached
#
# Every component is built in a throw-away module of its own and cached under
# $GPUDRA_CACHE (default ~/.cache/gpudra) keyed by version; a cached component is never
# rebuilt. Nothing here is committed to the repository.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.0}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
KUEUE_VERSION=${KUEUE_VERSION:-v0.19.2}
JOBSET_VERSION=${JOBSET_VERSION:-v0.12.0}
TRAINING_OPERATOR_VERSION=${TRAINING_OPERATOR_VERSION:-v1.9.3}
TRAINER_VERSION=${TRAINER_VERSION:-v2.2.1}
FLUID_VERSION=${FLUID_VERSION:-v1.0.8}
# The lab's main for the training operator, beside this script (runToolchain writes both).
TRAINING_OPERATOR_MAIN=$(cd "$(dirname "$0")" && pwd)/trainingoperator_main.go
# The lab's main for Kubeflow Trainer, beside this script too.
TRAINER_MAIN=$(cd "$(dirname "$0")" && pwd)/trainer_main.go
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
RUNC_VERSION=${RUNC_VERSION:-v1.5.3}
CNI_VERSION=${CNI_VERSION:-v1.10.0}
# nvidia-container-toolkit of go.mod: its nvcdi writes the hooks this nvidia-cdi-hook runs
# (lab/toolchain_test.go keeps the two equal).
NVIDIA_CTK_VERSION=${NVIDIA_CTK_VERSION:-v1.20.2}
CACHE=${GPUDRA_CACHE:-$HOME/.cache/gpudra}
TOOLS=$CACHE/toolchain
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0

dir_of() { # component → cache folder
  case $1 in
    k8s) echo "$TOOLS/kubernetes-$K8S_VERSION" ;;
    etcd) echo "$TOOLS/etcd-$ETCD_VERSION" ;;
    kwok) echo "$TOOLS/kwok-$KWOK_VERSION-kueue-$KUEUE_VERSION" ;;
    kueue) echo "$TOOLS/kueue-$KUEUE_VERSION" ;;
    node) echo "$TOOLS/node-$K8S_VERSION-containerd-$CONTAINERD_VERSION-runc-$RUNC_VERSION-seccomp-cni-$CNI_VERSION" ;;
    cdihook) echo "$TOOLS/nvidia-cdi-hook-$NVIDIA_CTK_VERSION" ;;
    jobset) echo "$TOOLS/jobset-$JOBSET_VERSION" ;;
    # keyed by the lab's main too: a changed main is built again
    trainingoperator) echo "$TOOLS/training-operator-$TRAINING_OPERATOR_VERSION-$(sha256sum "$TRAINING_OPERATOR_MAIN" | cut -c1-12)" ;;
    trainer) echo "$TOOLS/trainer-$TRAINER_VERSION-jobset-$JOBSET_VERSION-$(sha256sum "$TRAINER_MAIN" | cut -c1-12)" ;;
    fluid) echo "$TOOLS/fluid-crds-$FLUID_VERSION" ;;
    *) echo "unknown component $1 (accepted: k8s etcd kwok kueue node cdihook jobset trainingoperator trainer fluid)" >&2; return 2 ;;
  esac
}

log() { printf '[toolchain %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# ticker prints a line every 30 s while a long build runs, so a cold build does not look hung.
# Its sleep runs in the background and the TERM trap ends it: a sleep left behind would keep
# the script's stderr open, and whoever reads that pipe would wait for it long after the
# script ended.
ticker() {
  local what=$1 start=$SECONDS nap=
  trap '[[ -n $nap ]] && kill "$nap" 2>/dev/null; exit 0' TERM
  while :; do
    sleep 30 & nap=$!
    wait "$nap" || true
    log "$what: still building ($((SECONDS - start)) s)"
  done
}

build_in() { # $1 = component label, $2 = cache folder, $3 = "i/n" of this run; builds with build_$1
  local c=$1 out=$2 nth=$3 work
  if [[ -f $out/.complete ]]; then log "$c ($nth): cached in $out"; return 0; fi
  rm -rf "$out.tmp"; mkdir -p "$out.tmp/bin"
  work=$(mktemp -d "$TOOLS/.work-$c.XXXX")
  log "$c ($nth): building (cold builds take minutes; log in $out.log)"
  ticker "$c ($nth)" & local tick=$!
  local start=$SECONDS rc=0
  ( cd "$work" && "build_$c" "$out.tmp" ) >"$out.log" 2>&1 || rc=$?
  kill "$tick" 2>/dev/null; wait "$tick" 2>/dev/null || true
  rm -rf "$work"
  if (( rc != 0 )); then
    rm -rf "$out.tmp"
    log "$c ($nth): FAILED after $((SECONDS - start)) s; last lines of $out.log:"; tail -n 20 "$out.log" >&2; return "$rc"
  fi
  rm -rf "$out"; mv "$out.tmp" "$out"; touch "$out/.complete"
  log "$c ($nth): built in $((SECONDS - start)) s → $out/bin"
}

# k8s_module sets up a throw-away module that builds k8s.io/kubernetes commands at $K8S_VERSION
# (its staging repositories pinned to the matching v0 versions); $@ are the cmd/ packages.
k8s_module() {
  local gomod
  go mod init gpudra.dev/lab-kubernetes >/dev/null
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "require k8s.io/kubernetes $K8S_VERSION"
    grep -E '=> \./staging/src/' "$gomod" | awk -v v="v0${K8S_VERSION#v1}" '{print "replace " $1 " => " $1 " " v}'
  } >>go.mod
  go mod tidy >/dev/null 2>&1 || true
  { printf '//go:build tools\n\npackage tools\n\nimport (\n'; for c in "$@"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done; printf ')\n'; } >tools.go
  go mod tidy -e
}

build_k8s_cmds() { # $1 = output folder, then the cmd/ names; K8S_SHARED=1: built as gpudra's binaries are
  local out=$1; shift
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  local flags=(-trimpath) cgo=0
  if [[ -n ${K8S_SHARED:-} ]]; then flags=(); cgo=1; fi
  for cmd in "$@"; do
    echo "building $cmd"
    CGO_ENABLED=$cgo go build "${flags[@]}" -ldflags "$ld" -o "$out/bin/$cmd" "k8s.io/kubernetes/cmd/$cmd"
  done
}

# share_build_list makes the throw-away module select the versions of the module in folder $1
# (the Makefile passes gpudra's repository as GPUDRA_BUILD_LIST): it requires every module of
# that build list at its version, and tidy keeps those the commands use.
share_build_list() {
  local reqs
  reqs=$(cd "$1" && go list -m -f '{{if not .Main}}-require={{.Path}}@{{.Version}}{{end}}' all)
  # shellcheck disable=SC2086 # one -require flag per word
  [[ -z $reqs ]] || go mod edit $reqs
  go mod tidy -e
}

# kubernetes_cmds builds k8s.io/kubernetes commands ($2...) into $1/bin in a throw-away module.
# With GPUDRA_BUILD_LIST, they are built with gpudra's module versions and as gpudra's own
# binaries are (cgo on, CGO_CFLAGS as given, no -trimpath): on an empty build cache they then
# reuse the client-go, apiserver and scheduler packages gpudra's build just compiled instead
# of compiling them again at other versions. The control plane (k8s) and the real node's
# kubelet (node) are built alike, so that the kubelet reuses the control plane's packages.
kubernetes_cmds() {
  local out=$1; shift
  k8s_module "$@"
  if [[ -n ${GPUDRA_BUILD_LIST:-} ]]; then
    echo "with the module versions of $GPUDRA_BUILD_LIST"
    share_build_list "$GPUDRA_BUILD_LIST"
    K8S_SHARED=1 build_k8s_cmds "$out" "$@"
  else
    build_k8s_cmds "$out" "$@"
  fi
}

build_k8s() {
  kubernetes_cmds "$1" kube-apiserver kube-controller-manager kube-scheduler kubectl
}

# node: what a real lab node runs — kubelet, containerd 2 (CRI, CDI on by default) with its runc
# shim and ctr, runc, and the CNI plugins the node's bridge network needs. Not a default
# component: `gpudra lab up` asks for it when the lab file has real nodes.
build_node() {
  local out=$1
  mkdir -p kubelet && (cd kubelet && kubernetes_cmds "$out" kubelet)
  mkdir -p containerd && (
    cd containerd && go mod init gpudra.dev/lab-containerd >/dev/null
    printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/containerd/containerd/v2/cmd/containerd"\n' >tools.go
    go get "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" && go mod tidy -e
    for c in containerd containerd-shim-runc-v2 ctr; do
      echo "building $c"
      go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
        -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
        -o "$out/bin/$c" "github.com/containerd/containerd/v2/cmd/$c"
    done
  )
  mkdir -p runc && (
    # runc's nsenter is C: this one binary is built with cgo, and with seccomp (containerd gives
    # pod sandboxes the runtime/default profile), which needs Debian's libseccomp-dev.
    if [[ ! -f /usr/include/seccomp.h ]]; then
      echo "installing libseccomp-dev (Debian) for runc's seccomp support"
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libseccomp-dev pkg-config ||
        { echo "runc needs libseccomp-dev (apt-get install libseccomp-dev pkg-config)"; exit 1; }
    fi
    cd runc && go mod init gpudra.dev/lab-runc >/dev/null
    printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/opencontainers/runc"\n' >tools.go
    go get "github.com/opencontainers/runc@$RUNC_VERSION" && go mod tidy -e
    echo "building runc"
    CGO_ENABLED=1 go build -trimpath -tags seccomp -ldflags "-s -w -X main.version=${RUNC_VERSION#v}" -o "$out/bin/runc" github.com/opencontainers/runc
  )
  mkdir -p cni && (
    cd cni && go mod init gpudra.dev/lab-cni >/dev/null
    { printf '//go:build tools\n\npackage tools\n\nimport (\n'
      for p in main/bridge main/loopback ipam/host-local; do printf '\t_ "github.com/containernetworking/plugins/plugins/%s"\n' "$p"; done
      printf ')\n'; } >tools.go
    go get "github.com/containernetworking/plugins@$CNI_VERSION" && go mod tidy -e
    mkdir -p "$out/cni"
    for p in main/bridge main/loopback ipam/host-local; do
      echo "building cni ${p#*/}"
      go build -trimpath -ldflags "-s -w" -o "$out/cni/${p#*/}" "github.com/containernetworking/plugins/plugins/$p"
    done
  )
}

# cdihook: nvidia-container-toolkit's nvidia-cdi-hook, which runc runs on a real node for the
# hooks nvcdi puts in gpudra's CDI specs (create-symlinks, update-ldcache, ...). cgo: it links
# go-nvml. Not a default component: `gpudra lab up` asks for it when the lab has real nodes.
build_cdihook() {
  local out=$1
  CGO_ENABLED=1 CGO_CFLAGS=-Wno-deprecated-declarations GOBIN=$out/bin go install -trimpath \
    -ldflags "-s -w -X github.com/NVIDIA/nvidia-container-toolkit/internal/info.version=${NVIDIA_CTK_VERSION#v}" \
    "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook@$NVIDIA_CTK_VERSION"
}

# etcd: the lab's store, at the release Kubernetes $K8S_VERSION names (build/dependencies.yaml).
# With GPUDRA_BUILD_LIST it is built as the control plane is: with that module's versions
# (gpudra's build list selects etcd's server, client and API at this release), with cgo and
# without -trimpath, so that a cold build compiles only etcd's own packages (about 100 of
# 570) and reuses the grpc, protobuf, otel and etcd client packages gpudra's build compiled.
build_etcd() {
  local out=$1
  go mod init gpudra.dev/lab-etcd >/dev/null
  # tools.go first: `go mod tidy` drops requirements that no package of the module imports.
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >tools.go
  if [[ -n ${GPUDRA_BUILD_LIST:-} ]]; then
    echo "with the module versions of $GPUDRA_BUILD_LIST"
    share_build_list "$GPUDRA_BUILD_LIST"
    local got; got=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
    if [[ -n $got && $got != "$ETCD_VERSION" ]]; then
      echo "the build list of $GPUDRA_BUILD_LIST selects etcd $got, not ETCD_VERSION=$ETCD_VERSION: set ETCD_VERSION=$got, or build without GPUDRA_BUILD_LIST"
      return 1
    fi
    CGO_ENABLED=1 go build -ldflags "-s -w" -o "$out/bin/etcd" go.etcd.io/etcd/server/v3
  else
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    go mod tidy -e
    go build -trimpath -ldflags "-s -w" -o "$out/bin/etcd" go.etcd.io/etcd/server/v3
  fi
}

# with_kueue_build_list makes the throw-away module select Kueue's versions of every module
# it shares with Kueue (Kueue compiles against JobSet's and Trainer's APIs, so it pins
# Kubernetes, controller-runtime, JobSet and Trainer): the kwok, Kueue, JobSet and Trainer
# builds, with the same flags, then compile the libraries they share once. Built with their
# own pins (Kubernetes libraries v0.36.1 for kwok, v0.35.0 for JobSet, v0.36.0 for Trainer),
# each compiled them again (2.5-3 min apiece, cold).
with_kueue_build_list() {
  go get "sigs.k8s.io/kueue@$KUEUE_VERSION" "$@"
}

# kwok: kwok, with Kueue's module versions (it pins the Kubernetes libraries at v0.36.1,
# Kueue at v0.36.2), and its stages.
build_kwok() {
  local out=$1
  go mod init gpudra.dev/lab-kwok >/dev/null
  printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/kwok/cmd/kwok"\n' >tools.go
  with_kueue_build_list "sigs.k8s.io/kwok@$KWOK_VERSION"
  go mod tidy
  go build -trimpath -ldflags "-s -w" -o "$out/bin/kwok" sigs.k8s.io/kwok/cmd/kwok
  local src; src=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  mkdir -p "$out/stage"; cp -r "$src/kustomize/stage/." "$out/stage/"; chmod -R u+w "$out/stage"
}

build_kueue() {
  local out=$1
  GOBIN=$out/bin go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  local src; src=$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  mkdir -p "$out/config"; cp -r "$src/config/components/." "$out/config/"; chmod -R u+w "$out/config"
}

# jobset: the JobSet controller (jobset.x-k8s.io) and its config/components manifests (CRD,
# RBAC, webhooks), at the version Kueue compiles against. Its main package is the module's
# root, and `go install` of it asks the proxy for the module's version list, which it does
# not serve: it is built in a module of its own, with Kueue's build list. Not a default
# component: `gpudra lab up` asks for it when the lab file's kueue.jobKinds names jobset.
build_jobset() {
  local out=$1
  go mod init gpudra.dev/lab-jobset >/dev/null
  with_kueue_build_list "sigs.k8s.io/jobset@$JOBSET_VERSION"
  go build -trimpath -ldflags "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION" -o "$out/bin/jobset" sigs.k8s.io/jobset
  local src; src=$(go mod download -json "sigs.k8s.io/jobset@$JOBSET_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  mkdir -p "$out/config"; cp -r "$src/config/components/." "$out/config/"; chmod -R u+w "$out/config"
}

# trainingoperator: the Kubeflow training operator's controllers and webhooks (PyTorchJob,
# TFJob) under the lab's own main (trainingoperator_main.go: a webhook server on 127.0.0.1
# with the lab's certificate), and its manifests/base (CRDs, RBAC, webhooks). The operator
# pins k8s.io v0.31, so it builds in a module of its own. Not a default component: `gpudra
# lab up` asks for it when the lab file's kueue.jobKinds names pytorchjob.
build_trainingoperator() {
  local out=$1
  go mod init gpudra.dev/lab-training-operator >/dev/null
  sed '/^\/\/go:build ignore$/d' "$TRAINING_OPERATOR_MAIN" >main.go
  go get "github.com/kubeflow/training-operator@$TRAINING_OPERATOR_VERSION"
  go mod tidy
  go build -trimpath -ldflags "-s -w" -o "$out/bin/training-operator" .
  local src; src=$(go mod download -json "github.com/kubeflow/training-operator@$TRAINING_OPERATOR_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  mkdir -p "$out/config"; cp -r "$src/manifests/base/." "$out/config/"; chmod -R u+w "$out/config"
}

# trainer: Kubeflow Trainer's controllers and webhooks (TrainJob and its runtimes) under the
# lab's own main (trainer_main.go: a webhook server on 127.0.0.1 with the lab's certificate),
# and its manifests/base (CRDs, RBAC, webhooks, runtimes). Trainer pins k8s.io v0.36, so it
# builds in a module of its own, with Kueue's build list (the version of Trainer Kueue
# compiles against, and JobSet's as above); only the one binary is built. Not a default
# component: `gpudra lab up` asks for it when the lab file's kueue.jobKinds names trainjob.
build_trainer() {
  local out=$1
  go mod init gpudra.dev/lab-trainer >/dev/null
  sed '/^\/\/go:build ignore$/d' "$TRAINER_MAIN" >main.go
  with_kueue_build_list "github.com/kubeflow/trainer/v2@$TRAINER_VERSION" "sigs.k8s.io/jobset@$JOBSET_VERSION"
  go mod tidy
  go build -trimpath -ldflags "-s -w" -o "$out/bin/trainer" .
  local src; src=$(go mod download -json "github.com/kubeflow/trainer/v2@$TRAINER_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  mkdir -p "$out/config"; cp -r "$src/manifests/base/." "$out/config/"; chmod -R u+w "$out/config"
}

# fluid: Fluid's Dataset and DataLoad CRDs (data.fluid.io) from its module, nothing built:
# the lab serves them without Fluid's controllers, for gpudra's data placement. Fluid pins
# k8s.io v0.29, so only its files are taken. Not a default component: `gpudra lab up` asks
# for it when the lab file's crds names fluid.
build_fluid() {
  local out=$1
  go mod init gpudra.dev/lab-fluid >/dev/null
  local src; src=$(go mod download -json "github.com/fluid-cloudnative/fluid@$FLUID_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  mkdir -p "$out/crds"
  for crd in datasets dataloads; do cp "$src/config/crd/bases/data.fluid.io_$crd.yaml" "$out/crds/"; done
  chmod -R u+w "$out/crds"
}

mkdir -p "$TOOLS"
if [[ ${1:-} == --status ]]; then
  for c in k8s etcd kwok kueue node cdihook jobset trainingoperator trainer fluid; do
    d=$(dir_of "$c")
    if [[ -f $d/.complete ]]; then echo "$c: cached ($d)"; else echo "$c: missing"; fi
  done
  exit 0
fi
if [[ ${1:-} == --dir ]]; then dir_of "$2"; exit 0; fi
comps=("$@"); (( ${#comps[@]} )) || comps=(k8s etcd kwok kueue)
for i in "${!comps[@]}"; do
  c=${comps[$i]} nth="$((i + 1))/${#comps[@]}"
  d=$(dir_of "$c")
  if [[ -f $d/.complete ]]; then log "$c ($nth): cached in $d"; continue; fi
  # One builder per component and cache; a second caller waits, then finds it cached.
  exec 9>"$TOOLS/.lock-$c"
  if ! flock -n 9; then log "$c ($nth): another process is building it; waiting"; flock 9; fi
  build_in "$c" "$d" "$nth"
  exec 9>&-
done
