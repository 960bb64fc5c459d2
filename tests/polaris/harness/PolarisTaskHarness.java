import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.lang.reflect.RecordComponent;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.polaris.core.entity.AsyncTaskType;
import org.apache.polaris.core.entity.PolarisBaseEntity;
import org.apache.polaris.core.entity.TaskEntity;
import org.apache.iceberg.ManifestFile;
import org.apache.iceberg.ManifestFiles;
import org.apache.polaris.core.persistence.PolarisObjectMapperUtil;
import org.apache.polaris.core.storage.StorageLocation;

/**
 * Asks one Polaris release's own classes about the task rows of a metastore (our code, not
 * Polaris's; scripts/install-polaris-classes.sh compiles it with the release's jars and the
 * Release class of the release's API generation, api-1.0/ or api-1.4/).
 *
 * <pre>
 * describe JDBC_URL REALM              one JSON line per task row (type_code 8) of the realm:
 *                                      TaskEntity.getTaskType(), parseTaskState, readData
 *                                      into the class the release's handler reads, and for a
 *                                      MANIFEST row its manifestFileData decoded as the
 *                                      release's handler decodes it
 * lease JDBC_URL REALM NOW EXECUTOR    one JSON line per metastore manager: the task ids its
 *                                      loadTasks leases at NOW over the in-memory TreeMap
 *                                      persistence holding copies of the rows. NOW is epoch
 *                                      ms, or clock+N: this JVM's clock when it leases, plus N ms
 * locations                            reads "A TAB B" lines from stdin; one JSON line each:
 *                                      StorageLocation.of(A).isChildOf(of(B)) and the reverse
 * </pre>
 *
 * Connection user and password come from PGUSER / PGPASSWORD when the URL has none.
 */
public final class PolarisTaskHarness {
  static final ObjectMapper JSON = new ObjectMapper();
  static final String SERVICE_TASKS = "org.apache.polaris.service.task.";
  // What each release's handler reads a task's data into (TableCleanupTaskHandler,
  // ManifestFileCleanupTaskHandler, BatchFileCleanupTaskHandler).
  static final Map<String, String> DATA_CLASS =
      Map.of(
          "ENTITY_CLEANUP_SCHEDULER", PolarisBaseEntity.class.getName(),
          "MANIFEST_FILE_CLEANUP", SERVICE_TASKS + "ManifestFileCleanupTaskHandler$ManifestCleanupTask",
          "BATCH_FILE_CLEANUP", SERVICE_TASKS + "BatchFileCleanupTaskHandler$BatchFileCleanupTask");

  private PolarisTaskHarness() {}

  static final String TASK_UTILS = SERVICE_TASKS + "TaskUtils";

  public static void main(String[] args) throws Exception {
    if (args.length == 1 && args[0].equals("locations")) {
      locations();
      return;
    }
    if (args.length < 3) {
      throw new IllegalArgumentException(
          "usage: describe|lease JDBC_URL REALM [NOW EXECUTOR] | locations");
    }
    List<PolarisBaseEntity> tasks = readTasks(args[1], args[2]);
    Release.enter(args[2]);
    switch (args[0]) {
      case "describe" -> {
        for (PolarisBaseEntity task : tasks) {
          print(describe(task));
        }
      }
      case "lease" -> {
        for (String manager : List.of("transactional", "atomic")) {
          Map<String, Object> out = new LinkedHashMap<>();
          out.put("manager", manager);
          // Read per manager, just before it leases: "clock" is the real clock then.
          long now =
              args[3].startsWith("clock+")
                  ? System.currentTimeMillis() + Long.parseLong(args[3].substring(6))
                  : Long.parseLong(args[3]);
          out.put("now", now);
          try {
            out.put("leased", Release.loadTasks(args[2], tasks, now, args[4], manager));
          } catch (RuntimeException e) {
            out.put("error", message(e));
          }
          print(out);
        }
      }
      default -> throw new IllegalArgumentException("unknown command " + args[0]);
    }
  }

  static List<PolarisBaseEntity> readTasks(String url, String realm) throws Exception {
    String user = System.getenv().getOrDefault("PGUSER", "postgres");
    String password = System.getenv().getOrDefault("PGPASSWORD", "");
    List<PolarisBaseEntity> out = new ArrayList<>();
    try (Connection connection = DriverManager.getConnection(url, user, password);
        PreparedStatement select =
            connection.prepareStatement(
                "SELECT catalog_id, id, parent_id, type_code, name, entity_version,"
                    + " sub_type_code, create_timestamp, drop_timestamp, purge_timestamp,"
                    + " to_purge_timestamp, last_update_timestamp, properties,"
                    + " internal_properties, grant_records_version"
                    + " FROM polaris_schema.entities WHERE realm_id = ? AND type_code = 8"
                    + " ORDER BY id")) {
      select.setString(1, realm);
      try (ResultSet rows = select.executeQuery()) {
        while (rows.next()) {
          out.add(
              Release.entity(
                  new Row(
                      rows.getLong(1),
                      rows.getLong(2),
                      rows.getLong(3),
                      rows.getInt(4),
                      rows.getString(5),
                      rows.getInt(6),
                      rows.getInt(7),
                      rows.getLong(8),
                      rows.getLong(9),
                      rows.getLong(10),
                      rows.getLong(11),
                      rows.getLong(12),
                      rows.getString(13),
                      rows.getString(14),
                      rows.getInt(15))));
        }
      }
    }
    return out;
  }

