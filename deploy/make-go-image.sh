#!/usr/bin/env bash
# Makes the Dockerfile's builder image from this machine's Go, for a machine
# that cannot pull images: GOROOT (`go env GOROOT`) at /usr/local/go as in
# the official golang image, the CA certificates of /etc/ssl/certs (so that
# the build's `go mod download` can verify the module proxy), /bin/sh and
# /bin/mkdir with the libraries they load (the Dockerfile's RUN lines need
# them). It is tagged with the Dockerfile's own GO_IMAGE default, so that
# `docker compose up --build`, `podman-compose up --build` and `docker build`
# find it locally and pull nothing.
#
#   deploy/make-go-image.sh            # podman if installed, else docker
#   ENGINE=docker deploy/make-go-image.sh
#
# The local Go must be the version the tag names (go.mod's go line), so that
# the image is what its name says. Module settings you changed with `go env
# -w` or in the environment (GOPROXY, GOSUMDB, GOPRIVATE, GONOSUMDB,
# GONOPROXY, GOINSECURE, GOFLAGS) are baked into the image, so the build
# fetches modules the way this machine does. Prints the image name.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

engine=${ENGINE:-}
if [ -z "$engine" ]; then
	if command -v podman >/dev/null 2>&1; then engine=podman; else engine=docker; fi
fi
command -v "$engine" >/dev/null 2>&1 || { echo "make-go-image: $engine not found (set ENGINE=docker or podman)" >&2; exit 1; }

image=$(sed -n 's/^ARG GO_IMAGE=//p' "$root/Dockerfile")
[ -n "$image" ] || { echo "make-go-image: no 'ARG GO_IMAGE=' default in $root/Dockerfile" >&2; exit 1; }
want=${image##*:}
have=$(go env GOVERSION)
if [ "$have" != "go$want" ]; then
	echo "make-go-image: the Dockerfile builds with $image, but this machine's go is $have; install go$want (or GOTOOLCHAIN=go$want go env GOROOT shows where the go command keeps it)" >&2
	exit 1
fi
goroot=$(go env GOROOT)

certs=
for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do
	if [ -s "$f" ]; then certs=$f; break; fi
done
[ -n "$certs" ] || { echo "make-go-image: no CA certificate bundle in /etc/ssl/certs (Debian: apt-get install ca-certificates)" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/usr/local" "$stage/bin" "$stage/etc/ssl/certs" "$stage/go" "$stage/root"
install -d -m 1777 "$stage/tmp"
cp -a "$goroot" "$stage/usr/local/go"
cp -L "$certs" "$stage/etc/ssl/certs/ca-certificates.crt"
for tool in sh mkdir; do
	bin=$(command -v "$tool")
	cp -L "$bin" "$stage/bin/$tool" # /bin/sh is a symlink to dash on Debian
	for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
		mkdir -p "$stage$(dirname "$lib")"
		cp -L "$lib" "$stage$lib"
	done
done

# As in the official image: Go on PATH, GOPATH=/go, and no toolchain switch.
changes=(--change "ENV PATH=/go/bin:/usr/local/go/bin:/bin" --change "ENV GOPATH=/go"
	--change "ENV HOME=/root" --change "ENV GOTOOLCHAIN=local")
while IFS= read -r line; do
	key=${line%%=*} value=${line#*=}
	value=${value#\'} value=${value%\'}
	case $key in
	GOPROXY | GOSUMDB | GOPRIVATE | GONOSUMDB | GONOPROXY | GOINSECURE | GOFLAGS) changes+=(--change "ENV $key=$value") ;;
	esac
done < <(go env -changed 2>/dev/null)

tar -C "$stage" -c . | "$engine" import "${changes[@]}" - "$image" >/dev/null
echo "$image"
