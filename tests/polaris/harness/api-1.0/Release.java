import java.lang.reflect.Proxy;
import java.time.Clock;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.List;
import org.apache.polaris.core.PolarisCallContext;
import org.apache.polaris.core.PolarisDefaultDiagServiceImpl;
import org.apache.polaris.core.PolarisDiagnostics;
import org.apache.polaris.core.config.PolarisConfigurationStore;
import org.apache.polaris.core.context.CallContext;
import org.apache.polaris.core.entity.PolarisBaseEntity;
import org.apache.polaris.core.entity.PolarisEntitySubType;
import org.apache.polaris.core.entity.PolarisEntityType;
import org.apache.polaris.core.persistence.AtomicOperationMetaStoreManager;
import org.apache.polaris.core.persistence.PolarisMetaStoreManager;
import org.apache.polaris.core.persistence.PrincipalSecretsGenerator;
import org.apache.polaris.core.persistence.pagination.PageToken;
import org.apache.polaris.core.persistence.transactional.TransactionalMetaStoreManagerImpl;
import org.apache.polaris.core.persistence.transactional.TreeMapMetaStore;
import org.apache.polaris.core.persistence.transactional.TreeMapTransactionalPersistenceImpl;
import org.apache.polaris.core.storage.PolarisStorageIntegrationProvider;

/**
 * The harness's release-specific part for Polaris 1.0 to 1.3 (our code): entities are built
 * with setters, TaskEntity reads its type and data through the thread's CallContext, and the
 * clock and configuration come with the PolarisCallContext.
 */
final class Release {
  private Release() {}

  static PolarisBaseEntity entity(PolarisTaskHarness.Row r) {
    PolarisEntityType type = PolarisEntityType.fromCode(r.typeCode());
    PolarisEntitySubType subType = PolarisEntitySubType.fromCode(r.subTypeCode());
    PolarisBaseEntity entity =
        new PolarisBaseEntity(r.catalogId(), r.id(), type, subType, r.parentId(), r.name());
    entity.setEntityVersion(r.entityVersion());
    entity.setCreateTimestamp(r.createTimestamp());
    entity.setDropTimestamp(r.dropTimestamp());
    entity.setPurgeTimestamp(r.purgeTimestamp());
    entity.setToPurgeTimestamp(r.toPurgeTimestamp());
    entity.setLastUpdateTimestamp(r.lastUpdateTimestamp());
    entity.setProperties(r.properties());
    entity.setInternalProperties(r.internalProperties());
    entity.setGrantRecordsVersion(r.grantRecordsVersion());
    return entity;
  }

  /** TaskEntity.getTaskType and readData read the thread's CallContext in these releases. */
  static void enter(String realm) {
    PolarisDiagnostics diagnostics = new PolarisDefaultDiagServiceImpl();
    CallContext.setCurrentContext(
        context(realm, diagnostics, new TreeMapMetaStore(diagnostics), Clock.systemUTC()));
  }

  static List<Long> loadTasks(
      String realm, List<PolarisBaseEntity> rows, long now, String executor, String manager) {
    PolarisDiagnostics diagnostics = new PolarisDefaultDiagServiceImpl();
    PolarisCallContext context =
        context(
            realm,
            diagnostics,
            new TreeMapMetaStore(diagnostics),
            Clock.fixed(Instant.ofEpochMilli(now), ZoneOffset.UTC));
    TreeMapTransactionalPersistenceImpl store =
        (TreeMapTransactionalPersistenceImpl) context.getMetaStore();
    store.runActionInTransaction(
        context,
        () -> rows.forEach(row -> store.writeEntityInCurrentTxn(context, row, true, null)));
    PolarisMetaStoreManager metaStoreManager =
        manager.equals("atomic")
            ? new AtomicOperationMetaStoreManager()
            : new TransactionalMetaStoreManagerImpl();
    return metaStoreManager
        .loadTasks(context, executor, PageToken.readEverything())
        .getEntities()
        .stream()
        .map(PolarisBaseEntity::getId)
        .sorted()
        .toList();
  }

  /** Default configuration (so POLARIS_TASK_TIMEOUT_MILLIS is the release's default). */
  static PolarisCallContext context(
      String realm, PolarisDiagnostics diagnostics, TreeMapMetaStore treeMap, Clock clock) {
    TreeMapTransactionalPersistenceImpl store =
        new TreeMapTransactionalPersistenceImpl(
            treeMap,
            unused(PolarisStorageIntegrationProvider.class),
            PrincipalSecretsGenerator.RANDOM_SECRETS);
    return new PolarisCallContext(
        () -> realm, store, diagnostics, new PolarisConfigurationStore() {}, clock);
  }

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
