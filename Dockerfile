# Locking-Center server image: one static binary on an empty base.
#
#   docker build --build-arg VERSION=1.2.3 -t locking-center .
#
# The builder is pinned to a Go patch release, no older than go.mod's go line,
# so that every build of a given commit compiles with the same toolchain.
# The name is fully qualified, as podman resolves no short names on Debian.
# Where no registry is in reach, deploy/make-go-image.sh makes an image of
# this name from the local Go toolchain, and the build finds it locally;
# GO_IMAGE may also name another image with that Go (at /usr/local/go/bin, a
# shell and mkdir).
ARG GO_IMAGE=docker.io/library/golang:1.26.8
FROM ${GO_IMAGE} AS build
WORKDIR /src

# Modules first: this layer is reused until go.mod, go.sum or client/go.mod
# change (the server module takes the client module from ./client).
COPY go.mod go.sum ./
COPY client/go.mod ./client/
RUN go mod download

COPY . .
ARG VERSION=dev
# CGO off gives a static binary that runs on scratch; -trimpath keeps the
# build machine's paths out of it.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/locking-center . \
 && /out/locking-center version \
 && mkdir -p /out/data

# scratch has no shell, no curl and no users: the binary probes itself
# (HEALTHCHECK below) and runs under a numeric, non-root UID.
FROM scratch
COPY --from=build /out/locking-center /locking-center
# A named volume mounted here starts as a copy of this folder, owner included,
# so the non-root user can write its log there.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532

# Persistence is on in containers: every grant is on disk before it is answered.
ENV DATA_PATH=/data/locks.wal
VOLUME /data

# 22119: TCP lock protocol. 22120: dashboard, JSON API, /metrics, probes.
EXPOSE 22119 22120

HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/locking-center", "healthcheck"]

ENTRYPOINT ["/locking-center"]
