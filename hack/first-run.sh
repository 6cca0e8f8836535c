#!/usr/bin/env bash
# hack/first-run.sh [--test] [--keep]: what a newcomer's first `make dev` costs.
#
# Clones this repository (its committed HEAD) into a temporary directory and runs
# `make dev` there with an empty Go module cache and build cache, as on a fresh machine:
# it times the first output, the first demo table and each step hack/step.sh reports,
# stops the cluster, then runs `make dev` again (warm) and times it to the demo table.
# With --test it also times a first `make test` in the same clone (its caches warm from
# `make dev`, as a newcomer's would be). Prints one table; the full logs stay in the
# temporary directory with --keep.
#
# Needs what `make dev` needs: Go, git, the Go module proxy, and PostgreSQL's initdb
# and pg_ctl (or DATABASE_URL). docs/local-cluster.md quotes its figures.
set -euo pipefail

run_test=false
keep=false
for arg in "$@"; do
  case $arg in
    --test) run_test=true ;;
    --keep) keep=true ;;
    *) echo "usage: hack/first-run.sh [--test] [--keep]" >&2; exit 2 ;;
  esac
done

repo=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
work=$(mktemp -d /tmp/hookkeeper-first-run.XXXXXX)
cleanup() {
  if $keep; then echo "logs kept in $work"; else chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"; fi
}
trap cleanup EXIT

export GOMODCACHE=$work/gomodcache GOCACHE=$work/gocache GOFLAGS=-modcacherw
echo "first run of $(git -C "$repo" rev-parse --short HEAD) in $work (empty GOMODCACHE and GOCACHE; $(nproc) cores)"
git clone -q "$repo" "$work/hookkeeper"

# timed TARGET NAME STOP: run make TARGET in the clone, prefixing each line with the
# seconds since start into $work/NAME.log. With STOP=cluster-demo it stops make (SIGINT,
# as Ctrl-C) once the local cluster's demo table is printed: the table header after
# hookkeeper dev's "ready" line (the demo without a cluster, shown first on a cold run,
# prints the same header before any "ready"). Prints the seconds to the first output,
# to the first demo table (either kind; - if none) and to the end or the stop.
timed() {
  local target=$1 name=$2 stop=$3 log=$work/$2.log
  local start=$SECONDS first="" demo="-" ready=false line pid t out
  : > "$log"
  coproc MAKE { cd "$work/hookkeeper" && exec setsid make "$target" 2>&1; }
  pid=$MAKE_PID
  # A copy of the coprocess's output: bash unsets MAKE when make exits, before its last
  # lines are read (a `make test` that runs to its end).
  exec {out}<&"${MAKE[0]}"
  while IFS= read -r line <&"$out"; do
    t=$((SECONDS - start))
    [[ -z $first ]] && first=$t
    printf '%5ds %s\n' "$t" "$line" >> "$log"
    [[ $line == ready ]] && ready=true
    if [[ $line == *"ORDER STATE"* ]]; then # a demo table's header: tabwriter prints the whole table at once
      [[ $demo == - ]] && demo=$t
      if [[ $stop == cluster-demo ]] && $ready; then
        kill -INT -- "-$pid" 2>/dev/null || true
        break
      fi
    fi
  done
  exec {out}<&-
  t=$((SECONDS - start))
  wait "$pid" 2>/dev/null || true
  echo "$first $demo $t"
}

read -r dev_first dev_demo dev_cluster < <(timed dev dev-cold cluster-demo)
read -r _ _ warm_cluster < <(timed dev dev-warm cluster-demo)
if $run_test; then
  read -r _ _ test_total < <(timed test test-first "")
fi

echo
printf '%-58s %s\n' "phase" "seconds"
printf '%-58s %s\n' "make dev, cold: first output" "$dev_first"
# Each hack/step.sh step of the cold run: "    <what>: done in 1m05s" / "cached (0s)".
grep -E "^ *[0-9]+s     [a-z-]+: (done in|cached)" "$work/dev-cold.log" | sed -E 's/^ *([0-9]+)s +(.*)$/  \2 (finished at \1 s)/' || true
grep -E '^ *[0-9]+s (postgresql|environment up|operator started|applied samples|ready$)' "$work/dev-cold.log" | sed -E 's/^ *([0-9]+)s (.*)$/  \2 (at \1 s)/' || true
printf '%-58s %s\n' "make dev, cold: first demo table (without a cluster)" "$dev_demo"
printf '%-58s %s\n' "make dev, cold: the local cluster's demo table" "$dev_cluster"
printf '%-58s %s\n' "make dev, warm (second run): the local cluster's demo table" "$warm_cluster"
if $run_test; then
  printf '%-58s %s\n' "make test, first run after make dev" "$test_total"
fi
# The longest silence: the largest gap between two lines of output.
names=(dev-cold dev-warm)
$run_test && names+=(test-first)
for name in "${names[@]}"; do
  [[ -f $work/$name.log ]] || continue
  awk -v n="$name" '{t=$1+0; if (NR>1 && t-p>m) m=t-p; p=t} END {printf "%-58s %d\n", n ": longest silence", m}' "$work/$name.log"
done
