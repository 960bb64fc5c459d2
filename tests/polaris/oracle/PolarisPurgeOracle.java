import java.io.File;
import java.net.URI;
import java.time.Clock;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.iceberg.Files;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.OutputFile;
import org.apache.polaris.core.PolarisCallContext;
import org.apache.polaris.core.PolarisDefaultDiagServiceImpl;
import org.apache.polaris.core.PolarisDiagnostics;
import org.apache.polaris.core.entity.PolarisBaseEntity;
import org.apache.polaris.core.entity.PolarisEntityType;
import org.apache.polaris.core.entity.TaskEntity;
import org.apache.polaris.core.persistence.MetaStoreManagerFactory;
import org.apache.polaris.core.persistence.PolarisMetaStoreManager;
import org.apache.polaris.core.persistence.PrincipalSecretsGenerator;
import org.apache.polaris.core.persistence.transactional.TransactionalMetaStoreManagerImpl;
import org.apache.polaris.core.persistence.transactional.TreeMapMetaStore;
import org.apache.polaris.core.persistence.transactional.TreeMapTransactionalPersistenceImpl;
import org.apache.polaris.core.storage.PolarisStorageIntegrationProvider;
import org.apache.polaris.service.task.TaskFileIOSupplier;

/**
 * Polaris 1.4.1's own purge, run on the task rows of a realm (our code, not Polaris's; built by
 * scripts/install-polaris-classes.sh for the releases whose polaris-runtime-service is served).
 *
 * <pre>
 * purge JDBC_URL REALM [refuse-deletes|stop-after=N]
 * </pre>
 *
 * The realm's task rows (PostgreSQL, as PolarisTaskHarness reads them) are copied into Polaris's
 * in-memory TreeMap metastore and handed, all at once, to the release's own TaskExecutorImpl
 * (OracleTaskExecutor), which runs them with its own handlers (TableCleanupTaskHandler,
 * ManifestFileCleanupTaskHandler, BatchFileCleanupTaskHandler, over a TaskFileIOSupplier) under
 * its own rules: its attempts and the delays between them, the children the table handler
 * hands back to it, the row dropped when a handler returns true. The run ends when the executor
 * is done with every task (TaskTracker).
 *
 * Files are local: a FileIO of ours over java.io records every delete call (and deletes, unless
 * refuse-deletes; stop-after=N refuses every delete after the N-th). One JSON line: the paths
 * deleted, the delete calls, each task's attempts (in the order tasks were handed to the
 * executor), the children Polaris created (name, type, data) and the rows left (id, name, type,
 * data).
 */
public final class PolarisPurgeOracle {
  // Longer than any purge here, shorter than the Python side's 120 s limit on the JVM.
  static final long IDLE_TIMEOUT_MS = 100_000;

  private PolarisPurgeOracle() {}

  public static void main(String[] args) throws Exception {
    if (args.length < 3 || !args[0].equals("purge")) {
      throw new IllegalArgumentException("usage: purge JDBC_URL REALM [refuse-deletes|stop-after=N]");
    }
    int allowedDeletes = Integer.MAX_VALUE;
    if (args.length > 3) {
      allowedDeletes =
          args[3].equals("refuse-deletes") ? 0 : Integer.parseInt(args[3].substring("stop-after=".length()));
    }
    List<PolarisBaseEntity> rows = PolarisTaskHarness.readTasks(args[1], args[2]);
    PolarisTaskHarness.print(run(args[2], rows, allowedDeletes));
  }

