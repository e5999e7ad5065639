# syntax=docker/dockerfile:1
# Multi-stage build of a static skywalker binary on a distroless, non-root base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/skywalker ./cmd/skywalker

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/skywalker /skywalker
USER 65532:65532
EXPOSE 9000 7946/tcp 7946/udp
ENTRYPOINT ["/skywalker"]
CMD ["serve"]
