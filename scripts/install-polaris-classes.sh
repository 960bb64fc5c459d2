#!/usr/bin/env bash
# The classes of Polaris releases, for tests that ask a release's own code about the task
# rows we write (tests/test_polaris_classes.py, tests/support/polaris_classes.py). No Polaris
# server can be assembled from the registry (its server modules are not served), so
# tests/polaris/harness/*.java, our own small harness, drives the release's TaskEntity,
# PolarisObjectMapperUtil.parseTaskState, metastore managers' loadTasks and (where served)
# the handlers' payload records instead.
#
# Per release: ${PP_POLARIS_DIR:-~/.cache/polaris-pipeline/polaris-classes}/VERSION/ with
#   lib/*.jar          polaris-core, its dependencies (see tests/polaris/harness/pom.xml),
#                      the PostgreSQL driver, and where served polaris-runtime-service and
#                      the three jars its TaskExecutorImpl needs beside it (EXECUTOR_JARS)
#   classes/           the compiled harness, and where polaris-runtime-service is served,
#                      tests/polaris/oracle (Polaris's own purge, run by its TaskExecutorImpl
#                      and handlers: the oracle of tests/test_polaris_oracle.py) with the
#                      empty stand-ins tests/polaris/harness/stand-ins/empty-classes lists
#   classpath          the class path, one entry a line
#   java-home          the JDK to run it with (>= 21 where polaris-runtime-service is there:
#                      its classes target Java 21)
#   runtime-service    "served" or "not served"
#   stamp              of this script, the pom, the harness sources and VERSION: a second
#                      run is a no-op
# Built in a staging directory moved into place at the end; Maven's own cache is ~/.m2.
# Maven's output of the last attempt is kept in DIR/VERSION.log.
# Every jar of lib/ must have the SHA-256 tests/polaris/jars.sha256 pins for its file name
# (PP_POLARIS_PINS names another list, for tests): checked when the jars are resolved and
# again on every run that finds the release installed, so a jar changed in ~/.m2 or in the
# cache is refused.
# On failure, for each release that failed: one line
#   install-polaris-classes: Polaris VERSION: STEP failed: WHY
# (STEP: jdk, resolve, verify or compile; verify's WHY names the jar) and the exit status is
# 1 once all releases were tried.
#
# Usage: bash scripts/install-polaris-classes.sh [VERSION...]   (e.g. 1.4.1 1.7.0; none: every
# release tests/polaris/releases lists)
#        bash scripts/install-polaris-classes.sh --verify DIR    (the pin check alone, on the
# jars of DIR: one line naming the first jar refused, exit status 1)
set -euo pipefail
cd "$(dirname "$0")/.."

PINS="${PP_POLARIS_PINS:-tests/polaris/jars.sha256}"