  static Map<String, Object> run(String realm, List<PolarisBaseEntity> rows, int allowedDeletes)
      throws Exception {
    PolarisDiagnostics diagnostics = new PolarisDefaultDiagServiceImpl();
    TreeMapTransactionalPersistenceImpl store =
        new TreeMapTransactionalPersistenceImpl(
            diagnostics,
            new TreeMapMetaStore(diagnostics),
            Release.unused(PolarisStorageIntegrationProvider.class),
            PrincipalSecretsGenerator.RANDOM_SECRETS);
    PolarisCallContext context = new PolarisCallContext(() -> realm, store);
    store.runActionInTransaction(
        context,
        () -> rows.forEach(row -> store.writeEntityInCurrentTxn(context, row, true, null)));
    Clock clock = Clock.systemUTC();
    PolarisMetaStoreManager manager = new TransactionalMetaStoreManagerImpl(clock, diagnostics);
    MetaStoreManagerFactory factory =
        (MetaStoreManagerFactory)
            java.lang.reflect.Proxy.newProxyInstance(
                MetaStoreManagerFactory.class.getClassLoader(),
                new Class<?>[] {MetaStoreManagerFactory.class},
                (proxy, method, margs) -> {
                  if (method.getName().equals("getOrCreateMetaStoreManager")) {
                    return manager;
                  }
                  throw new UnsupportedOperationException(method.getName());
                });
    RecordingFileIO io = new RecordingFileIO(allowedDeletes);
    // The release's TaskFileIOSupplier, its FileIO the recording one (no storage integration).
    TaskFileIOSupplier supplier =
        new TaskFileIOSupplier(null, null) {
          @Override
          public FileIO apply(TaskEntity task, TableIdentifier identifier) {
            return io;
          }
        };
    Set<Long> given = new HashSet<>();
    Map<Long, String> names = new ConcurrentHashMap<>();
    for (PolarisBaseEntity row : rows) {
      given.add(row.getId());
      names.put(row.getId(), row.getName());
    }
    // A child is described when the table handler hands it to the executor: it may be done
    // (and its row dropped) before the parent's run ends.
    List<Map<String, Object>> created = Collections.synchronizedList(new ArrayList<>());
    TaskTracker tracker =
        new TaskTracker(
            id -> {
              if (!given.contains(id)) {
                PolarisBaseEntity entity = load(manager, context, id);
                if (entity != null) {
                  names.put(id, entity.getName());
                  created.add(describe(entity));
                }
              }
            });
    OracleTaskExecutor executor = OracleTaskExecutor.create(realm, clock, factory, supplier, tracker);
    for (PolarisBaseEntity row : rows) {
      executor.addTaskHandlerContext(row.getId(), context);
    }
    tracker.awaitIdle(IDLE_TIMEOUT_MS);
    tracker.shutdown();

    List<Map<String, Object>> runs = new ArrayList<>();
    tracker
        .attempts()
        .forEach(
            (id, attempts) -> {
              Map<String, Object> run = new LinkedHashMap<>();
              run.put("id", id);
              run.put("name", names.get(id));
              run.put("attempts", attempts);
              runs.add(run);
            });
    List<Map<String, Object>> left = new ArrayList<>();
    for (long id : tracker.attempts().keySet().stream().sorted().toList()) {
      PolarisBaseEntity entity = load(manager, context, id);
      if (entity != null) {
        left.add(describe(entity));
      }
    }
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("deleted", io.deleted.stream().sorted().toList());
    out.put("deleteCalls", io.calls.get());
    out.put("runs", runs);
    out.put("created", List.copyOf(created));
    out.put("left", left);
    return out;
  }

  static PolarisBaseEntity load(PolarisMetaStoreManager manager, PolarisCallContext context, long id) {
    var result = manager.loadEntity(context, 0L, id, PolarisEntityType.TASK);
    return result.isSuccess() ? result.getEntity() : null;
  }

  static Map<String, Object> describe(PolarisBaseEntity entity) {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("id", entity.getId());
    out.put("name", entity.getName());
    try {
      var props = PolarisTaskHarness.JSON.readTree(entity.getProperties());
      out.put("taskType", props.path("taskType").asText());
      out.put("data", props.path("data").asText());
    } catch (Exception e) {
      out.put("propertiesError", PolarisTaskHarness.message(e));
    }
    return out;
  }

  /** Local files; records every delete call. Deletes allowedDeletes files, then refuses. */
  static final class RecordingFileIO implements FileIO {
    final Set<String> deleted = ConcurrentHashMap.newKeySet();
    final AtomicInteger calls = new AtomicInteger();
    final AtomicInteger done = new AtomicInteger();
    final int allowedDeletes;

    RecordingFileIO(int allowedDeletes) {
      this.allowedDeletes = allowedDeletes;
    }

    static File local(String path) {
      return path.startsWith("file:") ? new File(URI.create(path.replaceFirst("^file:/+", "file:///"))) : new File(path);
    }

    @Override
    public InputFile newInputFile(String path) {
      return Files.localInput(local(path));
    }

    @Override
    public OutputFile newOutputFile(String path) {
      return Files.localOutput(local(path));
    }

    @Override
    public void deleteFile(String path) {
      calls.incrementAndGet();
      if (done.incrementAndGet() > allowedDeletes) {
        throw new RuntimeException("delete refused by the test's storage: " + path);
      }
      File file = local(path);
      if (file.delete()) {
        deleted.add(path);
        // Hadoop's local FileSystem, Polaris's FileIO for file:, deletes the checksum sidecar.
        new File(file.getParentFile(), "." + file.getName() + ".crc").delete();
      }
    }
  }
}
