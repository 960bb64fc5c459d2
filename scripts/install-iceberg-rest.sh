#!/usr/bin/env bash
# Iceberg's own REST catalog server (org.apache.iceberg.rest.RESTCatalogServer, the
# test-fixtures of iceberg-open-api 1.10.0) and what it runs on, from Maven Central, each
# jar pinned by its SHA-256: the server `tasks restore` registers a dropped table with in
# tests/test_restore_rest.py. Cached in $PP_ICEBERG_REST_DIR (default
# ~/.cache/polaris-pipeline/iceberg-rest/lib); a jar already there with its hash is kept.
# Usage: bash scripts/install-iceberg-rest.sh
set -euo pipefail

DIR="${PP_ICEBERG_REST_DIR:-$HOME/.cache/polaris-pipeline/iceberg-rest}/lib"
MAVEN="${PP_MAVEN_URL:-https://repo1.maven.org/maven2}"
mkdir -p "$DIR"

# path under the repository, then its SHA-256
JARS=(
    "org/apache/iceberg/iceberg-open-api/1.10.0/iceberg-open-api-1.10.0-test-fixtures.jar ec4dce1663933e3520227da8238a980d52b7eccac532c1953f337dc1e6ee597b"
    "org/apache/iceberg/iceberg-core/1.10.0/iceberg-core-1.10.0.jar 54091489dbdcb31b5a4514372abfc908a7b0be69f76e785f1e82279be4fbd6cc"
    "org/apache/iceberg/iceberg-core/1.10.0/iceberg-core-1.10.0-tests.jar caa79473e760a6ea0740888832d85868359142640d34f472cd565763bb9b90c7"
    "org/apache/iceberg/iceberg-api/1.10.0/iceberg-api-1.10.0.jar 627061d401dba9d1a8cada2da6394640c2e803102bb676fb34e5f65503cf2c51"
    "org/apache/iceberg/iceberg-api/1.10.0/iceberg-api-1.10.0-tests.jar 5a404170b37b2200782c3b9f1e12b19982888e4dd8ae844b6a82289ce964f76e"
    "org/apache/iceberg/iceberg-common/1.10.0/iceberg-common-1.10.0.jar 5ce6ec8262b4c6f8151d9e36ebe013bd23ec0f310508173f72c43bc073d5f519"
    "org/apache/iceberg/iceberg-bundled-guava/1.10.0/iceberg-bundled-guava-1.10.0.jar 05b79072e19071b1bcf7a4e382d624b3b2ccad6eaf79627676219bb48e4e834d"
    "org/apache/avro/avro/1.12.0/avro-1.12.0.jar 1f5fbfff9b7427d6832cc3031a3c81413d3e21d9e2551847d9231c28493f9492"
    "org/apache/commons/commons-compress/1.26.2/commons-compress-1.26.2.jar 9168a03141d8fc7eda21a2360d83cc0412bcbb1d6204d992bd48c2573cb3c6b8"
    "io/airlift/aircompressor/0.27/aircompressor-0.27.jar fdbef3137a28f63bb0cb93487803080ede746a4ec3d421e36c6f0c305c35e5e4"
    "org/apache/httpcomponents/client5/httpclient5/5.5/httpclient5-5.5.jar 496b4b0e8d5f3a8139a5d2638486d304758bac3a9c39d76989f663cfd9354fc9"
    "org/apache/httpcomponents/core5/httpcore5/5.3.4/httpcore5-5.3.4.jar f2b2fd7a0164e8c3120cd8437bc9fea439239e165c17262b3e907daa7e979f80"
    "org/apache/httpcomponents/core5/httpcore5-h2/5.3.4/httpcore5-h2-5.3.4.jar 1fb4f34e4b612e7c127ad693335583587850b17ce9b1c366f9de1ca49fe2c781"
    "com/fasterxml/jackson/core/jackson-core/2.19.2/jackson-core-2.19.2.jar aa77eaf29293a868c47372194f7c5287d77d9370b04ea25d3fffc1e4904b5880"
    "com/fasterxml/jackson/core/jackson-databind/2.19.2/jackson-databind-2.19.2.jar 0a1bd4e9b0d670e632d40ee8c625ad376233502f03c2f5889baea95d025b47a7"
    "com/fasterxml/jackson/core/jackson-annotations/2.19.2/jackson-annotations-2.19.2.jar e516743a316dcf83c572ffc9cb6e8c5e8c134880c8c5155b02f7b34e9c5dc3cf"
    "com/github/ben-manes/caffeine/caffeine/2.9.3/caffeine-2.9.3.jar 1e0a7bbef1dd791653143f3f05d0e489934bf5481e58a87c9e619cd46b68729b"
    "org/roaringbitmap/RoaringBitmap/1.3.0/RoaringBitmap-1.3.0.jar 73443a71a2e2401c7d518a487983539fcaf5f9652efbd178f929e7b6d36881d0"
    "org/eclipse/jetty/jetty-server/11.0.25/jetty-server-11.0.25.jar 710652a7dccc0590cd0af2798dd3c4c93a777e7fb591d89d7cf02a4839bf0dd8"
    "org/eclipse/jetty/jetty-servlet/11.0.25/jetty-servlet-11.0.25.jar 641eb7725c8aa27ff4f35e71b826f6c3fff5ce745d6997e520eafb887e3623ec"
    "org/eclipse/jetty/jetty-http/11.0.25/jetty-http-11.0.25.jar 7ae3f8055557e6cea13980eaa37eaf9d546cd57a2d358aa7cb2e5de7c4946169"
    "org/eclipse/jetty/jetty-io/11.0.25/jetty-io-11.0.25.jar 6d5859f4ce88156c86aac0fa62d27a768d8f100aa6da5c13a82ec3c9ea16a349"
    "org/eclipse/jetty/jetty-util/11.0.25/jetty-util-11.0.25.jar 801ce0baaaf9a269fade7172dadd290c707f3bcdaf22b4292c323f6548b05959"
    "org/eclipse/jetty/jetty-security/11.0.25/jetty-security-11.0.25.jar 861a0be80a4dfa7935a89113d4ac4ed76505f079b22c9e2f1a84017908bbcd57"
    "org/eclipse/jetty/toolchain/jetty-jakarta-servlet-api/5.0.2/jetty-jakarta-servlet-api-5.0.2.jar efb20997729f32bfa6c8a8319037c353f7ad460d5d49f336bf232998ea2358db"
    "org/apache/hadoop/hadoop-client-api/3.4.1/hadoop-client-api-3.4.1.jar a964d4daa054c9615bbafb4553efbb140fa7fb9ac6f358a24393f183a5703438"
    "org/apache/hadoop/hadoop-client-runtime/3.4.1/hadoop-client-runtime-3.4.1.jar f6a800a159f918670db533606d33560d6c13b7e13f14eda493280ae33b9eeb2f"
    "org/xerial/sqlite-jdbc/3.46.1.3/sqlite-jdbc-3.46.1.3.jar 4a4832720a65eaf7f4d6fd7ede52087b994dc5633c076f9e994dc0c8b4b0b4fa"
    "org/slf4j/slf4j-api/2.0.17/slf4j-api-2.0.17.jar 7b751d952061954d5abfed7181c1f645d336091b679891591d63329c622eb832"
    "commons-logging/commons-logging/1.2/commons-logging-1.2.jar daddea1ea0be0f56978ab3006b8ac92834afeefbd9b7e4e6316fca57df0fa636"
)

for entry in "${JARS[@]}"; do
    path="${entry% *}"
    sum="${entry#* }"
    file="$DIR/$(basename "$path")"
    if [ -f "$file" ] && echo "$sum  $file" | sha256sum --check --status; then
        continue
    fi
    curl -sfSL --retry 3 -o "$file.part" "$MAVEN/$path"
    echo "$sum  $file.part" | sha256sum --check --status || {
        echo "SHA-256 mismatch for $path" >&2
        rm -f "$file.part"
        exit 1
    }
    mv "$file.part" "$file"
done
echo "iceberg REST server jars present: $DIR" >&2
