#!/usr/bin/env bash
# Informer initial-sync benchmark: time and memory per cached object, for 10,000 and 100,000
# pods (or the sizes given as arguments), via streaming list and paged LIST, with the default
# transform (drop managedFields) and without, from an in-memory source and from the embedded API
# server over loopback HTTP. Prints one Markdown table per source.
#
#   hack/bench-informer.sh                             # 10000 and 100000 pods, both sources
#   hack/bench-informer.sh 5000 50000                  # other sizes
#   hack/bench-informer.sh --source=embedded 10000     # one source: memory or embedded
#   hack/bench-informer.sh --paging 10000              # the server's cost of one LIST page,
#                                                      # with and without writes between pages
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo bench -p benches --bench informer -- "$@"
