import java.lang.reflect.Proxy;
import java.time.Clock;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.List;
import org.apache.polaris.core.PolarisCallContext;
import org.apache.polaris.core.PolarisDefaultDiagServiceImpl;
import org.apache.polaris.core.PolarisDiagnostics;
import org.apache.polaris.core.entity.PolarisBaseEntity;
import org.apache.polaris.core.persistence.AtomicOperationMetaStoreManager;
import org.apache.polaris.core.persistence.PolarisMetaStoreManager;
import org.apache.polaris.core.persistence.PrincipalSecretsGenerator;
import org.apache.polaris.core.persistence.pagination.PageToken;
import org.apache.polaris.core.persistence.transactional.TransactionalMetaStoreManagerImpl;
import org.apache.polaris.core.persistence.transactional.TreeMapMetaStore;
import org.apache.polaris.core.persistence.transactional.TreeMapTransactionalPersistenceImpl;
import org.apache.polaris.core.storage.PolarisStorageIntegrationProvider;

/** The harness's release-specific part for Polaris 1.4 and later (our code). */
final class Release {
  private Release() {}

  /** The entity as the release's JDBC persistence builds it from a row (its Builder). */
  static PolarisBaseEntity entity(PolarisTaskHarness.Row r) {
    return new PolarisBaseEntity.Builder()
        .catalogId(r.catalogId())
        .id(r.id())
        .typeCode(r.typeCode())
        .subTypeCode(r.subTypeCode())
        .parentId(r.parentId())
        .name(r.name())
        .entityVersion(r.entityVersion())
        .createTimestamp(r.createTimestamp())
        .dropTimestamp(r.dropTimestamp())
        .purgeTimestamp(r.purgeTimestamp())
        .toPurgeTimestamp(r.toPurgeTimestamp())
        .lastUpdateTimestamp(r.lastUpdateTimestamp())
        .properties(r.properties())
        .internalProperties(r.internalProperties())
        .grantRecordsVersion(r.grantRecordsVersion())
        .build();
  }

  /** Nothing to set up: TaskEntity needs no call context from 1.4 on. */
  static void enter(String realm) {}

  /** The ids the manager's own loadTasks leases at {@code now}, over copies of the rows. */
  static List<Long> loadTasks(
      String realm, List<PolarisBaseEntity> rows, long now, String executor, String manager) {
    PolarisDiagnostics diagnostics = new PolarisDefaultDiagServiceImpl();
    TreeMapTransactionalPersistenceImpl store =
        new TreeMapTransactionalPersistenceImpl(
            diagnostics,
            new TreeMapMetaStore(diagnostics),
            unused(PolarisStorageIntegrationProvider.class),
            PrincipalSecretsGenerator.RANDOM_SECRETS);
    PolarisCallContext context = new PolarisCallContext(() -> realm, store);
    store.runActionInTransaction(
        context,
        () -> rows.forEach(row -> store.writeEntityInCurrentTxn(context, row, true, null)));
    Clock clock = Clock.fixed(Instant.ofEpochMilli(now), ZoneOffset.UTC);
    PolarisMetaStoreManager metaStoreManager =
        manager.equals("atomic")
            ? new AtomicOperationMetaStoreManager(clock, diagnostics)
            : new TransactionalMetaStoreManagerImpl(clock, diagnostics);
    return metaStoreManager
        .loadTasks(context, executor, PageToken.readEverything())
        .getEntities()
        .stream()
        .map(PolarisBaseEntity::getId)
        .sorted()
        .toList();
  }

  /** An implementation of an interface the leasing path never calls. */
  static <T> T unused(Class<T> type) {
    return type.cast(
        Proxy.newProxyInstance(
            type.getClassLoader(),
            new Class<?>[] {type},
            (proxy, method, args) -> {
              throw new UnsupportedOperationException(type.getSimpleName() + "." + method.getName());
            }));
  }
}
