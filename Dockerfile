# The worker and the starter (CLI and HTTP API) in one image, for
# docker-compose.dev.yml and production: `worker` or `starter serve` is the
# container's command. Build with: docker build -t entityflow:dev .
# Both programs are pure Go (the SQLite driver is modernc.org/sqlite), so
# they are built without cgo and run on a minimal image as a non-root user.

FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
# Modules first, so that a change of the code reuses the downloaded modules.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/ ./worker ./starter

FROM alpine:3.22 AS runtime
# ca-certificates: TLS to Temporal Cloud, NATS and OIDC issuers; wget (busybox)
# serves the compose file's healthchecks.
RUN apk add --no-cache ca-certificates tzdata \
    && addgroup -S -g 10001 entityflow \
    && adduser -S -D -H -u 10001 -G entityflow entityflow \
    && mkdir -p /app/data && chown entityflow:entityflow /app/data
COPY --from=build /out/worker /out/starter /usr/local/bin/
WORKDIR /app
USER 10001:10001
# The HTTP API (starter serve) and the worker's metrics.
EXPOSE 8080 9090
CMD ["worker"]
