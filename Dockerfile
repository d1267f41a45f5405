# floodgate's container image: a static binary on distroless, run as a
# non-root user.
#
#   docker build -t floodgate --build-arg VERSION=v0.1.0 .
#   docker run -p 8080:8080 -v $PWD/floodgate.yaml:/etc/floodgate/floodgate.yaml:ro floodgate
#
# The config must listen beyond the container's loopback (listen: 0.0.0.0:8080);
# deploy/kubernetes/ has a complete example.

# Base images, by exact tag: golang's patch release, and distroless's
# Debian 12 static image (distroless publishes no version tags). A tag can
# be moved; for a build that is the same every time, pin each by digest,
# without editing this file:
#
#   docker buildx imagetools inspect golang:1.26.8-bookworm --format '{{.Manifest.Digest}}'
#   docker buildx imagetools inspect gcr.io/distroless/static-debian12:nonroot --format '{{.Manifest.Digest}}'
#   docker build \
#     --build-arg GO_IMAGE=golang:1.26.8-bookworm@sha256:DIGEST \
#     --build-arg RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot@sha256:DIGEST .
#
# (the digest of the multi-platform index, which each platform resolves).
# Refresh them with the same commands when Go or Debian ship a fix.
ARG GO_IMAGE=golang:1.26.8-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/floodgate ./cmd/floodgate

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/floodgate /usr/local/bin/floodgate
# Also where envoyproxy/ratelimit's image has its binary: run as
# /bin/ratelimit (Kubernetes command: [/bin/ratelimit], or docker compose's
# command: /bin/ratelimit after the entrypoint), floodgate serves with the
# peer's environment (serve --envoy-env). distroless has no ln: a copy.
COPY --from=build /out/floodgate /bin/ratelimit
# 65532: distroless's "nonroot" user.
USER 65532:65532
EXPOSE 8080 8081 9090
# Docker's health check: floodgate health asks the probe of the config the
# CMD serves, /readyz on its metrics_listen (or its listen), with no shell
# or curl, which distroless lacks; exit 1 and a line saying why when it
# fails. Run serve with another config and pass the same to health
# (docker run --health-cmd); Kubernetes ignores this and probes itself.
HEALTHCHECK --interval=30s --timeout=10s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/floodgate", "health", "--config", "/etc/floodgate/floodgate.yaml", "--timeout", "5s"]
ENTRYPOINT ["/usr/local/bin/floodgate"]
CMD ["serve", "--config", "/etc/floodgate/floodgate.yaml"]
