import java.lang.reflect.Field;
import java.lang.reflect.Proxy;
import java.time.Clock;
import java.util.List;
import java.util.Map;
import java.util.Set;
import io.opentelemetry.api.OpenTelemetry;
import jakarta.enterprise.inject.Instance;
import org.apache.commons.lang3.function.TriConsumer;
import org.apache.polaris.core.auth.PolarisPrincipal;
import org.apache.polaris.core.context.CallContext;
import org.apache.polaris.core.context.RealmContext;
import org.apache.polaris.core.entity.TaskEntity;
import org.apache.polaris.core.persistence.MetaStoreManagerFactory;
import org.apache.polaris.service.context.catalog.PolarisPrincipalHolder;
import org.apache.polaris.service.context.catalog.RealmContextHolder;
import org.apache.polaris.service.events.PolarisEventMetadata;
import org.apache.polaris.service.events.PolarisEventMetadataFactory;
import org.apache.polaris.service.events.listeners.NoOpPolarisEventListener;
import org.apache.polaris.service.task.TaskExecutorImpl;
import org.apache.polaris.service.task.TaskFileIOSupplier;
import org.apache.polaris.service.task.TaskHandler;

/**
 * Polaris 1.4.1's own TaskExecutorImpl, built without CDI (our code). Its constructor's
 * collaborators are what a server without optional parts injects: Polaris's no-op event
 * listener, a no-op OpenTelemetry tracer, realm and principal holders scoped to each attempt as
 * Quarkus scopes them; the event metadata factory (whose own needs Quarkus's request context)
 * hands out one fixed metadata.
 * {@code init()} registers Polaris's three cleanup handlers as Polaris does; each is then
 * wrapped to record what it returned, and every attempt of the executor is recorded in the
 * {@link TaskTracker}, which is also its thread pool and its error handler.
 */
final class OracleTaskExecutor extends TaskExecutorImpl {
  // What the handler of the attempt running on this thread returned (none: no handler took it).
  private static final ThreadLocal<String> HANDLER_RESULT = new ThreadLocal<>();
  private final TaskTracker tracker;

  private OracleTaskExecutor(
      String realm,
      Clock clock,
      MetaStoreManagerFactory factory,
      TaskFileIOSupplier supplier,
      TaskTracker tracker) {
    super(
        tracker,
        errorHandler(tracker),
        clock,
        factory,
        supplier,
        new RequestScoped.Realm(),
        new NoOpPolarisEventListener(),
        new FixedEventMetadata(realm),
        OpenTelemetry.noop().getTracer("polaris-purge-oracle"),
        new RequestScoped.Principal(),
        PolarisPrincipal.of("polaris-purge-oracle", Map.of(), Set.of()));
    this.tracker = tracker;
  }

  /** The executor with Polaris's own handlers, as {@code init()} registers them. */
  static OracleTaskExecutor create(
      String realm,
      Clock clock,
      MetaStoreManagerFactory factory,
      TaskFileIOSupplier supplier,
      TaskTracker tracker)
      throws ReflectiveOperationException {
    OracleTaskExecutor executor = new OracleTaskExecutor(realm, clock, factory, supplier, tracker);
    executor.init();
    Field field = TaskExecutorImpl.class.getDeclaredField("taskHandlers");
    field.setAccessible(true);
    @SuppressWarnings("unchecked")
    List<TaskHandler> handlers = (List<TaskHandler>) field.get(executor);
    if (handlers.size() != 3) {
      throw new IllegalStateException("init() registered " + handlers.size() + " handlers, not 3");
    }
    handlers.replaceAll(Recorded::new);
    return executor;
  }

  /**
   * One attempt, as Polaris's server runs it: Polaris annotates this method
   * {@code @ActivateRequestContext}, so each attempt has request-scoped realm and principal
   * holders of its own (RequestScoped here).
   */
  @Override
  protected void handleTaskWithTracing(
      String realm,
      long id,
      CallContext context,
      PolarisPrincipal principal,
      PolarisEventMetadata metadata,
      int attempt) {
    HANDLER_RESULT.remove();
    RequestScoped.enter();
    try {
      super.handleTaskWithTracing(realm, id, context, principal, metadata, attempt);
    } catch (RuntimeException | Error e) {
      tracker.attempt(id, "threw " + PolarisTaskHarness.message(e));
      throw e;
    } finally {
      RequestScoped.exit();
    }
    String result = HANDLER_RESULT.get();
    tracker.attempt(id, result == null ? "no handler" : result);
  }

  /** A CDI Instance of the error handler: resolvable, the tracker. */
  @SuppressWarnings("unchecked")
  private static Instance<TriConsumer<Long, Boolean, Throwable>> errorHandler(TaskTracker tracker) {
    return (Instance<TriConsumer<Long, Boolean, Throwable>>)
        Proxy.newProxyInstance(
            Instance.class.getClassLoader(),
            new Class<?>[] {Instance.class},
            (proxy, method, args) ->
                switch (method.getName()) {
                  case "isResolvable" -> true;
                  case "isUnsatisfied", "isAmbiguous" -> false;
                  case "get" -> tracker;
                  default -> throw new UnsupportedOperationException(method.getName());
                });
  }

  /** Polaris's handler, recording what it returns for the attempt's thread. */
  private record Recorded(TaskHandler handler) implements TaskHandler {
    @Override
    public boolean canHandleTask(TaskEntity task) {
      return handler.canHandleTask(task);
    }

    @Override
    public boolean handleTask(TaskEntity task, CallContext context) {
      boolean done = handler.handleTask(task, context);
      HANDLER_RESULT.set(done ? "succeeded" : "returned false");
      return done;
    }
  }

  /**
   * The request-scoped holders of the attempt running on this thread. The executor holds one
   * holder of each kind; these delegate to the current attempt's own (Polaris's classes).
   */
  private static final class RequestScoped {
    private static final ThreadLocal<RealmContextHolder> REALM = new ThreadLocal<>();
    private static final ThreadLocal<PolarisPrincipalHolder> PRINCIPAL = new ThreadLocal<>();

    static void enter() {
      REALM.set(new RealmContextHolder());
      PRINCIPAL.set(new PolarisPrincipalHolder());
    }

    static void exit() {
      REALM.remove();
      PRINCIPAL.remove();
    }

    static final class Realm extends RealmContextHolder {
      @Override
      public RealmContext get() {
        return REALM.get().get();
      }

      @Override
      public void set(RealmContext realm) {
        REALM.get().set(realm);
      }
    }

    /** Its get(), which falls back to Quarkus's identity, is not called by the cleanup path. */
    static final class Principal extends PolarisPrincipalHolder {
      @Override
      public void set(PolarisPrincipal principal) {
        PRINCIPAL.get().set(principal);
      }
    }
  }

  /** One event metadata for every event (the listener is Polaris's no-op one). */
  private static final class FixedEventMetadata extends PolarisEventMetadataFactory {
    private final PolarisEventMetadata metadata;

    FixedEventMetadata(String realm) {
      metadata = PolarisEventMetadata.builder().realmId(realm).build();
    }

    @Override
    public PolarisEventMetadata create() {
      return metadata;
    }

    @Override
    public PolarisEventMetadata copy(PolarisEventMetadata original) {
      return original;
    }
  }
}
