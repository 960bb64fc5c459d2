import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.function.LongConsumer;
import org.apache.commons.lang3.function.TriConsumer;

/**
 * When Polaris's TaskExecutorImpl is done with every task it was given (our code). It is the
 * executor's {@code Executor} and its optional error handler, the hook through which the
 * executor reports each task: {@code (id, true, null)} when a task is handed to it,
 * {@code (id, false, null)} when an attempt returned, {@code (id, false, e)} when an attempt
 * threw. After a throw the executor either schedules the next attempt on this Executor from the
 * same thread, or gives up; which one is seen here, so the executor's own attempt limit decides,
 * not a copy of it.
 */
final class TaskTracker implements TriConsumer<Long, Boolean, Throwable>, Executor {
  private final ExecutorService pool = Executors.newFixedThreadPool(4);
  // Set on the thread that reported a throw until it schedules the retry (or its run ends).
  private final ThreadLocal<Long> retryUndecided = new ThreadLocal<>();
  private final LongConsumer onScheduled;
  private final Map<Long, List<String>> attempts = new LinkedHashMap<>();
  private int pending;

  TaskTracker(LongConsumer onScheduled) {
    this.onScheduled = onScheduled;
  }

  @Override
  public void accept(Long id, Boolean handedOver, Throwable thrown) {
    if (handedOver) {
      synchronized (this) {
        pending++;
        attempts.putIfAbsent(id, new ArrayList<>());
      }
      onScheduled.accept(id);
    } else if (thrown == null) {
      finished();
    } else {
      retryUndecided.set(id);
    }
  }

  @Override
  public void execute(Runnable command) {
    retryUndecided.remove(); // a retry being scheduled, or any other work: still pending
    pool.execute(
        () -> {
          try {
            command.run();
          } finally {
            if (retryUndecided.get() != null) { // a throw and no retry: the executor gave up
              retryUndecided.remove();
              finished();
            }
          }
        });
  }

  /** What one attempt of task {@code id} did, in the order the attempts ran. */
  synchronized void attempt(long id, String outcome) {
    attempts.computeIfAbsent(id, k -> new ArrayList<>()).add(outcome);
  }

  /** Each task handed to the executor, in that order, with its attempts. */
  synchronized Map<Long, List<String>> attempts() {
    Map<Long, List<String>> out = new LinkedHashMap<>();
    attempts.forEach((id, list) -> out.put(id, List.copyOf(list)));
    return out;
  }

  private synchronized void finished() {
    pending--;
    notifyAll();
  }

  /** Waits until no task is pending (the executor's delays between attempts included). */
  synchronized void awaitIdle(long timeoutMs) throws InterruptedException {
    long deadline = System.currentTimeMillis() + timeoutMs;
    while (pending > 0) {
      long left = deadline - System.currentTimeMillis();
      if (left <= 0) {
        throw new IllegalStateException(pending + " tasks still pending after " + timeoutMs + " ms");
      }
      wait(left);
    }
  }

  void shutdown() throws InterruptedException {
    pool.shutdown();
    pool.awaitTermination(60, TimeUnit.SECONDS);
  }
}
