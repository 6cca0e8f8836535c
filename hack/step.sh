#!/usr/bin/env bash
# hack/step.sh STEP -- COMMAND...: run one build or test step with progress a person can
# trust. It says what the step does and how long it took the first time on the project's
# 2-core development machine (hack/step-times.tsv, measured by hack/first-run.sh), prints
# the elapsed time every 20 seconds while the command is quiet, and ends with the
# step's time, or "cached" when it took under three seconds.
set -uo pipefail

step=$1
shift
[[ ${1:-} == -- ]] && shift

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
what=$step
first=""
while IFS=$'\t' read -r name seconds description; do
  [[ $name == "$step" ]] || continue
  what=$description
  [[ $seconds == - ]] || first=$seconds
done < <(grep -v '^#' "$here/step-times.tsv")

human() { # seconds -> "1m05s" / "42s"
  local s=$1
  if ((s >= 60)); then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi
}

hint=""
[[ -n $first ]] && hint=" (first time about $(human "$first") on 2 cores; then cached)"
echo "==> $what$hint"

start=$SECONDS
(
  while sleep 20; do
    echo "    ... $step: $(human $((SECONDS - start)))${first:+ (first time about $(human "$first"))}"
  done
) &
heartbeat=$!
trap 'kill $heartbeat 2>/dev/null' EXIT

"$@"
rc=$?
kill $heartbeat 2>/dev/null
wait $heartbeat 2>/dev/null
took=$((SECONDS - start))
if ((rc != 0)); then
  echo "    $step failed after $(human $took) (exit $rc)"
elif ((took < 3)); then
  echo "    $step: cached ($(human $took))"
else
  echo "    $step: done in $(human $took)"
fi
exit $rc