# Why the jars of a directory may not be used, in one line naming the jar; nothing when
# every jar has its pinned SHA-256.
refused_jar() {  # directory
    local jar name pinned actual
    for jar in "$1"/*.jar; do
        [ -e "$jar" ] || continue
        name="$(basename "$jar")"
        pinned="$(awk -v n="$name" '$1 !~ /^#/ && $2 == n {print $1; exit}' "$PINS")"
        if [ -z "$pinned" ]; then
            echo "$name has no pinned SHA-256 in $PINS"
            return
        fi
        actual="$(sha256sum "$jar" | cut -d' ' -f1)"
        if [ "$actual" != "$pinned" ]; then
            echo "$name has SHA-256 $actual, not the $pinned $PINS pins"
            return
        fi
    done
}

if [ "${1:-}" = "--verify" ]; then
    [ $# -eq 2 ] || { echo "usage: $0 --verify DIR" >&2; exit 2; }
    why="$(refused_jar "$2")"
    if [ -n "$why" ]; then
        echo "install-polaris-classes: $why" >&2
        exit 1
    fi
    exit 0
fi

if [ $# -eq 0 ]; then
    set -- $(sed -e 's/#.*//' tests/polaris/releases | awk 'NF {print $1}')
fi
ROOT="${PP_POLARIS_DIR:-$HOME/.cache/polaris-pipeline/polaris-classes}"
HARNESS=tests/polaris/harness
ORACLE=tests/polaris/oracle
EMPTY_STAND_INS="$HARNESS/stand-ins/empty-classes"
# What Polaris's TaskExecutorImpl needs beside polaris-runtime-service (copied without its
# dependencies): CDI's Instance (the type of its error handler) and OpenTelemetry's trace API
# and Context (it traces each attempt). OpenTelemetry 1.44.1: any 1.x has the stable API it calls.
EXECUTOR_JARS="jakarta.enterprise:jakarta.enterprise.cdi-api:4.1.0
io.opentelemetry:opentelemetry-api:1.44.1
io.opentelemetry:opentelemetry-context:1.44.1"
# Plugin 2.8's copy fetches an artifact without reading its pom's parent (which the
# registry does not serve for Polaris's modules; 3.x fails there); 3.8.1 resolves our
# generated pom.
COPY=org.apache.maven.plugins:maven-dependency-plugin:2.8:copy
COPY_DEPENDENCIES=org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies

sources() {
    printf '%s\n' scripts/install-polaris-classes.sh "$HARNESS/pom.xml" "$EMPTY_STAND_INS" \
        $(find "$HARNESS" "$ORACLE" -name '*.java' | LC_ALL=C sort)
}
stamp() {  # version
    { sources | xargs cat; echo "$1"; } | sha256sum | cut -d' ' -f1
}
present() {  # version
    local dest="$ROOT/$1"
    [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$(stamp "$1")" ] \
        && [ -f "$dest/classpath" ]
}
java_major() {  # JDK home -> its feature version, from the JDK's release file
    sed -n 's/^JAVA_VERSION="\([0-9]*\).*/\1/p' "$1/release" 2>/dev/null
}
find_jdk() {  # minimum feature version -> a JDK home with javac
    local candidate major
    for candidate in "${PP_POLARIS_JAVA_HOME:-}" "${JAVA_HOME:-}" \
        "$(dirname "$(dirname "$(readlink -f "$(command -v javac || echo /nonexistent)")")")" \
        /usr/lib/jvm/*; do
        [ -n "$candidate" ] && [ -x "$candidate/bin/javac" ] || continue
        major="$(java_major "$candidate")"
        if [ -n "$major" ] && [ "$major" -ge "$1" ]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

install_one() {  # version; prints the failure line and returns 1 on failure
    local version="$1" dest="$ROOT/$1" log="$ROOT/$1.log" stage
    fail() {  # step, reason
        echo "install-polaris-classes: Polaris $version: $1 failed: $2 (log: $log)" >&2
        return 1
    }
    # Why Maven failed, in one line: the artifact it could not find, else its first
    # [ERROR] line that says something (addresses left out).
    maven_reason() {
        local missing
        missing="$(grep -oE 'Could not find artifact [^ ]+|[^ ]+ was not found in' "$log" \
            | head -1 | sed -e 's/^Could not find artifact //' -e 's/ was not found in$//')"
        if [ -n "$missing" ]; then
            echo "$missing is not served by the Maven repository"
            return
        fi
        grep -E '^\[ERROR\] ' "$log" | sed -e 's/^\(\[ERROR\] *\)*//' -e 's/ -> \[Help.*//' \
            -e 's#https\?://[^ )]*#the repository#g' \
            | grep -vE '^$|^@|^Re-run Maven|^To see the full|^For more information|^\[Help|^Some problems were' \
            | head -1 | cut -c1-300
    }
    mvn_logged() {
        echo "+ mvn $*" >>"$log"
        mvn -B -ntp "$@" >>"$log" 2>&1
    }
    get_jar() {  # artifactId, output directory: the jar and its pom, nothing else
        mvn_logged -U "$COPY" "-Dartifact=org.apache.polaris:$1:$version:jar" \
            "-DoutputDirectory=$2" \
            && mvn_logged "$COPY" "-Dartifact=org.apache.polaris:$1:$version:pom" \
                "-DoutputDirectory=$2"
    }

    local why
    if present "$version"; then
        why="$(refused_jar "$dest/lib")"
        [ -z "$why" ] || { fail verify "$why"; return 1; }
        echo "polaris classes $version present: $dest" >&2
        return 0
    fi
    mkdir -p "$ROOT"
    # One installer per release at a time (parallel test workers); the second finds it done.
    exec 9>"$ROOT/$version.lock"
    flock 9
    if present "$version"; then
        echo "polaris classes $version present: $dest" >&2
        return 0
    fi
    : >"$log"
    stage="$(mktemp -d "$dest.stage.XXXXXX")"
    STAGES+=("$stage")
    mkdir -p "$stage/lib" "$stage/classes" "$stage/build" "$stage/poms"

    # resolve: polaris-core alone, then what its pom declares, then the service jar.
    get_jar polaris-core "$stage/poms" || { fail resolve "$(maven_reason)"; return 1; }
    mv "$stage/poms/polaris-core-$version.jar" "$stage/lib/"
    python3 - "$stage/poms/polaris-core-$version.pom" "$HARNESS/pom.xml" \
        >"$stage/build/pom.xml" <<'PY' || { fail resolve "cannot read polaris-core's pom"; return 1; }
import sys
import xml.etree.ElementTree as ET

NS = "http://maven.apache.org/POM/4.0.0"
ET.register_namespace("", NS)
ns = {"m": NS}
# Left out, with the reasons in tests/polaris/harness/pom.xml.
LEFT_OUT_GROUPS = {"org.apache.polaris", "software.amazon.awssdk", "com.azure", "com.google.cloud"}
LEFT_OUT = {("org.apache.iceberg", a) for a in ("iceberg-aws", "iceberg-azure", "iceberg-gcp")}
# Served at other patch levels of the same Jackson minor only: (group, artifact, the
# version Polaris's BOM gives) -> the one taken instead (Jackson modules of one minor mix).
NOT_SERVED = {("tools.jackson.dataformat", "jackson-dataformat-smile", "3.2.0"): "3.2.2"}


def text(elements):
    xmlns = f' xmlns="{NS}"'  # ElementTree names the namespace on each fragment
    return "\n".join(ET.tostring(e, encoding="unicode").replace(xmlns, "") for e in elements)


core, template = sys.argv[1], sys.argv[2]
root = ET.parse(core).getroot()
managed = root.findall("m:dependencyManagement/m:dependencies/m:dependency", ns)
boms = {
    d.findtext("m:groupId", "", ns): d.findtext("m:version", "", ns)
    for d in managed
    if d.findtext("m:artifactId", "", ns) == "jackson-bom"
}
kept = []
for dep in root.findall("m:dependencies/m:dependency", ns):
    key = (dep.findtext("m:groupId", "", ns), dep.findtext("m:artifactId", "", ns))
    scope = dep.findtext("m:scope", "compile", ns)
    if key[0] in LEFT_OUT_GROUPS or key in LEFT_OUT or scope not in ("compile", "runtime"):
        continue
    given = dep.findtext("m:version", None, ns) or boms.get(key[0].split(".dataformat")[0], "")
    instead = NOT_SERVED.get((*key, given))
    if instead is not None:
        version = dep.find("m:version", ns)
        if version is None:
            version = ET.SubElement(dep, f"{{{NS}}}version")
        version.text = instead
    kept.append(dep)
out = open(template).read()
out = out.replace("<!-- @POLARIS_CORE_DEPENDENCY_MANAGEMENT@ -->", text(managed))
out = out.replace("<!-- @POLARIS_CORE_DEPENDENCIES@ -->", text(kept))
sys.stdout.write(out)
PY
    mvn_logged -U -f "$stage/build/pom.xml" "$COPY_DEPENDENCIES" -DincludeScope=runtime \
        "-DoutputDirectory=$stage/lib" || { fail resolve "$(maven_reason)"; return 1; }
    local runtime_service="not served" min_java=17 jdk
    : >>"$log"
    if get_jar polaris-runtime-service "$stage/poms"; then
        mv "$stage/poms/polaris-runtime-service-$version.jar" "$stage/lib/"
        runtime_service="served"
        min_java=21
        local artifact
        for artifact in $EXECUTOR_JARS; do
            mvn_logged "$COPY" "-Dartifact=$artifact:jar" "-DoutputDirectory=$stage/lib" \
                || { fail resolve "$(maven_reason)"; return 1; }
        done
    elif ! grep -qE "Could not find artifact org.apache.polaris:polaris-runtime-service:jar:$version|polaris-runtime-service:jar:$version was not found" "$log"; then
        fail resolve "polaris-runtime-service: $(maven_reason)"
        return 1
    fi

    why="$(refused_jar "$stage/lib")"
    [ -z "$why" ] || { fail verify "$why"; return 1; }

    # compile: the common harness and the source directory of the release's API generation.
    jdk="$(find_jdk "$min_java")" || { fail jdk "no JDK >= $min_java found (set PP_POLARIS_JAVA_HOME)"; return 1; }
    local api
    case "$version" in
        1.0.* | 1.1.* | 1.2.* | 1.3.*) api=api-1.0 ;;
        *) api=api-1.4 ;;
    esac
    echo "+ javac ($jdk, $api)" >>"$log"
    # stand-ins/: classes of modules the registry does not serve (see each file, and the
    # empty ones' list, written out here where the oracle is built).
    local oracle=() class
    if [ "$runtime_service" = "served" ]; then
        oracle=("$ORACLE"/*.java)
        while read -r class _; do
            mkdir -p "$stage/build/stand-ins/${class%.*}"
            echo "package ${class%.*}; public class ${class##*.} {}" \
                >"$stage/build/stand-ins/${class%.*}/${class##*.}.java"
            oracle+=("$stage/build/stand-ins/${class%.*}/${class##*.}.java")
        done < <(sed -e 's/#.*//' "$EMPTY_STAND_INS" | awk 'NF')
    fi
    "$jdk/bin/javac" -nowarn --release 17 -d "$stage/classes" -cp "$stage/lib/*" \
        "$HARNESS"/*.java "$HARNESS/$api"/*.java "$HARNESS"/stand-ins/*.java "${oracle[@]}" \
        >>"$log" 2>&1 \
        || { fail compile "$(grep -m1 -E 'error:' "$log" | cut -c1-300)"; return 1; }

    rm -rf "$stage/build" "$stage/poms"
    { echo "$dest/classes"; (cd "$stage/lib" && ls -1 ./*.jar | sed "s#^\./#$dest/lib/#"); } \
        >"$stage/classpath"
    echo "$jdk" >"$stage/java-home"
    echo "$runtime_service" >"$stage/runtime-service"
    stamp "$version" >"$stage/stamp"
    rm -rf "$dest"
    mv "$stage" "$dest"
    echo "polaris classes $version installed: $dest (polaris-runtime-service $runtime_service, JDK $jdk)" >&2
}

# A failed or interrupted release leaves no staging directory behind.
STAGES=()
trap 'rm -rf "${STAGES[@]}"' EXIT
status=0
for version in "$@"; do
    install_one "$version" || status=1
done
exit $status
