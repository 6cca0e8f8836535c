#!/usr/bin/env bash
# Runs hookkeeper's benchmarks without make: builds bin/hookkeeper, then the bench
# program, and prints the table. Extra arguments go to the bench program, e.g.
#   test/bench/run.sh -suite receiver -phase 20s -concurrency 8
# PostgreSQL comes from TEST_DATABASE_URL, else 127.0.0.1:5432 as user postgres; pgbench
# must be on PATH. The whole run takes about ten minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v pgbench >/dev/null || { echo "pgbench not found: install PostgreSQL's client tools" >&2; exit 1; }
mkdir -p bin
CGO_ENABLED=0 go build -trimpath -o bin/hookkeeper-receiver ./cmd/hookkeeper-receiver
CGO_ENABLED=0 go build -trimpath -o bin/hookkeeper-handwritten ./test/bench/handwritten
go build -o bin/hookkeeper-bench ./test/bench
# The image suite reads bin/hookkeeper-linux-amd64.oci.tar: `make image-test-archive` first.
exec bin/hookkeeper-bench -hookkeeper bin/hookkeeper-receiver -handwritten bin/hookkeeper-handwritten "$@"
