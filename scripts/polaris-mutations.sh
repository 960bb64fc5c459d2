#!/usr/bin/env bash
# Shows that the Polaris class matrix (tests/test_polaris_classes.py) and the oracle
# (tests/test_polaris_oracle.py, tests/test_polaris_oracle_faults.py) can fail: each mutation below is applied to a scratch copy
# of this tree (the tracked and untracked files, not .venv), and the module runs there for
# the cases where the mutation shows (a release, a table shape); a mutation is caught when
# at least one test fails or errors. One line per mutation:
#   polaris-mutations: NAME (SELECTION): caught by TEST[, TEST...]
#   polaris-mutations: NAME (SELECTION): NOT CAUGHT
# Exit status 1 when any is not caught, or when one no longer applies (its text is gone).
# Needs what `make test-polaris` needs (the Polaris classes installed, PostgreSQL).
# Usage: bash scripts/polaris-mutations.sh [NAME...]   (none: every mutation)
set -euo pipefail
cd "$(dirname "$0")/.."
# One compound command: bash parses it whole before running it, so an edit of this file
# during a run changes nothing of that run.
{
REPO="$PWD"
PYTEST="$REPO/.venv/bin/pytest"

# name | test module | pytest -k selection | file | Python literal of the text replaced |
# Python literal of its replacement
MUTATIONS=$(cat <<'EOF'
db-clock-seconds|tests/test_polaris_classes.py|polaris-1.4.1|polaris_pipeline/metastore/connection.py|'clock_timestamp()) * 1000 AS BIGINT'|'clock_timestamp()) AS BIGINT'
db-clock-hour-ahead|tests/test_polaris_classes.py|polaris-1.4.1|polaris_pipeline/metastore/connection.py|'EXTRACT(EPOCH FROM clock_timestamp())'|"EXTRACT(EPOCH FROM clock_timestamp() + interval '1 hour')"
child-start-seconds|tests/test_polaris_classes.py|polaris-1.4.1|polaris_pipeline/metastore/transitions.py|'    out[Prop.CREATED_BY] = CREATOR\n'|'    out[Prop.CREATED_BY] = CREATOR\n    out[Prop.START_TIME] = str(now_ms // 1000)\n'
batch-type-from-1.0|tests/test_polaris_classes.py|polaris-1.0.0-incubating|polaris_pipeline/tasks/release.py|'BATCH_TYPE_SINCE = PolarisRelease(1, 7)'|'BATCH_TYPE_SINCE = PolarisRelease(1, 0)'
batch-type-from-1.0|tests/test_polaris_classes.py|polaris-1.6.0|polaris_pipeline/tasks/release.py|'BATCH_TYPE_SINCE = PolarisRelease(1, 7)'|'BATCH_TYPE_SINCE = PolarisRelease(1, 0)'
batch-type-never|tests/test_polaris_classes.py|polaris-1.7.0|polaris_pipeline/tasks/release.py|'BATCH_TYPE_SINCE = PolarisRelease(1, 7)'|'BATCH_TYPE_SINCE = PolarisRelease(1, 8)'
manifest-not-avro|tests/test_polaris_classes.py|polaris-1.4.1|polaris_pipeline/tasks/payloads.py|'base64.b64encode(encode_manifest_file(p.manifest))'|'base64.b64encode(encode_manifest_file(p.manifest)[:2] + b"not avro")'
manifest-not-avro|tests/test_polaris_classes.py|polaris-1.7.0|polaris_pipeline/tasks/payloads.py|'base64.b64encode(encode_manifest_file(p.manifest))'|'base64.b64encode(encode_manifest_file(p.manifest)[:2] + b"not avro")'
location-trailing-slash-counts|tests/test_polaris_classes.py|polaris-1.4.1|polaris_pipeline/storage/uri.py|'        path = path.rstrip("/")\n'|'        pass\n'
partition-statistics-not-planned|tests/test_polaris_oracle.py|v2-deletes-stats|polaris_pipeline/cleanup/table.py|'+ [s.statistics_path for s in metadata.partition_statistics]'|'+ []'
imitation-in-the-old-order|tests/test_polaris_oracle.py|v2-deletes-stats|builders/polaris_writer.py|'        *(e.metadata_file for e in metadata.metadata_log),\n        *manifest_lists,\n'|'        *manifest_lists,\n        *(e.metadata_file for e in metadata.metadata_log),\n'
view-metadata-kept|tests/test_polaris_oracle.py|dropped_view|polaris_pipeline/cleanup/view.py|'    return delete_one(ctx, result, guard, metadata_uri, present)'|'    return result'
manifest-kept-after-polaris-failed|tests/test_polaris_oracle_faults.py|our_daemon_finishes|polaris_pipeline/cleanup/manifest.py|'    return delete_one(ctx, result, guard, ref.manifest_path, present)'|'    return result'
worker-executor-no-existence-check|tests/test_polaris_oracle_faults.py|workers_polaris_executor|tests/reliability/polaris_executor.py|'        if not exists(uri):'|'        if False:'
worker-executor-one-try|tests/test_polaris_oracle_faults.py|workers_polaris_executor|tests/reliability/polaris_executor.py|'DELETE_ATTEMPTS = 3'|'DELETE_ATTEMPTS = 1'
EOF
)

status=0
while IFS='|' read -r name module selection file old new; do
    if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qxF "$name"; then
        continue
    fi
    scratch="$(mktemp -d /tmp/pp-mutation.XXXXXX)"
    git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$scratch"
    if ! python3 - "$scratch/$file" "$old" "$new" <<'PY'
import ast, sys
path, old, new = sys.argv[1], ast.literal_eval(sys.argv[2]), ast.literal_eval(sys.argv[3])
text = open(path).read()
if text.count(old) != 1:
    sys.exit(1)
open(path, "w").write(text.replace(old, new))
PY
    then
        echo "polaris-mutations: $name: no longer applies (its text is not once in $file)"
        status=1
        rm -rf "$scratch"
        continue
    fi
    # The scratch copy's package comes first (the venv's editable install points here).
    log="$scratch/pytest.log"
    (cd "$scratch" && PYTHONPATH="$scratch" PYTHONDONTWRITEBYTECODE=1 "$PYTEST" -p no:cacheprovider \
        -q -rfE "$module" -k "$selection" >"$log" 2>&1) || true
    caught="$(grep -E '^(FAILED|ERROR) ' "$log" | sed -E 's/^(FAILED|ERROR) [^:]*::([^ ]*).*/\2/' \
        | sort -u | paste -sd, | sed 's/,/, /g')"
    if [ -n "$caught" ]; then
        echo "polaris-mutations: $name ($selection): caught by $caught"
        rm -rf "$scratch"
    else
        echo "polaris-mutations: $name ($selection): NOT CAUGHT (log: $log)"
        status=1
    fi
done <<<"$MUTATIONS"
exit $status
}
