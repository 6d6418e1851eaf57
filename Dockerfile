# syntax=docker/dockerfile:1
# Build: a static binary (no cgo), templ code and static files are already
# generated and embedded.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ratescope .

# Run: distroless, no shell, non-root. `ratescope healthcheck` probes /healthz
# for the compose healthcheck, since there is no curl here.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ratescope /ratescope
USER nonroot:nonroot
ENV RATESCOPE_ADDR=:8080
EXPOSE 8080
# 8081: the Envoy rate limit service, with RATESCOPE_GRPC_ADDR=:8081
EXPOSE 8081
ENTRYPOINT ["/ratescope"]
