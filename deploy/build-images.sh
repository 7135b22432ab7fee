#!/bin/sh
# Builds policyflow's container images FROM scratch: every image holds one
# static (CGO_ENABLED=0) binary and nothing else, so no base image is pulled.
#
#   deploy/build-images.sh                 # every image that can be built
#   deploy/build-images.sh devbroker consul
#   deploy/build-images.sh stages          # every service of services/ (deploy/stages.sh list)
#   deploy/build-images.sh matcher         # one service
#
# Images are named ${PF_IMAGE_REPO:-policyflow}/<name>:${PF_IMAGE_TAG:-dev}:
#   devbroker  tools/devbroker, the dev Kafka-protocol broker
#   consul     the Consul binary at .cache/bin/consul (built first if missing)
#   policyctl  tools/policyctl, the operator CLI (runs the topology job)
#   <service>  services/<service>, one image per stage (and the North API)
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
repo=${PF_IMAGE_REPO:-policyflow}
tag=${PF_IMAGE_TAG:-dev}
deploy="$root/deploy"

log() { printf 'build-images: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# stages prints the services of services/ (see deploy/stages.sh).
stages() { sh "$deploy/stages.sh" list; }

# gobuild builds the main package in $1 (relative to the repository root)
# into the file $2 as a static linux binary.
gobuild() {
	log "go build ./$1"
	(cd "$root" && CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false \
		-ldflags='-s -w' -o "$2" "./$1")
}

# cacerts copies the build host's CA bundle into the context so that a binary
# that dials TLS with the system roots finds them in the image; the file is
# empty when the host has none.
cacerts() {
	mkdir -p "$1/etc/ssl/certs"
	if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
		cp /etc/ssl/certs/ca-certificates.crt "$1/etc/ssl/certs/ca-certificates.crt"
	else
		log "no /etc/ssl/certs/ca-certificates.crt on this host: images get an empty CA bundle (set PF_TLS_CA for TLS)"
		: >"$1/etc/ssl/certs/ca-certificates.crt"
	fi
}

# dockerbuild builds image $1 from Dockerfile $2 with the context directory
# $3 and any further --build-arg arguments.
dockerbuild() {
	image=$1 dockerfile=$2 ctx=$3
	shift 3
	log "docker build $image"
	docker build --quiet --pull=false -f "$dockerfile" -t "$image" "$@" "$ctx" >/dev/null
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

build_devbroker() {
	[ -f "$root/tools/devbroker/main.go" ] || die "tools/devbroker/main.go is missing: cannot build $repo/devbroker:$tag"
	ctx="$work/devbroker"
	mkdir -p "$ctx/data"
	gobuild tools/devbroker "$ctx/devbroker"
	dockerbuild "$repo/devbroker:$tag" "$deploy/Dockerfile.devbroker" "$ctx"
}

build_consul() {
	bin="$root/.cache/bin/consul"
	if [ ! -x "$bin" ]; then
		log "$bin is missing: building Consul from the Go module proxy (about five minutes)"
		if command -v make >/dev/null 2>&1 && [ -f "$root/Makefile" ]; then
			make -C "$root" consul # reuses a copy cached for other clones
		else
			mkdir -p "$root/.cache/bin"
			(cd "$root/tools/consul" && GOWORK=off CGO_ENABLED=0 GOOS=linux \
				GONOSUMDB=github.com/hashicorp/consul-awsauth GOFLAGS=-mod=mod \
				go build -trimpath -buildvcs=false -o "$bin.tmp" github.com/hashicorp/consul)
			mv "$bin.tmp" "$bin"
		fi
	fi
	if ! file_is_static "$bin"; then
		die "$bin is not a static binary: rebuild it with CGO_ENABLED=0 (see deploy/README.md)"
	fi
	ctx="$work/consul"
	mkdir -p "$ctx/tmp"
	chmod 1777 "$ctx/tmp"
	cp "$bin" "$ctx/consul-bin"
	dockerbuild "$repo/consul:$tag" "$deploy/Dockerfile.consul" "$ctx"
}

# file_is_static reports whether the ELF file $1 asks for no dynamic loader.
file_is_static() {
	if command -v readelf >/dev/null 2>&1; then
		! readelf -l "$1" 2>/dev/null | grep -q 'Requesting program interpreter'
	else
		! grep -q 'ld-linux' "$1"
	fi
}

# build_single builds the one-binary image $1 from the main package in $2.
build_single() {
	name=$1 pkg=$2
	[ -f "$root/$pkg/main.go" ] || die "$pkg/main.go is missing: cannot build $repo/$name:$tag"
	ctx="$work/$name"
	mkdir -p "$ctx/bin" "$ctx/var/lib/policyflow/packages"
	cacerts "$ctx"
	gobuild "$pkg" "$ctx/bin/$name"
	dockerbuild "$repo/$name:$tag" "$deploy/Dockerfile.stage" "$ctx" --build-arg "STAGE=$name"
}

build() {
	case $1 in
	devbroker) build_devbroker ;;
	consul) build_consul ;;
	policyctl) build_single policyctl tools/policyctl ;;
	stages)
		for s in $(stages); do build_single "$s" "services/$s"; done
		;;
	*)
		stages | grep -qx "$1" ||
			die "unknown image $1: want devbroker, consul, policyctl, stages or a service of services/: $(stages | tr '\n' ' ')"
		build_single "$1" "services/$1"
		;;
	esac
}

command -v docker >/dev/null 2>&1 || die "docker is not on PATH"
command -v go >/dev/null 2>&1 || die "go is not on PATH"

if [ $# -eq 0 ]; then
	set -- devbroker consul
	[ -f "$root/tools/policyctl/main.go" ] && set -- "$@" policyctl
	set -- "$@" stages
fi
for target in "$@"; do
	build "$target"
done
log "done"