  static Map<String, Object> describe(PolarisBaseEntity row) {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("id", row.getId());
    out.put("name", row.getName());
    TaskEntity task;
    try {
      task = TaskEntity.of(row);
    } catch (RuntimeException e) {
      out.put("taskEntityError", message(e));
      return out;
    }
    String type = null;
    try {
      AsyncTaskType taskType = task.getTaskType();
      type = taskType == null ? null : taskType.name();
      out.put("taskType", type);
    } catch (RuntimeException e) {
      out.put("taskTypeError", message(e));
    }
    PolarisObjectMapperUtil.TaskExecutionState state = PolarisObjectMapperUtil.parseTaskState(row);
    if (state == null) {
      out.put("state", null);
    } else {
      Map<String, Object> parsed = new LinkedHashMap<>();
      parsed.put("executor", state.getExecutor());
      parsed.put("lastAttemptStartTime", state.getLastAttemptStartTime());
      parsed.put("attemptCount", state.getAttemptCount());
      out.put("state", parsed);
    }
    String className = type == null ? null : DATA_CLASS.get(type);
    if (className != null) {
      out.put("data", readData(task, className));
    }
    if ("MANIFEST_FILE_CLEANUP".equals(type)) {
      out.put("manifest", decodeManifest(row));
    }
    return out;
  }

  /**
   * The row's manifestFileData decoded by the release's TaskUtils.decodeManifestFileData where
   * it is served (1.4.1), else by what that method calls: Base64 then Iceberg's
   * ManifestFiles.decode, of the Iceberg release polaris-core depends on.
   */
  static Map<String, Object> decodeManifest(PolarisBaseEntity row) {
    Map<String, Object> out = new LinkedHashMap<>();
    try {
      String data = JSON.readTree(row.getProperties()).path("data").asText();
      String encoded = JSON.readTree(data).path("manifestFileData").asText();
      ManifestFile manifest;
      Method taskUtils = null;
      try {
        taskUtils = Class.forName(TASK_UTILS).getMethod("decodeManifestFileData", String.class);
      } catch (ClassNotFoundException e) {
        // not served at this release
      }
      if (taskUtils != null) {
        out.put("decoder", "TaskUtils.decodeManifestFileData");
        manifest = (ManifestFile) taskUtils.invoke(null, encoded);
      } else {
        out.put("decoder", "ManifestFiles.decode");
        manifest = ManifestFiles.decode(Base64.getDecoder().decode(encoded));
      }
      out.put("ok", true);
      out.put("path", manifest.path());
      out.put("length", manifest.length());
      out.put("content", manifest.content().name());
      out.put("specId", manifest.partitionSpecId());
      out.put("snapshotId", manifest.snapshotId());
    } catch (Exception e) {
      Throwable cause = e instanceof java.lang.reflect.InvocationTargetException ? e.getCause() : e;
      out.put("ok", false);
      out.put("error", message(cause));
    }
    return out;
  }

  /** "A TAB B" lines from stdin, each judged by the release's StorageLocation. */
  static void locations() throws Exception {
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      if (line.isEmpty()) {
        continue;
      }
      String[] pair = line.split("\t", 2);
      Map<String, Object> out = new LinkedHashMap<>();
      out.put("a", pair[0]);
      out.put("b", pair[1]);
      try {
        StorageLocation a = StorageLocation.of(pair[0]);
        StorageLocation b = StorageLocation.of(pair[1]);
        out.put("aChildOfB", a.isChildOf(b));
        out.put("bChildOfA", b.isChildOf(a));
        out.put("equals", a.equals(b));
      } catch (RuntimeException e) {
        out.put("error", message(e));
      }
      print(out);
    }
  }

  static Map<String, Object> readData(TaskEntity task, String className) {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("class", className);
    Class<?> klass;
    try {
      klass = Class.forName(className);
    } catch (ClassNotFoundException e) {
      out.put("available", false);
      return out;
    }
    out.put("available", true);
    try {
      Object value = task.readData(klass);
      out.put("ok", value != null);
      out.put("value", fields(value));
    } catch (RuntimeException e) {
      out.put("ok", false);
      out.put("error", message(e));
    }
    return out;
  }

  /** What the decoded object holds: a record's components, an entity's persisted fields. */
  static Map<String, Object> fields(Object value) {
    Map<String, Object> out = new LinkedHashMap<>();
    if (value == null) {
      return out;
    }
    if (value.getClass().isRecord()) {
      for (RecordComponent component : value.getClass().getRecordComponents()) {
        try {
          Object field = component.getAccessor().invoke(value);
          out.put(component.getName(), field instanceof List<?> ? field : String.valueOf(field));
        } catch (ReflectiveOperationException e) {
          out.put(component.getName(), "unreadable: " + e);
        }
      }
    } else if (value instanceof PolarisBaseEntity entity) {
      out.put("id", entity.getId());
      out.put("typeCode", entity.getTypeCode());
      out.put("subTypeCode", entity.getSubTypeCode());
      out.put("name", entity.getName());
      out.put("properties", entity.getProperties());
      out.put("internalProperties", entity.getInternalProperties());
    }
    return out;
  }

  /** The exception and its causes, one line. */
  static String message(Throwable e) {
    StringBuilder out = new StringBuilder();
    for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
      if (out.length() > 0) {
        out.append(" | caused by ");
      }
      out.append(t.getClass().getName()).append(": ").append(String.valueOf(t.getMessage()));
    }
    return out.toString().replaceAll("\\s*\\R\\s*", " ");
  }

  static void print(Object value) throws Exception {
    System.out.println(JSON.writeValueAsString(value));
  }

  /** One row of polaris_schema.entities, as the JDBC persistence reads it. */
  record Row(
      long catalogId,
      long id,
      long parentId,
      int typeCode,
      String name,
      int entityVersion,
      int subTypeCode,
      long createTimestamp,
      long dropTimestamp,
      long purgeTimestamp,
      long toPurgeTimestamp,
      long lastUpdateTimestamp,
      String properties,
      String internalProperties,
      int grantRecordsVersion) {}
}
