# Build: a static binary (no cgo); templ code and static files are already
# generated and embedded. VERSION and COMMIT stamp `ratescope --version` and
# the ratescope_build_info metric, e.g.
#   docker build --build-arg VERSION=$(git describe --tags --always) --build-arg COMMIT=$(git rev-parse HEAD) .
# Left empty, the binary reports "devel" (the build context has no .git).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=
ARG COMMIT=
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
    -ldflags="-s -w -X github.com/ratescope/ratescope/internal/buildinfo.version=${VERSION} -X github.com/ratescope/ratescope/internal/buildinfo.commit=${COMMIT}" \
    -o /out/ratescope .

# Run: distroless, no shell, non-root (uid 65532). `ratescope healthcheck`
# probes /healthz for the compose healthcheck, since there is no curl here.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ratescope /ratescope
USER nonroot:nonroot
ENV RATESCOPE_ADDR=:8080
EXPOSE 8080
# 8081: the Envoy rate limit service, with RATESCOPE_GRPC_ADDR=:8081
EXPOSE 8081
ENTRYPOINT ["/ratescope"]
