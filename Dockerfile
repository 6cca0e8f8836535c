# The same image as `make image` (hack/image, no Docker needed), for machines with a
# Docker engine: `make docker-build`. Two static binaries, /hookkeeper (the entrypoint:
# every subcommand) and /hookkeeper-receiver (the data plane alone: receiver, migrate,
# version; what receiver and migration pods run), on an empty base with what they
# need: the CA bundle, the nonroot user (65532) and nsswitch.conf from
# hack/image/rootfs, /tmp, and the directories envtest's init looks for (see
# hack/image/build.go). Keep the two in step.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
ARG VERSION=dev
ARG REVISION=
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags="-s -w -X github.com/hookkeeper/hookkeeper/internal/version.Version=${VERSION} -X github.com/hookkeeper/hookkeeper/internal/version.Revision=${REVISION}" \
      -o /out/hookkeeper ./cmd/hookkeeper \
 && CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags="-s -w -X github.com/hookkeeper/hookkeeper/internal/version.Version=${VERSION} -X github.com/hookkeeper/hookkeeper/internal/version.Revision=${REVISION}" \
      -o /out/hookkeeper-receiver ./cmd/hookkeeper-receiver
RUN mkdir -p /rootfs/etc/ssl/certs /rootfs/home/nonroot/.cache/kubebuilder-envtest \
      /rootfs/tmp/kubebuilder-envtest \
 && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ \
 && chmod 1777 /rootfs/tmp && chmod 700 /rootfs/home/nonroot /rootfs/home/nonroot/.cache \
 && chmod 750 /rootfs/home/nonroot/.cache/kubebuilder-envtest /rootfs/tmp/kubebuilder-envtest \
 && chown -R 65532:65532 /rootfs/home/nonroot /rootfs/tmp/kubebuilder-envtest
COPY hack/image/rootfs/etc/ /rootfs/etc/

FROM scratch
ARG VERSION=dev
ARG REVISION=
ARG CREATED=1970-01-01T00:00:00Z
ARG SOURCE=https://github.com/hookkeeper/hookkeeper
LABEL org.opencontainers.image.title="hookkeeper" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY --from=build /rootfs/ /
COPY --from=build /out/hookkeeper /out/hookkeeper-receiver /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
WORKDIR /
USER 65532:65532
ENTRYPOINT ["/hookkeeper"]
