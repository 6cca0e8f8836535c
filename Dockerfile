# One image for every hookkeeper subcommand (manager, receiver, migrate, replay).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/hookkeeper ./cmd/hookkeeper

# distroless static: no shell, no package manager; runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/hookkeeper /hookkeeper
USER 65532:65532
ENTRYPOINT ["/hookkeeper"]
