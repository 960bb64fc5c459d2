import java.io.File;
import java.net.URI;
import java.time.Clock;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
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
import org.apache.polaris.service.task.BatchFileCleanupTaskHandler;
import org.apache.polaris.service.task.ManifestFileCleanupTaskHandler;
import org.apache.polaris.service.task.TableCleanupTaskHandler;
import org.apache.polaris.service.task.TaskExecutor;
import org.apache.polaris.service.task.TaskFileIOSupplier;
import org.apache.polaris.service.task.TaskHandler;

/**
 * Polaris 1.4.1's own purge, run on the task rows of a realm (our code, not Polaris's; built by
 * scripts/install-polaris-classes.sh for the releases whose polaris-runtime-service is served).
 *
 * <pre>
 * purge JDBC_URL REALM [refuse-deletes|stop-after=N]
 * </pre>
 *
 * The realm's task rows (PostgreSQL, as PolarisTaskHarness reads them) are copied into Polaris's
 * in-memory TreeMap metastore; each runs through the release's own handlers
 * (TableCleanupTaskHandler, ManifestFileCleanupTaskHandler, BatchFileCleanupTaskHandler, built
 * with a TaskFileIOSupplier), under the release's executor rules (TaskExecutorImpl): a handler
 * that throws is tried again, 3 attempts in all; one that returns true has its row dropped; one
 * that returns false is left. The children a TableCleanupTaskHandler creates run after it, in
 * the order it created them. TaskExecutorImpl itself is not used: its constructor needs CDI,
 * OpenTelemetry and the event classes of modules the registry does not serve; nor are its
 * delays between attempts (1 s x attempt), which change no outcome here.
 *
 * Files are local: a FileIO of ours over java.io records every delete call (and deletes, unless
 * refuse-deletes; stop-after=N refuses every delete after the N-th). One JSON line: the paths
 * deleted, the delete calls, each handler run, the children Polaris created (name, type, data)
 * and the rows left (id, name, type, data).
 */
public final class PolarisPurgeOracle {
  static final int ATTEMPTS = 3; // TaskExecutorImpl's

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
    List<Long> queue = Collections.synchronizedList(new ArrayList<>());
    TaskExecutor executor = (taskId, callContext) -> queue.add(taskId);
    ExecutorService deletes = Executors.newFixedThreadPool(4);
    List<TaskHandler> handlers =
        List.of(
            new TableCleanupTaskHandler(executor, clock, factory, supplier),
            new ManifestFileCleanupTaskHandler(supplier, deletes),
            new BatchFileCleanupTaskHandler(supplier, deletes));

    List<Map<String, Object>> runs = new ArrayList<>();
    List<Map<String, Object>> created = new ArrayList<>();
    for (PolarisBaseEntity row : rows) {
      queue.clear();
      runs.add(runTask(row.getId(), manager, context, handlers));
      for (long child : List.copyOf(queue)) {
        PolarisBaseEntity entity = load(manager, context, child);
        if (entity != null) {
          created.add(describe(entity));
        }
      }
      for (long child : List.copyOf(queue)) {
        runs.add(runTask(child, manager, context, handlers));
      }
    }
    deletes.shutdown();
    deletes.awaitTermination(60, TimeUnit.SECONDS);

    List<Map<String, Object>> left = new ArrayList<>();
    Set<Long> seen = new java.util.HashSet<>();
    for (PolarisBaseEntity row : rows) {
      seen.add(row.getId());
    }
    for (Map<String, Object> child : created) {
      seen.add((Long) child.get("id"));
    }
    for (long id : seen.stream().sorted().toList()) {
      PolarisBaseEntity entity = load(manager, context, id);
      if (entity != null) {
        left.add(describe(entity));
      }
    }
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("deleted", io.deleted.stream().sorted().toList());
    out.put("deleteCalls", io.calls.get());
    out.put("runs", runs);
    out.put("created", created);
    out.put("left", left);
    return out;
  }

  static PolarisBaseEntity load(PolarisMetaStoreManager manager, PolarisCallContext context, long id) {
    var result = manager.loadEntity(context, 0L, id, PolarisEntityType.TASK);
    return result.isSuccess() ? result.getEntity() : null;
  }

  /** One task under TaskExecutorImpl's rules: 3 attempts while the handler throws. */
  static Map<String, Object> runTask(
      long id, PolarisMetaStoreManager manager, PolarisCallContext context, List<TaskHandler> handlers) {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("id", id);
    List<String> attempts = new ArrayList<>();
    out.put("attempts", attempts);
    for (int attempt = 1; attempt <= ATTEMPTS; attempt++) {
      PolarisBaseEntity entity = load(manager, context, id);
      if (entity == null) {
        attempts.add("row gone");
        break;
      }
      TaskEntity task = TaskEntity.of(entity);
      out.put("name", task.getName());
      TaskHandler handler = null;
      for (TaskHandler candidate : handlers) {
        try {
          if (candidate.canHandleTask(task)) {
            handler = candidate;
            break;
          }
        } catch (RuntimeException e) {
          // a row whose type or data does not decode: no handler takes it
        }
      }
      if (handler == null) {
        attempts.add("no handler");
        continue;
      }
      try {
        if (handler.handleTask(task, context)) {
          manager.dropEntityIfExists(context, null, entity, Map.of(), false);
          attempts.add("succeeded");
        } else {
          attempts.add("returned false");
        }
        break;
      } catch (RuntimeException e) {
        attempts.add("threw " + PolarisTaskHarness.message(e));
      }
    }
    return out;
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
