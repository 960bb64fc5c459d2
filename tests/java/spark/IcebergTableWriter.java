import java.util.List;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

/**
 * Writes real Iceberg tables with Iceberg's Java library through Spark, on the local file system.
 *
 * <p>Usage: {@code IcebergTableWriter WAREHOUSE_URI TABLE...} where each TABLE is
 * {@code NAME:FORMAT_VERSION}. Each table gets a partitioned schema, several commits, row-level
 * deletes in merge-on-read mode (position delete files in v2, deletion vectors in v3), Puffin
 * table statistics and partition statistics. Files go through Hadoop's local file system, which
 * writes a {@code .NAME.crc} checksum beside each one, as in a Polaris deployment on {@code
 * file:} storage.
 *
 * <p>The catalog is Iceberg's Hadoop catalog, the one that needs nothing but the file system. Its
 * {@code metadata/version-hint.text} pointer is the only file it writes that a table held by
 * Polaris does not have (no metadata file names it). For each
 * table, one line {@code TABLE<TAB>NAME<TAB>LOCATION<TAB>METADATA_LOCATION} is printed.
 */
public final class IcebergTableWriter {
  private IcebergTableWriter() {}

  public static void main(String[] args) {
    String warehouse = args[0];
    SparkSession spark =
        SparkSession.builder()
            .master("local[1]")
            .appName("iceberg-table-writer")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "1")
            .config("spark.default.parallelism", "1")
            // A few rows per table: compiling generated code costs more than it saves.
            .config("spark.sql.codegen.wholeStage", "false")
            .config("spark.sql.adaptive.enabled", "false")
            .config(
                "spark.sql.extensions",
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
            .config("spark.sql.catalog.cat", "org.apache.iceberg.spark.SparkCatalog")
            .config("spark.sql.catalog.cat.type", "hadoop")
            .config("spark.sql.catalog.cat.warehouse", warehouse)
            .getOrCreate();
    try {
      spark.sql("CREATE NAMESPACE IF NOT EXISTS cat.db");
      for (int i = 1; i < args.length; i++) {
        String[] spec = args[i].split(":");
        write(spark, spec[0], spec[1]);
      }
    } finally {
      spark.stop();
    }
  }

  private static void write(SparkSession spark, String name, String formatVersion) {
    String table = "cat.db." + name;
    spark.sql(
        "CREATE TABLE "
            + table
            + " (id BIGINT, category STRING, amount DOUBLE) USING iceberg"
            + " PARTITIONED BY (category)"
            + " TBLPROPERTIES ('format-version'='"
            + formatVersion
            + "', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read',"
            + " 'write.merge.mode'='merge-on-read')");
    spark.sql(
        "INSERT INTO " + table + " VALUES (1, 'a', 1.0), (2, 'a', 2.0), (3, 'b', 3.0), (4, 'c', double('NaN'))");
    spark.sql("INSERT INTO " + table + " VALUES (5, 'b', 5.0), (6, 'c', 6.0), (7, NULL, 7.0)");
    // Row-level deletes: position delete files (v2) or deletion vectors in Puffin files (v3).
    spark.sql("DELETE FROM " + table + " WHERE id IN (1, 5)");
    spark.sql("CALL cat.system.compute_table_stats(table => 'db." + name + "')");
    spark.sql("CALL cat.system.compute_partition_stats(table => 'db." + name + "')");
    spark.sql("INSERT INTO " + table + " VALUES (8, 'a', 8.0)");
    List<Row> location =
        spark.sql("SELECT file FROM " + table + ".metadata_log_entries ORDER BY timestamp DESC LIMIT 1")
            .collectAsList();
    String metadataLocation = location.get(0).getString(0);
    String tableLocation =
        spark.sql("DESCRIBE TABLE EXTENDED " + table).filter("col_name = 'Location'")
            .collectAsList().get(0).getString(1);
    System.out.println("TABLE\t" + name + "\t" + tableLocation + "\t" + metadataLocation);
  }
}
