# floodgate's container image: a static binary on distroless, run as a
# non-root user.
#
#   docker build -t floodgate --build-arg VERSION=v0.1.0 .
#   docker run -p 8080:8080 -v $PWD/floodgate.yaml:/etc/floodgate/floodgate.yaml:ro floodgate
#
# The config must listen beyond the container's loopback (listen: 0.0.0.0:8080);
# deploy/kubernetes/ has a complete example.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/floodgate ./cmd/floodgate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/floodgate /usr/local/bin/floodgate
# Also where envoyproxy/ratelimit's image has its binary: run as
# /bin/ratelimit (Kubernetes command: [/bin/ratelimit], or docker compose's
# command: /bin/ratelimit after the entrypoint), floodgate serves with the
# peer's environment (serve --envoy-env). distroless has no ln: a copy.
COPY --from=build /out/floodgate /bin/ratelimit
# 65532: distroless's "nonroot" user.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/floodgate"]
CMD ["serve", "--config", "/etc/floodgate/floodgate.yaml"]
